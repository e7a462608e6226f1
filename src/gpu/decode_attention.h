// Decode attention on the GPU: one new query token per FA head against the cached keys/values of its
// KV group (the single-token step of model/llama_forward.cpp's causal GQA attention), split over keys
// (flash-decoding): each block takes one split of a head's keys (gpu/decode_splits.h: 64 keys a split up to
// 64 splits, longer splits past 4K keys) and writes its softmax partial (running max, sum, unnormalised
// output); the head's last block to finish merges the partials (one launch).
//
//   o[h] = softmax_j(scale * q[h] . k[j, kv(h)]) v[j, kv(h)],  j in [0, L)
// Layouts: q, o: (n_q, D) bf16, heads contiguous; k, v: the cache rows (>= L, n_kv, D) bf16;
// q, k, v 16-byte aligned; kv_index: (n_q) int32 in DEVICE memory, the KV slot of each query head (any map:
// head-granular hybrids have groups of unequal size); D in {64, 128}. fp32 scores, softmax statistics and
// accumulation (base-2 exponentials). partials: decode_attention_workspace_floats(n_q, D, L) fp32, cleared
// once after allocation (decode_attention_workspace_clear: its per-head counters); the kernel leaves them
// clear. decode_attention_dev is the CUDA-graph form: the same kernels read L from device memory when they
// run. Every CUDA call is checked (hydra::Error on failure); asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/decode_splits.h"
#include "ops/cuda/device_arena.h"

namespace hydra::gpu {

// Sliding windows of the query heads (the head-level sliding-window baseline): window (n_q int32 in DEVICE
// memory, or null = every head full); a head with W > 0 sees only the keys [L - W, L) and the first `sinks`.
struct DecodeWindows {
    const int32_t* window = nullptr;
    int64_t sinks = 0;
};

// fp32 elements of the partials buffer for any length up to L keys (a fixed block of counters first, then the
// partials).
size_t decode_attention_workspace_floats(int64_t n_q, int64_t D, int64_t L);
// Zeroes the counters of a freshly allocated workspace, of this kernel or the paged one (asynchronous).
void decode_attention_workspace_clear(float* workspace, cudaStream_t stream = nullptr);
// Grows `buf` to at least `floats` (decode_attention_workspace_floats or the paged kernel's), clearing the
// counters of a new allocation; returns buf's data. Every owner of a workspace allocates it through this.
float* ensure_decode_attention_workspace(cuda::DeviceBuffer<float>& buf, int64_t floats, cudaStream_t stream);

void decode_attention(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                      const __nv_bfloat16* v, const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D,
                      int64_t L, float scale, float* partials, cudaStream_t stream = nullptr,
                      const DecodeWindows& windows = {});

// Graph form: L = *kv_len (device int32), read by the kernels when they run, so one captured launch serves
// every L with decode_attention_splits(L) <= max_splits (<= kMaxDecodeSplits). The grid has max_splits
// splits per head; blocks past L's last split exit at once. Same kernels and split boundaries as
// decode_attention, so the output is identical bit for bit. partials: decode_attention_workspace_floats for
// the longest L.
void decode_attention_dev(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                          const __nv_bfloat16* v, const int32_t* kv_index, int64_t n_q, int64_t n_kv,
                          int64_t D, const int32_t* kv_len, int64_t max_splits, float scale, float* partials,
                          cudaStream_t stream = nullptr, const DecodeWindows& windows = {});

}  // namespace hydra::gpu
