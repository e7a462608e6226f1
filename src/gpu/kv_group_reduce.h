// The backward of duplicating K/V per FA head (head-granularity plans, whose FA heads do not read their
// KV groups in the uniform GQA pattern the attention kernels assume): the forward gathers each head's own
// copy of its group's K and V (ops/cuda/elementwise.h gather_heads, (N, n_fa, D)); the backward sums the
// per-head dK / dV back onto the groups here.
// Checked and asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

// dst (N, n_kv, D) bf16 OVERWRITTEN: dst[n, g] = sum of src[n, h] over the heads h < n_fa with
// kv_index[h] == g, summed in fp32 in head order and rounded once (zero for a group no head reads).
// src (N, n_fa, D) bf16; kv_index (n_fa) int32 in DEVICE memory, values in [0, n_kv).
void reduce_heads_by_group(__nv_bfloat16* dst, const __nv_bfloat16* src, const int32_t* kv_index, int64_t N,
                           int64_t n_fa, int64_t n_kv, int64_t D, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
