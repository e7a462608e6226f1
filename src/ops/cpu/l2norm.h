// Row-wise L2 normalisation y = x / sqrt(sum(x^2) + eps) (the q/k normalisation of Gated DeltaNet,
// gdn.md §1.1 step 3: eps = 1e-6 inside the square root), and its backward pass.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// x, y: (N, C); rstd: (N) = 1 / sqrt(sum x^2 + eps), saved for the backward (may be null).
// y may alias x. The sum of squares is accumulated in double.
template <typename T>
void l2norm_forward(T* y, T* rstd, const T* x, int64_t N, int64_t C, double eps = 1e-6);

// Backward from the forward's output: dx = rstd * (dy - (dy . y) y), row by row.
// dy, y, dx: (N, C); rstd: (N). dx is OVERWRITTEN and may alias dy.
template <typename T>
void l2norm_backward(T* dx, const T* dy, const T* y, const T* rstd, int64_t N, int64_t C);

}  // namespace hydra::cpu
