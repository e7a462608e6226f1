// Gated RMSNorm of the Gated DeltaNet output on the GPU (mirror of ops/cpu/gated_rmsnorm.h, gdn.md §1.1
// step 4), per (token, value head) over its D channels: out = o * rsqrt(mean(o^2) + eps) * w[h] * silu(z).
// Norm first, then the SiLU gate (the gate is not normalised). One warp per (token, head).
//
// Layouts: o, out, dout, d_o: (N, HV, D) bf16 contiguous; z, dz: (N, HV, D) bf16, token rows z_stride /
// dz_stride elements apart (0 = HV * D; lets z live in a fused projection output); w, dw: (HV, D) fp32;
// rstd: (N, HV) fp32 saved by the forward (may be null for inference), required by the backward.
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// out OVERWRITTEN (may alias o), rstd OVERWRITTEN when not null.
void gated_rmsnorm_forward(bf16* out, float* rstd, const bf16* o, const bf16* z, int64_t z_stride, const float* w,
                           int64_t N, int64_t HV, int64_t D, float eps, cudaStream_t stream = nullptr);

// d_o, dz OVERWRITTEN (each may alias dout, not each other); dw ACCUMULATED (+=, null = frozen;
// deterministic: fixed token blocks summed in order, scratch from cudaMallocAsync on `stream`).
void gated_rmsnorm_backward(bf16* d_o, bf16* dz, int64_t dz_stride, float* dw, const bf16* dout, const bf16* o,
                            const bf16* z, int64_t z_stride, const float* w, const float* rstd, int64_t N, int64_t HV,
                            int64_t D, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
