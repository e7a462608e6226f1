// Scale-normalized fusion of a mixed layer's head outputs before the shared o_proj (methods.md §3):
// FA softmax heads output value averages, GDN heads output gated RMS-normalised vectors, so the two
// groups live on different scales. The fusion puts them on one learnable scale. Kinds (HybridPlan):
//   scale-norm  every head h: y_h = x_h * rsqrt(mean(x_h^2) + eps) * s_h      s: (H, Dh)
//   la-only     the same for LA heads only (FA heads untouched)               s: (n_la, Dh)
//   hymba       per group g in {FA, LA}: y_g = f * x_g * rsqrt(mean over the group's width + eps) * s_g,
//               f = 1/2 when both groups exist (Hymba's average), else 1
//               s_fa: (n_fa*Dh), s_la: (n_la*Dh)
//   none        identity
// With HybridPlan::la_bias the scale-norm, la-only and hymba kinds then add b_j to LA head j:   b: (n_la, Dh)
// Layers without LA heads are never fused: a pure FA layer is exactly the teacher's layer.
#pragma once

#include <cstdint>

#include "model/hybrid_plan.h"

namespace hydra {

// The fusion parameters of one layer (null where the kind has none).
template <typename T>
struct FusionParams {
    const T* head_scale = nullptr;  // scale-norm: (H, Dh); la-only: (n_la, Dh)
    const T* fa_scale = nullptr;    // hymba: (n_fa * Dh)
    const T* la_scale = nullptr;    // hymba: (n_la * Dh)
    const T* la_bias = nullptr;     // la_bias plans: (n_la, Dh), added after the scaling
};
template <typename T>
struct FusionGrads {
    T* head_scale = nullptr;
    T* fa_scale = nullptr;
    T* la_scale = nullptr;
    T* la_bias = nullptr;
};

// heads: (T, H, Dh) in the layer's head order (n_fa FA heads first, then n_la LA heads).
// out may alias heads (in place). Does nothing useful when the layer has no LA head (copies).
template <typename T>
void fusion_forward(T* out, const T* heads, int64_t num_tokens, int64_t n_fa, int64_t n_la, int64_t Dh,
                    FusionKind kind, const FusionParams<T>& params, double eps);

// Backward: dheads OVERWRITTEN (may alias dout), parameter gradients ACCUMULATED (+=).
// heads: the forward's input (not its output).
template <typename T>
void fusion_backward(T* dheads, const FusionGrads<T>& grads, const T* dout, const T* heads, int64_t num_tokens,
                     int64_t n_fa, int64_t n_la, int64_t Dh, FusionKind kind, const FusionParams<T>& params,
                     double eps);

// Whether a layer with this split carries fusion parameters / does any normalisation.
inline bool fusion_active(FusionKind kind, int64_t n_la) { return kind != FusionKind::None && n_la > 0; }

}  // namespace hydra
