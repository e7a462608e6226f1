// RMSNorm on the CPU: out = x / sqrt(mean(x^2) + eps) * w, row by row, and its backward pass.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// x, out: (N, C); w: (C); rstd: (N) saved for the backward pass, may be null. out may alias x.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int64_t C, double eps);

// Backward of rmsnorm_forward. dy, x, dx: (N, C); w, dw: (C); rstd: (N) as saved by the forward.
// dx is OVERWRITTEN (dx may alias dy: each row is read before it is written), or ACCUMULATED (+=) when
// accumulate_dx is set (a residual stream adding the norm's input gradient; then dx must not alias dy);
// dw is ACCUMULATED (+=), dw may be null when the weight is frozen.
// dw is summed over rows in double, column-block parallel, so it does not depend on the thread count.
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t C,
                      bool accumulate_dx = false);

}  // namespace hydra::cpu
