// Gated RMSNorm of the Gated DeltaNet output (gdn.md §1.1 step 4), per (token, value head) over its V
// channels: out = o * rsqrt(mean(o^2) + eps) * w * silu(z). Norm first, then the SiLU gate; the gate
// is not normalised. One weight row per value head. Forward and backward.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// o, z, out: (T, HV, V); w: (HV, V); rstd: (T, HV) saved for the backward (may be null).
// out may alias o. Mean square accumulated in double.
template <typename T>
void gated_rmsnorm_forward(T* out, T* rstd, const T* o, const T* z, const T* w, int64_t num_tokens, int64_t HV,
                           int64_t V, double eps);

// Backward of gated_rmsnorm_forward; dout: (T, HV, V), rstd as saved.
// d_o and dz (T, HV, V) are OVERWRITTEN (each may alias dout, not each other); dw (HV, V) is
// ACCUMULATED (+=, null = frozen), summed over tokens in double, column-block parallel.
template <typename T>
void gated_rmsnorm_backward(T* d_o, T* dz, T* dw, const T* dout, const T* o, const T* z, const T* w,
                            const T* rstd, int64_t num_tokens, int64_t HV, int64_t V);

}  // namespace hydra::cpu
