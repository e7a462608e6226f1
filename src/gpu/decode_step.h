// The per-step inputs of a single-token decode step in device memory, so that one captured CUDA graph
// serves every step (gpu_forward.h): before each replay one tiny kernel writes the token id and the
// position; the graph's kernels read them when they run (RoPE angle, K/V cache row, attention length).
// Every CUDA call is checked (hydra::Error on failure); asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

// Device-side step record: pos = the new token's position (its K/V cache row), kv_len = pos + 1 (keys the
// decode attention reads, the new one included).
struct DecodeStep {
    int32_t pos = 0;
    int32_t kv_len = 0;
};

// ids[0] = token, *step = {pos, pos + 1}. One thread; the values travel as kernel arguments, so the host
// needs no pinned staging buffer and may issue the next step at once.
void set_decode_step(int32_t* ids, DecodeStep* step, int32_t token, int32_t pos, cudaStream_t stream);

// The new token's K and V rows into the cache: k_cache[step->pos] = k, v_cache[step->pos] = v, each row
// `width` bf16 (n_kv * Dh), k/v the fused projection's (contiguous) k and v parts. Graph form of the
// row copies of the eager path (same bytes).
void write_kv_row(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* k, const __nv_bfloat16* v,
                  int64_t width, const DecodeStep* step, cudaStream_t stream);

}  // namespace hydra::gpu
