// Causal grouped-query softmax attention on the CPU, reading keys/values from a cache, and its
// backward pass for training (queries and keys are the same T positions).
#pragma once

#include <cstdint>

namespace hydra::cpu {

// q: (T, H, Dh) queries for absolute positions pos0 .. pos0+T-1.
// k, v: (S, Hkv, Dh) with S >= pos0 + T: the cache rows for positions 0 .. pos0+T-1 are read.
// out: (T, H, Dh). Query head h reads KV head h / (H / Hkv) (grouped, as HF repeat_kv).
// probs: optional (T, H, pos0+T) row-major buffer receiving the attention weights (for taps and
// the retrieval score); may be null.
template <typename T>
void causal_attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int64_t num_tokens,
                              int64_t pos0, int64_t H, int64_t Hkv, int64_t Dh, double scale);

// Backward of causal_attention_forward for the training case pos0 = 0 (keys/values are exactly the T rows).
// q, dq, dout: (T, H, Dh); k, v, dk, dv: (T, Hkv, Dh); query head h reads KV head h / (H / Hkv).
// probs_or_null: (T, H, T) attention weights saved by the forward (its probs output with pos0 = 0); when
// null the softmax is recomputed row by row (activation recomputation: O(T H) extra memory, not T^2 H).
// dq, dk, dv are OVERWRITTEN; the contributions of the H / Hkv query heads sharing a KV head are summed
// inside. No output may alias an input. Parallel over (token, head) for dq and over (key block, KV
// head) for dk/dv, so there are no races and results do not depend on the thread count.
template <typename T>
void causal_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                               const T* probs_or_null, int64_t num_tokens, int64_t H, int64_t Hkv, int64_t Dh,
                               double scale);

}  // namespace hydra::cpu
