// RMSNorm on the GPU (mirror of ops/cpu/rmsnorm.h): y = x / sqrt(mean(x^2) + eps) * w per row, reading
// the fp32 residual stream and writing the bf16 GEMM input (or fp32, e.g. before the LM head), and the
// backward that adds the input gradient into the fp32 residual gradient.
//
// Layouts (row-major, contiguous): x, dx: (N, C) fp32; y, dy: (N, C) bf16 or fp32; w, dw: (C) fp32;
// rstd: (N) fp32 = 1 / sqrt(mean(x^2) + eps), written by the forward (may be null for inference) and
// read by the backward. One warp per row (C any size).
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// y OVERWRITTEN (bf16), rstd OVERWRITTEN when not null.
void rmsnorm_forward(bf16* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps,
                     cudaStream_t stream = nullptr);
// The same with an fp32 output (y may alias x).
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps,
                     cudaStream_t stream = nullptr);

// Backward: dx (N, C) fp32 is ACCUMULATED (+=, the residual gradient); dw (C) fp32 is ACCUMULATED (+=;
// null = frozen), summed deterministically (fixed row blocks, then the blocks in order; device scratch
// from cudaMallocAsync on `stream`). rstd as saved by the forward.
void rmsnorm_backward(float* dx, float* dw, const bf16* dy, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C, cudaStream_t stream = nullptr);
// The same with an fp32 dy.
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C, cudaStream_t stream = nullptr);
// The same, also writing dx_bf16 (N, C) = bf16(dx) after the update (OVERWRITTEN; null = not written): the
// bf16 copy the backward GEMMs read, without a separate cast pass over dx.
void rmsnorm_backward(float* dx, bf16* dx_bf16, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t N, int64_t C, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
