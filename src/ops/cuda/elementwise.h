// Small element-wise GPU helpers the model needs around the GEMMs: fp32 <-> bf16 casts, residual adds,
// bias add and its backward (column sums), and head gather / scatter between (N, H, D) tensors.
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// dst (n) OVERWRITTEN; round to nearest even. dst may not alias src.
void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream = nullptr);
void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream = nullptr);

// Residual adds, ACCUMULATED: y (n) fp32 += x (n) (bf16 or fp32), times `scale`.
void add_to_f32(float* y, const bf16* x, int64_t n, float scale = 1.0f, cudaStream_t stream = nullptr);
void add_to_f32(float* y, const float* x, int64_t n, float scale = 1.0f, cudaStream_t stream = nullptr);

// y (N, F) bf16, rows `stride` elements apart (0 = F): y[n, f] += bias[f] (bias (F) fp32), in place.
void bias_add(bf16* y, const float* bias, int64_t N, int64_t F, int64_t stride, cudaStream_t stream = nullptr);
// dbias (F) fp32 ACCUMULATED with the column sums of dy (N, F) bf16 (rows `stride` apart, 0 = F).
// Deterministic: fixed row blocks summed in order (scratch from cudaMallocAsync on `stream`).
void bias_backward(float* dbias, const bf16* dy, int64_t N, int64_t F, int64_t stride, cudaStream_t stream = nullptr);

// Head gather: dst (N, n_sel, D) OVERWRITTEN with dst[n, j] = src[n, heads[j]], src (N, H_src, D);
// heads: (n_sel) int32 in [0, H_src), in DEVICE memory. bf16.
void gather_heads(bf16* dst, const bf16* src, const int32_t* heads, int64_t N, int64_t H_src, int64_t n_sel, int64_t D,
                  cudaStream_t stream = nullptr);
// Head scatter (the gather's backward / inverse): dst[n, heads[j]] = src[n, j] (OVERWRITTEN, or ACCUMULATED
// in fp32 then rounded when accumulate), dst (N, H_dst, D), src (N, n_sel, D); other heads of dst untouched.
// heads in DEVICE memory, no repeats.
void scatter_heads(bf16* dst, const bf16* src, const int32_t* heads, int64_t N, int64_t H_dst, int64_t n_sel,
                   int64_t D, bool accumulate, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
