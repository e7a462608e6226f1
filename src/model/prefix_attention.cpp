// Shared-prefix attention of independent single-token rows (see prefix_attention.h).
#include "model/prefix_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/gemm.h"

namespace hydra {

namespace {

// Grow-only scratch of the calling thread (the scoring sweeps run one job per thread).
template <typename T>
T* scratch(std::vector<T>& buf, int64_t n) {
    if (buf.size() < size_t(n)) buf.resize(size_t(n));
    return buf.data();
}

// Rows of group g packed (n*G, Dh) from / into an (n, H, Dh) tensor.
template <typename T>
void pack_group(T* dst, const T* src, int64_t n, int64_t H, int64_t G, int64_t g, int64_t Dh) {
    for (int64_t b = 0; b < n; ++b)
        std::memcpy(dst + b * G * Dh, src + (b * H + g * G) * Dh, size_t(G * Dh) * sizeof(T));
}

}  // namespace

template <typename T>
void prefix_attention_forward(T* out, T* probs, const T* q, const T* k_own, const T* v_own, const T* Kc,
                              const T* Vc, int64_t n, int64_t P, int64_t H, int64_t Hkv, int64_t Dh,
                              double scale_d) {
    static thread_local std::vector<T> qg_buf, og_buf;
    const int64_t G = H / Hkv, KVD = Hkv * Dh, R = n * G, W = P + 1;
    const T scale = T(scale_d);
    T* qg = scratch(qg_buf, R * Dh);
    T* og = scratch(og_buf, R * Dh);
    for (int64_t g = 0; g < Hkv; ++g) {
        pack_group(qg, q, n, H, G, g, Dh);
        T* S = probs + g * R * W;
        if (P > 0) gemm(false, true, R, P, Dh, scale, qg, Dh, Kc + g * Dh, KVD, T(0), S, W);
#pragma omp parallel for schedule(static) if (R * W > 16384)
        for (int64_t r = 0; r < R; ++r) {
            const int64_t b = r / G;
            const T* kown = k_own + b * KVD + g * Dh;
            const T* qr = qg + r * Dh;
            T* s = S + r * W;
            double dot = 0;
            for (int64_t d = 0; d < Dh; ++d) dot += double(qr[d]) * double(kown[d]);
            s[P] = T(dot) * scale;
            T mx = s[0];
            for (int64_t j = 1; j < W; ++j) mx = std::max(mx, s[j]);
            double sum = 0;
            for (int64_t j = 0; j < W; ++j) {
                s[j] = std::exp(s[j] - mx);
                sum += double(s[j]);
            }
            const T inv = T(1.0 / sum);
            for (int64_t j = 0; j < W; ++j) s[j] *= inv;
        }
        if (P > 0)
            gemm(false, false, R, Dh, P, T(1), S, W, Vc + g * Dh, KVD, T(0), og, Dh);
        else
            std::fill(og, og + R * Dh, T(0));
        for (int64_t r = 0; r < R; ++r) {
            const int64_t b = r / G, j = r % G;
            const T pown = S[r * W + P];
            const T* vown = v_own + b * KVD + g * Dh;
            T* dst = out + (b * H + g * G + j) * Dh;
            for (int64_t d = 0; d < Dh; ++d) dst[d] = og[r * Dh + d] + pown * vown[d];
        }
    }
}

// With p a row's weights, dP_j = dz . v_j, dS = p (dP - sum_j p_j dP_j); dq = scale dS K;
// d k_own = scale dS_P q; d v_own = p_P dz.
template <typename T>
void prefix_attention_backward(T* dq, T* dk, T* dv, const T* dz, const T* probs, const T* q, const T* k_own,
                               const T* v_own, const T* Kc, const T* Vc, int64_t n, int64_t P, int64_t H,
                               int64_t Hkv, int64_t Dh, double scale_d) {
    static thread_local std::vector<T> dzg_buf, dqg_buf, dp_buf, ds_buf;
    const int64_t G = H / Hkv, KVD = Hkv * Dh, R = n * G, W = P + 1;
    const T scale = T(scale_d);
    T* dzg = scratch(dzg_buf, R * Dh);
    T* dqg = scratch(dqg_buf, R * Dh);
    T* dp = scratch(dp_buf, R * std::max<int64_t>(P, 1));
    T* ds = scratch(ds_buf, R * std::max<int64_t>(P, 1));
    std::fill(dk, dk + n * KVD, T(0));
    std::fill(dv, dv + n * KVD, T(0));
    for (int64_t g = 0; g < Hkv; ++g) {
        const T* pg = probs + g * R * W;
        pack_group(dzg, dz, n, H, G, g, Dh);
        if (P > 0) gemm(false, true, R, P, Dh, T(1), dzg, Dh, Vc + g * Dh, KVD, T(0), dp, P);
        for (int64_t r = 0; r < R; ++r) {
            const int64_t b = r / G, j = r % G;
            const T* pr = pg + r * W;
            const T* dzr = dzg + r * Dh;
            const T* kown = k_own + b * KVD + g * Dh;
            const T* vown = v_own + b * KVD + g * Dh;
            double dp_own = 0;
            for (int64_t d = 0; d < Dh; ++d) dp_own += double(dzr[d]) * double(vown[d]);
            double D = double(pr[P]) * dp_own;
            for (int64_t t = 0; t < P; ++t) D += double(pr[t]) * double(dp[r * P + t]);
            for (int64_t t = 0; t < P; ++t) ds[r * P + t] = T(double(pr[t]) * (double(dp[r * P + t]) - D));
            const T ds_own = T(double(pr[P]) * (dp_own - D));
            const T* qh = q + (b * H + g * G + j) * Dh;
            T* dqh = dqg + r * Dh;
            for (int64_t d = 0; d < Dh; ++d) {
                dqh[d] = scale * ds_own * kown[d];
                dk[b * KVD + g * Dh + d] += scale * ds_own * qh[d];
                dv[b * KVD + g * Dh + d] += pr[P] * dzr[d];
            }
        }
        // dq_g += scale dS K_g[0:P]
        if (P > 0) gemm(false, false, R, Dh, P, scale, ds, P, Kc + g * Dh, KVD, T(1), dqg, Dh);
        for (int64_t b = 0; b < n; ++b)
            std::memcpy(dq + (b * H + g * G) * Dh, dqg + b * G * Dh, size_t(G * Dh) * sizeof(T));
    }
}

template void prefix_attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                              const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                              int64_t, double);
template void prefix_attention_forward<double>(double*, double*, const double*, const double*, const double*,
                                               const double*, const double*, int64_t, int64_t, int64_t,
                                               int64_t, int64_t, double);
template void prefix_attention_backward<float>(float*, float*, float*, const float*, const float*,
                                               const float*, const float*, const float*, const float*,
                                               const float*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                               double);
template void prefix_attention_backward<double>(double*, double*, double*, const double*, const double*,
                                                const double*, const double*, const double*, const double*,
                                                const double*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                                double);

}  // namespace hydra
