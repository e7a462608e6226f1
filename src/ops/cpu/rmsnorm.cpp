// RMSNorm forward (see rmsnorm.h). Accumulates the mean square in double for stability.
#include "ops/cpu/rmsnorm.h"

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

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, double);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t, int64_t, double);

}  // namespace hydra::cpu
