// Causal grouped-query softmax attention on the CPU, reading keys/values from a cache.
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

}  // namespace hydra::cpu
