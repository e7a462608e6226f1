// Scale-normalised fusion of a mixed layer's head outputs before o_proj on the GPU (mirror of
// model/fusion.h, methods.md §3). Kinds (hydra::FusionKind of model/hybrid_plan.h):
//   ScaleNorm  every head h: y_h = x_h * rsqrt(mean(x_h^2) + eps) * s_h        head_scale: (H, Dh)
//   LaOnly     the same for LA heads only (FA heads copied)                    head_scale: (n_la, Dh)
//   Hymba      per group g in {FA, LA}: y_g = f * x_g * rsqrt(mean over the group's width + eps) * s_g,
//              f = 1/2 when both groups exist, else 1                        fa_scale: (n_fa*Dh), la_scale:
//              (n_la*Dh)
//   None       identity (copy); also any kind when n_la == 0 (a pure FA layer is never fused)
// With la_bias (HybridPlan::la_bias) the other kinds then add la_bias[j] to LA head j       la_bias: (n_la,
// Dh) Layouts: heads, out, dout, dheads: (N, H = n_fa + n_la, Dh) bf16 contiguous, FA heads first; scales and
// their gradients fp32. fp32 arithmetic. One warp per normalised segment (head or group) per token.
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra {
enum class FusionKind;  // model/hybrid_plan.h (opaque here: that header needs nlohmann/json)
}

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

struct FusionScales {  // null where the kind has none
    const float* head_scale = nullptr;  // ScaleNorm: (H, Dh); LaOnly: (n_la, Dh)
    const float* fa_scale = nullptr;    // Hymba: (n_fa * Dh)
    const float* la_scale = nullptr;    // Hymba: (n_la * Dh)
    const float* la_bias = nullptr;     // la_bias plans: (n_la, Dh), added after the scaling
};
struct FusionScaleGrads {  // ACCUMULATED (+=); null = frozen
    float* head_scale = nullptr;
    float* fa_scale = nullptr;
    float* la_scale = nullptr;
    float* la_bias = nullptr;
};

// out OVERWRITTEN (may alias heads: in place).
void fusion_forward(bf16* out, const bf16* heads, int64_t N, int64_t n_fa, int64_t n_la, int64_t Dh, FusionKind kind,
                    const FusionScales& scales, float eps, cudaStream_t stream = nullptr);

// dheads OVERWRITTEN (may alias dout); heads = the forward's INPUT. Scale gradients ACCUMULATED,
// deterministic (fixed token blocks summed in order, scratch from cudaMallocAsync on `stream`).
void fusion_backward(bf16* dheads, const FusionScaleGrads& grads, const bf16* dout, const bf16* heads, int64_t N,
                     int64_t n_fa, int64_t n_la, int64_t Dh, FusionKind kind, const FusionScales& scales, float eps,
                     cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
