// Decode attention on the GPU: one new query token per FA head against the cached keys/values of its
// KV group (the single-token step of model/llama_forward.cpp's causal GQA attention), split over keys
// (flash-decoding): each block takes kKeysPerSplit keys of one head and writes its softmax partial
// (running max, sum, unnormalised output), a second kernel merges the partials of a head.
//
//   o[h] = softmax_j(scale * q[h] . k[j, kv(h)]) v[j, kv(h)],  j in [0, L)
// Layouts: q, o: (n_q, D) bf16, heads contiguous; k, v: the cache rows (>= L, n_kv, D) bf16;
// kv_index: (n_q) int32 in DEVICE memory, the KV slot of each query head (any map: head-granular
// hybrids have groups of unequal size); D in {64, 128}. fp32 scores, softmax statistics and
// accumulation (base-2 exponentials). partials: decode_attention_workspace_floats(n_q, D, L) fp32.
// Every CUDA call is checked (hydra::Error on failure); asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hydra::gpu {

constexpr int64_t kKeysPerSplit = 128;

// fp32 elements of the partials buffer for up to L keys.
size_t decode_attention_workspace_floats(int64_t n_q, int64_t D, int64_t L);

void decode_attention(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                      const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D, int64_t L, float scale,
                      float* partials, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
