// Row-wise L2 normalisation forward and backward (see l2norm.h).
#include "ops/cpu/l2norm.h"

#include <cmath>

namespace hydra::cpu {

template <typename T>
void l2norm_forward(T* y, T* rstd, const T* x, int64_t N, int64_t C, double eps) {
#pragma omp parallel for schedule(static) if (N * C > 65536)
    for (int64_t n = 0; n < N; ++n) {
        const T* xr = x + n * C;
        T* yr = y + n * C;
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += double(xr[c]) * double(xr[c]);
        const double r = 1.0 / std::sqrt(ss + eps);
        if (rstd) rstd[n] = T(r);
        for (int64_t c = 0; c < C; ++c) yr[c] = T(double(xr[c]) * r);
    }
}

// y = x r with r = (|x|^2 + eps)^(-1/2): dy_i/dx_j = r delta_ij - r^3 x_i x_j, and r^2 x_i x_j = y_i y_j.
template <typename T>
void l2norm_backward(T* dx, const T* dy, const T* y, const T* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > 65536)
    for (int64_t n = 0; n < N; ++n) {
        const T* dyr = dy + n * C;
        const T* yr = y + n * C;
        T* dxr = dx + n * C;
        double dot = 0;
        for (int64_t c = 0; c < C; ++c) dot += double(dyr[c]) * double(yr[c]);
        const double r = double(rstd[n]);
        for (int64_t c = 0; c < C; ++c) dxr[c] = T(r * (double(dyr[c]) - dot * double(yr[c])));
    }
}

template void l2norm_forward<float>(float*, float*, const float*, int64_t, int64_t, double);
template void l2norm_forward<double>(double*, double*, const double*, int64_t, int64_t, double);
template void l2norm_backward<float>(float*, const float*, const float*, const float*, int64_t, int64_t);
template void l2norm_backward<double>(double*, const double*, const double*, const double*, int64_t, int64_t);

}  // namespace hydra::cpu
