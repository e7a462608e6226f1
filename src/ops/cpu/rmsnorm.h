// RMSNorm on the CPU: out = x / sqrt(mean(x^2) + eps) * w, row by row.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// x, out: (N, C); w: (C); rstd: (N) saved for the backward pass, may be null. out may alias x.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int64_t C, double eps);

}  // namespace hydra::cpu
