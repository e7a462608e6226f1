// Per-head RMSNorm on bf16 q or k rows (Qwen3's q_norm / k_norm before RoPE, the GPU mirror of the
// cpu::rmsnorm_forward / rmsnorm_backward calls over (N * heads, Dh) rows in model/llama_forward.cpp and
// model/decoder_layer.cpp):
//   y[t, h, :] = x * rsqrt(mean(x^2) + eps) * w,  w (Dh) fp32, fp32 arithmetic, bf16 in and out.
// x: (T, H, Dh) bf16 with token rows token_stride elements apart (a slice of a fused projection output,
// so q and k are normalised where the GEMM wrote them). ops/cuda/rmsnorm.h reads an fp32 residual, not bf16
// in place, hence these small kernels. One warp per (token, head) row; any Dh <= 128.
// Checked and asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

// Forward in place on x. When `pre` is not null the input rows are copied there first ((T, H, Dh), rows
// pre_stride apart), and when `rstd` is not null it receives 1 / sqrt(mean(x^2) + eps) per row ((T * H)
// fp32, row t * H + h): what the backward reads (training). Both null (inference): no extra traffic.
void head_rmsnorm_forward(__nv_bfloat16* x, int64_t token_stride, __nv_bfloat16* pre, int64_t pre_stride,
                          float* rstd, const float* w, int64_t T, int64_t H, int64_t Dh, float eps,
                          cudaStream_t stream = nullptr);

// Backward in place: dx (T, H, Dh) bf16, rows dx_stride apart, holds d loss / d y on entry and d loss / d x
// on exit (OVERWRITTEN): dx = r w g - (r^3 / Dh) sum(g w x) x. x: the forward's input (`pre`), rows x_stride
// apart; rstd as saved. dw (Dh) fp32 ACCUMULATED (+= sum over rows of g x r; null = frozen), deterministic
// (fixed row parts summed in order, ops/cuda/layer_util.cuh; stream-ordered scratch).
void head_rmsnorm_backward(__nv_bfloat16* dx, int64_t dx_stride, float* dw, const __nv_bfloat16* x,
                           int64_t x_stride, const float* w, const float* rstd, int64_t T, int64_t H,
                           int64_t Dh, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
