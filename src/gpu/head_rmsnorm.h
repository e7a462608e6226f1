// Per-head RMSNorm in place on bf16 q or k rows (Qwen3's q_norm / k_norm before RoPE, the GPU mirror of
// the cpu::rmsnorm_forward call over (T * heads, Dh) rows in model/llama_forward.cpp):
//   x[t, h, :] = x * rsqrt(mean(x^2) + eps) * w,  w (Dh) fp32, fp32 arithmetic.
// x: (T, H, Dh) bf16 with token rows token_stride elements apart (a slice of the fused projection
// output). ops/cuda/rmsnorm.h reads an fp32 residual, not bf16 in place, hence this small kernel.
// Checked and asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

void head_rmsnorm_inplace(__nv_bfloat16* x, int64_t token_stride, const float* w, int64_t T, int64_t H, int64_t Dh,
                          float eps, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
