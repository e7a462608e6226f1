// Single-row (decode, T = 1) matrix-vector products with their neighbours fused, for the latency-bound
// GPU decode step: one launch where the general path runs an RMSNorm kernel and a cuBLASLt GEMM (whose
// M = 1 kernels, split over K with a second reduction launch at these shapes, cost several microseconds
// each), so that a layer runs fewer, lighter kernels:
//   rmsnorm_gemv:  xn = bf16(x * rstd(x) * w_norm) (written when xn is not null), y = bf16(xn @ W^T)
//   gemv_add:      y = r + x @ W^T, fp32 (the residual stream; y may alias r)
//   gemv_swiglu:   act = bf16(silu(bf16(x @ Wg^T)) * bf16(x @ Wu^T))
// The roundings match the general path (normalized input and gate / up rounded to bf16 before use), the
// dot products accumulate in fp32 in another order, so results agree within bf16 rounding of the outputs.
//
// Layouts: x (in) fp32 (rmsnorm_gemv) or bf16; W (out, in) bf16 row-major (Hugging Face's layout, rows
// ld_w elements apart, 0 = in); w_norm (in) fp32; y / act (out) contiguous. One warp per output row,
// 16-byte loads of W where in % 8 == 0 and rows are 16-byte aligned, a scalar loop otherwise. in <= 12288
// (the normalized or converted input is staged in shared memory). Asynchronous on `stream`; hydra::Error
// on invalid sizes or a failed launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

void rmsnorm_gemv(bf16* y, bf16* xn, const float* x, const float* w_norm, float eps, const bf16* W,
                  int64_t ld_w, int64_t in, int64_t out, cudaStream_t stream);

void gemv_add(float* y, const float* r, const bf16* x, const bf16* W, int64_t ld_w, int64_t in, int64_t out,
              cudaStream_t stream);

void gemv_swiglu(bf16* act, const bf16* x, const bf16* Wg, const bf16* Wu, int64_t ld_w, int64_t in,
                 int64_t out, cudaStream_t stream);

}  // namespace hydra::cuda
