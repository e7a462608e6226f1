// Gated RMSNorm forward and backward (see gated_rmsnorm.h).
#include "ops/cpu/gated_rmsnorm.h"

#include <algorithm>
#include <cmath>

namespace hydra::cpu {

namespace {

template <typename T>
T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

template <typename T>
void gated_rmsnorm_forward(T* out, T* rstd, const T* o, const T* z, const T* w, int64_t num_tokens, int64_t HV,
                           int64_t V, double eps) {
    const int64_t N = num_tokens * HV;
#pragma omp parallel for schedule(static) if (N * V > 65536)
    for (int64_t n = 0; n < N; ++n) {
        const T* orow = o + n * V;
        const T* zrow = z + n * V;
        const T* wrow = w + (n % HV) * V;
        T* y = out + n * V;
        double ss = 0;
        for (int64_t c = 0; c < V; ++c) ss += double(orow[c]) * double(orow[c]);
        const T r = T(1.0 / std::sqrt(ss / double(V) + eps));
        if (rstd) rstd[n] = r;
        for (int64_t c = 0; c < V; ++c) y[c] = orow[c] * r * wrow[c] * (zrow[c] * sigmoid(zrow[c]));
    }
}

// With u_c = w_c silu(z_c) and r = (mean(o^2) + eps)^(-1/2), out_c = o_c r u_c:
//   do_c = r u_c dy_c - o_c r^3 / V * sum_j dy_j u_j o_j
//   dz_c = dy_c o_c r w_c silu'(z_c),  silu'(z) = s (1 + z (1 - s)), s = sigmoid(z)
//   dw_c += sum over tokens of dy_c o_c r silu(z_c)
template <typename T>
void gated_rmsnorm_backward(T* d_o, T* dz, T* dw, const T* dout, const T* o, const T* z, const T* w,
                            const T* rstd, int64_t num_tokens, int64_t HV, int64_t V) {
    const int64_t N = num_tokens * HV;
    if (dw) {
        // dw is the column sum of a (T, HV*V) matrix: column blocks give each thread its own slice.
        const int64_t C = HV * V;
        constexpr int64_t kBlock = 64;
        const int64_t n_blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (num_tokens * C > 32768)
        for (int64_t b = 0; b < n_blocks; ++b) {
            const int64_t c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
            double acc[kBlock] = {};
            for (int64_t t = 0; t < num_tokens; ++t) {
                const T* dyr = dout + t * C;
                const T* orow = o + t * C;
                const T* zrow = z + t * C;
                for (int64_t c = c0; c < c1; ++c) {
                    const double r = double(rstd[t * HV + c / V]);
                    const double zc = double(zrow[c]);
                    acc[c - c0] += double(dyr[c]) * double(orow[c]) * r * zc / (1.0 + std::exp(-zc));
                }
            }
            for (int64_t c = c0; c < c1; ++c) dw[c] += T(acc[c - c0]);
        }
    }
#pragma omp parallel for schedule(static) if (N * V > 32768)
    for (int64_t n = 0; n < N; ++n) {
        const T* dyr = dout + n * V;
        const T* orow = o + n * V;
        const T* zrow = z + n * V;
        const T* wrow = w + (n % HV) * V;
        T* dor = d_o + n * V;
        T* dzr = dz + n * V;
        const double r = double(rstd[n]);
        double dot = 0;  // sum_j dy_j u_j o_j
        for (int64_t c = 0; c < V; ++c) {
            const T s = sigmoid(zrow[c]);
            dot += double(dyr[c]) * double(wrow[c] * zrow[c] * s) * double(orow[c]);
        }
        const T k = T(dot * r * r * r / double(V));
        for (int64_t c = 0; c < V; ++c) {
            // Read everything at index c before writing it: d_o or dz may alias dout.
            const T dy = dyr[c], oc = orow[c], zc = zrow[c], s = sigmoid(zc);
            const T u = wrow[c] * zc * s;
            dor[c] = T(r) * u * dy - k * oc;
            dzr[c] = dy * oc * T(r) * wrow[c] * s * (T(1) + zc * (T(1) - s));
        }
    }
}

template void gated_rmsnorm_forward<float>(float*, float*, const float*, const float*, const float*, int64_t,
                                           int64_t, int64_t, double);
template void gated_rmsnorm_forward<double>(double*, double*, const double*, const double*, const double*,
                                            int64_t, int64_t, int64_t, double);
template void gated_rmsnorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                            const float*, const float*, int64_t, int64_t, int64_t);
template void gated_rmsnorm_backward<double>(double*, double*, double*, const double*, const double*,
                                             const double*, const double*, const double*, int64_t, int64_t,
                                             int64_t);

}  // namespace hydra::cpu
