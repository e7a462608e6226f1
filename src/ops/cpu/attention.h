// Causal grouped-query softmax attention on the CPU, reading keys/values from a cache, and its
// backward pass for training (queries and keys are the same T positions). Both run on GEMMs (core/gemm.h)
// per (query head, block of queries): scores = scale Q K^T, masked row softmax, then P V.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// Which KV head a query head reads. kv_head_of == nullptr: the grouped layout of HF repeat_kv, query
// head h reads KV head h / (H / Hkv) (H must be a multiple of Hkv). Otherwise kv_head_of (H entries)
// gives it explicitly: values in [0, Hkv), monotone non-decreasing as in grouped layouts; groups may have
// different sizes, and a KV head may be read by several query heads or by none (the implementation only
// needs the range, which is asserted).

// q: (T, H, Dh) queries for absolute positions pos0 .. pos0+T-1.
// k, v: (S, Hkv, Dh) with S >= pos0 + T: the cache rows for positions 0 .. pos0+T-1 are read.
// out: (T, H, Dh) OVERWRITTEN. Query head h reads KV head kv_head_of[h] (see above).
// probs: optional (T, H, pos0+T) row-major buffer receiving the attention weights (for taps, the
// retrieval score and the training backward), masked entries written as 0; may be null.
// window_of (H entries, or null = every head full): a head with window W > 0 attends only to the keys
// [p - W + 1, p] of its query at position p and to the first `sinks` keys (a sliding window with attention
// sinks); its other weights are 0.
// Parallel over (query block, head) with a static schedule; each output element is computed by one
// thread in a fixed order, so results do not depend on the thread count.
template <typename T>
void causal_attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int64_t num_tokens,
                              int64_t pos0, int64_t H, int64_t Hkv, int64_t Dh, double scale,
                              const int32_t* kv_head_of = nullptr, const int32_t* window_of = nullptr,
                              int64_t sinks = 0);

// Backward of causal_attention_forward for the training case pos0 = 0 (keys/values are exactly the T rows),
// with the forward's windows.
// q, dq, dout: (T, H, Dh); k, v, dk, dv: (T, Hkv, Dh); query head h reads KV head kv_head_of[h] (or
// h / (H / Hkv) when null), the same map as the forward.
// probs_or_null: (T, H, T) attention weights saved by the forward (its probs output with pos0 = 0); when
// null the softmax is recomputed per block of query rows (activation recomputation: O(block x T) scratch
// per thread, never T^2 H).
// dq, dk, dv are OVERWRITTEN. dk/dv of a KV head are the sums over all query heads mapped to it (0 for
// a KV head no query head reads). No output may alias an input. Parallel over query heads (each head's
// dq and its own dk/dv contributions), then a reduction over heads in a fixed order: results do not
// depend on the thread count.
template <typename T>
void causal_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                               const T* probs_or_null, int64_t num_tokens, int64_t H, int64_t Hkv, int64_t Dh,
                               double scale, const int32_t* kv_head_of = nullptr,
                               const int32_t* window_of = nullptr, int64_t sinks = 0);

}  // namespace hydra::cpu
