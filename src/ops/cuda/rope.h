// Rotary position embedding on the GPU (mirror of ops/cpu/rope.h), NEOX / HF rotate_half pairing:
// within each head dims i and i + R/2 (R = rope_dim) rotate by angle pos * theta^(-2i/R); dims >= R
// pass through. In place on bf16 q or k; the backward is the rotation by the negative angle.
//
// Layout: x: (num_seqs, T, H, Dh) bf16; token t of every sequence sits at absolute position pos0 + t.
// token_stride (the _strided overloads): elements between consecutive tokens, so q and k can be rotated
// in place inside a fused QKV GEMM output row (pass x = the row's first q or k element).
// cos, sin: (T, R/2) fp32 tables from rope_table (angles in double, like the CPU's), or, in the overloads
// taking pos0/theta, angles computed per element in double on the device (same values).
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// cos, sin: (T, rope_dim/2) OVERWRITTEN with cos/sin((pos0 + t) * theta^(-2i/rope_dim)), computed in double.
void rope_table(float* cos, float* sin, int64_t T, int64_t rope_dim, int64_t pos0, double theta,
                cudaStream_t stream = nullptr);

// In place, from a table (token t uses row t; the same table serves every sequence).
void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, const float* cos,
                  const float* sin, cudaStream_t stream = nullptr);
void rope_backward(bf16* dx, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim,
                   const float* cos, const float* sin, cudaStream_t stream = nullptr);

// In place, angles computed on the fly (decode, or one-off use).
void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  double theta, cudaStream_t stream = nullptr);
void rope_backward(bf16* dx, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                   double theta, cudaStream_t stream = nullptr);
// One token (T = 1) of H heads at x (heads contiguous), its position read from device memory (*pos) when the
// kernel runs: the CUDA-graph form of the pos0 overload (same kernel, same angles), one launch for q and k
// when k's heads follow q's.
void rope_forward_decode(bf16* x, int64_t H, int64_t Dh, int64_t rope_dim, const int32_t* pos, double theta,
                         cudaStream_t stream = nullptr);

// Strided variants: head h of token (s, t) starts at x + (s * T + t) * token_stride + h * Dh.
void rope_forward_strided(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                          int64_t rope_dim, const float* cos, const float* sin, cudaStream_t stream = nullptr);
void rope_backward_strided(bf16* dx, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                           int64_t rope_dim, const float* cos, const float* sin, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
