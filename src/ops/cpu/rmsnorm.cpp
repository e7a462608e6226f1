// RMSNorm forward and backward (see rmsnorm.h). Accumulates the mean square in double for stability.
#include "ops/cpu/rmsnorm.h"

#include <algorithm>
#include <cmath>

namespace hydra::cpu {

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int64_t N, int64_t C, double eps) {
#pragma omp parallel for schedule(static) if (N > 4)
    for (int64_t n = 0; n < N; ++n) {
        const T* xr = x + n * C;
        T* yr = out + n * C;
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += double(xr[c]) * double(xr[c]);
        const T r = T(1.0 / std::sqrt(ss / double(C) + eps));
        if (rstd) rstd[n] = r;
        for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * r * w[c];
    }
}

// y_c = x_c r w_c with r = (mean(x^2) + eps)^(-1/2), so dr/dx_c = -r^3 x_c / C and
// dx_c = r w_c dy_c - x_c r^3 / C * sum_j dy_j w_j x_j;   dw_c = sum_n dy_nc x_nc r_n.
template <typename T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N,
                      int64_t C, bool accumulate_dx) {
    if (dw) {
        // Column blocks keep every thread on its own slice of dw (no races, no per-thread copies)
        // while each row segment it reads stays contiguous.
        constexpr int64_t kBlock = 64;
        const int64_t n_blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * C > 32768)
        for (int64_t b = 0; b < n_blocks; ++b) {
            const int64_t c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
            double acc[kBlock] = {};
            for (int64_t n = 0; n < N; ++n) {
                const T* xr = x + n * C;
                const T* dyr = dy + n * C;
                const double r = double(rstd[n]);
                for (int64_t c = c0; c < c1; ++c) acc[c - c0] += double(dyr[c]) * double(xr[c]) * r;
            }
            for (int64_t c = c0; c < c1; ++c) dw[c] += T(acc[c - c0]);
        }
    }
#pragma omp parallel for schedule(static) if (N > 4)
    for (int64_t n = 0; n < N; ++n) {
        const T* xr = x + n * C;
        const T* dyr = dy + n * C;
        T* dxr = dx + n * C;
        const double r = double(rstd[n]);
        double dot = 0;  // sum_j dy_j w_j x_j
        for (int64_t c = 0; c < C; ++c) dot += double(dyr[c]) * double(w[c]) * double(xr[c]);
        const T a = T(r), b = T(dot * r * r * r / double(C));
        if (accumulate_dx)
            for (int64_t c = 0; c < C; ++c) dxr[c] += a * w[c] * dyr[c] - b * xr[c];
        else
            for (int64_t c = 0; c < C; ++c) dxr[c] = a * w[c] * dyr[c] - b * xr[c];
    }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t, int64_t,
                                      double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                      int64_t, int64_t, bool);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*,
                                       const double*, int64_t, int64_t, bool);

}  // namespace hydra::cpu
