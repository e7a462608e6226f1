// Causal GQA attention forward and backward (see attention.h). Forward: one pass per (token, head)
// with a max-subtracted softmax; parallel over tokens x heads. Backward: two passes, described below.
#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace hydra::cpu {

template <typename T>
void causal_attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int64_t num_tokens,
                              int64_t pos0, int64_t H, int64_t Hkv, int64_t Dh, double scale) {
    const int64_t group = H / Hkv;
    const int64_t S = pos0 + num_tokens;
#pragma omp parallel
    {
        std::vector<T> scores(static_cast<size_t>(S));
        std::vector<T> acc(static_cast<size_t>(Dh));
#pragma omp for schedule(dynamic, 4) collapse(2)
        for (int64_t t = 0; t < num_tokens; ++t) {
            for (int64_t h = 0; h < H; ++h) {
                const int64_t kvh = h / group;
                const int64_t n_keys = pos0 + t + 1;
                const T* qv = q + (t * H + h) * Dh;
                T max_score = -INFINITY;
                for (int64_t s = 0; s < n_keys; ++s) {
                    const T* kv = k + (s * Hkv + kvh) * Dh;
                    T dot = 0;
#pragma omp simd reduction(+ : dot)
                    for (int64_t d = 0; d < Dh; ++d) dot += qv[d] * kv[d];
                    dot *= T(scale);
                    scores[size_t(s)] = dot;
                    if (dot > max_score) max_score = dot;
                }
                T sum = 0;
                for (int64_t s = 0; s < n_keys; ++s) {
                    const T e = std::exp(scores[size_t(s)] - max_score);
                    scores[size_t(s)] = e;
                    sum += e;
                }
                const T inv = T(1) / sum;
                for (int64_t d = 0; d < Dh; ++d) acc[size_t(d)] = 0;
                for (int64_t s = 0; s < n_keys; ++s) {
                    const T p = scores[size_t(s)] * inv;
                    const T* vv = v + (s * Hkv + kvh) * Dh;
#pragma omp simd
                    for (int64_t d = 0; d < Dh; ++d) acc[size_t(d)] += p * vv[d];
                    if (probs) probs[(t * H + h) * S + s] = p;
                }
                if (probs)
                    for (int64_t s = n_keys; s < S; ++s) probs[(t * H + h) * S + s] = 0;
                T* o = out + (t * H + h) * Dh;
                for (int64_t d = 0; d < Dh; ++d) o[d] = acc[size_t(d)];
            }
        }
    }
}

template void causal_attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                              int64_t, int64_t, int64_t, int64_t, int64_t, double);
template void causal_attention_forward<double>(double*, double*, const double*, const double*, const double*,
                                               int64_t, int64_t, int64_t, int64_t, int64_t, double);

// ---- backward -------------------------------------------------------------------------------------
//
// Per query row (t, h) with p_s = softmax_s(scale q_t.k_s) over s <= t and out_t = sum_s p_s v_s:
//   dp_s = dout_t . v_s,  D_t = sum_s p_s dp_s,  ds_s = p_s (dp_s - D_t)
//   dq_t = scale sum_s ds_s k_s,  dk_s += scale ds_s q_t,  dv_s += p_s dout_t.
// Pass 1 owns rows (t, h): it writes dq and keeps D_t (and, when recomputing, the row's log-sum-exp).
// Pass 2 owns key blocks of one KV head: it rebuilds p_s and ds_s from those row statistics and sums
// over every query row and every query head of the group, so dk/dv need no atomics.

namespace {

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
    T acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

}  // namespace

template <typename T>
void causal_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                               const T* probs, int64_t num_tokens, int64_t H, int64_t Hkv, int64_t Dh,
                               double scale) {
    HYDRA_ASSERT(Hkv > 0 && H % Hkv == 0, "H = {} is not a multiple of Hkv = {}", H, Hkv);
    const int64_t NT = num_tokens;
    if (NT <= 0 || H <= 0 || Dh <= 0) return;
    const int64_t group = H / Hkv;
    const T sc = T(scale);
    std::vector<T> row_D(static_cast<size_t>(NT * H));
    std::vector<T> row_lse(probs ? 0 : static_cast<size_t>(NT * H));

    // Pass 1: rows (t, h) -> dq, D, lse.
#pragma omp parallel
    {
        std::vector<T> p(static_cast<size_t>(NT)), dp(static_cast<size_t>(NT)), acc(static_cast<size_t>(Dh));
#pragma omp for schedule(dynamic, 4) collapse(2)
        for (int64_t t = 0; t < NT; ++t) {
            for (int64_t h = 0; h < H; ++h) {
                const int64_t kvh = h / group, n_keys = t + 1, row = t * H + h;
                const T* qv = q + row * Dh;
                const T* gv = dout + row * Dh;
                if (probs) {
                    for (int64_t s = 0; s < n_keys; ++s) p[size_t(s)] = probs[row * NT + s];
                } else {
                    T mx = -INFINITY;
                    for (int64_t s = 0; s < n_keys; ++s) {
                        const T sv = sc * dot(qv, k + (s * Hkv + kvh) * Dh, Dh);
                        p[size_t(s)] = sv;
                        mx = std::max(mx, sv);
                    }
                    T sum = 0;
                    for (int64_t s = 0; s < n_keys; ++s) {
                        p[size_t(s)] = std::exp(p[size_t(s)] - mx);
                        sum += p[size_t(s)];
                    }
                    const T inv = T(1) / sum;
                    for (int64_t s = 0; s < n_keys; ++s) p[size_t(s)] *= inv;
                    row_lse[size_t(row)] = mx + std::log(sum);
                }
                T D = 0;
                for (int64_t s = 0; s < n_keys; ++s) {
                    dp[size_t(s)] = dot(gv, v + (s * Hkv + kvh) * Dh, Dh);
                    D += p[size_t(s)] * dp[size_t(s)];
                }
                row_D[size_t(row)] = D;
                std::fill(acc.begin(), acc.end(), T(0));
                for (int64_t s = 0; s < n_keys; ++s) {
                    const T ds = p[size_t(s)] * (dp[size_t(s)] - D);
                    const T* kv = k + (s * Hkv + kvh) * Dh;
#pragma omp simd
                    for (int64_t d = 0; d < Dh; ++d) acc[size_t(d)] += ds * kv[d];
                }
                T* o = dq + row * Dh;
                for (int64_t d = 0; d < Dh; ++d) o[d] = sc * acc[size_t(d)];
            }
        }
    }

    // Pass 2: blocks of kBlock keys of one KV head -> dk, dv. A block reuses each q_t / dout_t row it
    // loads for all of its keys.
    constexpr int64_t kBlock = 16;
    const int64_t n_blocks = (NT + kBlock - 1) / kBlock;
#pragma omp parallel
    {
        std::vector<T> dk_acc(static_cast<size_t>(kBlock * Dh)), dv_acc(static_cast<size_t>(kBlock * Dh));
#pragma omp for schedule(dynamic, 1) collapse(2)
        for (int64_t b = 0; b < n_blocks; ++b) {
            for (int64_t g = 0; g < Hkv; ++g) {
                const int64_t s0 = b * kBlock, s1 = std::min(NT, s0 + kBlock);
                std::fill(dk_acc.begin(), dk_acc.end(), T(0));
                std::fill(dv_acc.begin(), dv_acc.end(), T(0));
                for (int64_t h = g * group; h < (g + 1) * group; ++h) {
                    for (int64_t t = s0; t < NT; ++t) {
                        const int64_t row = t * H + h;
                        const T* qv = q + row * Dh;
                        const T* gv = dout + row * Dh;
                        const T D = row_D[size_t(row)];
                        const int64_t s_end = std::min(s1, t + 1);
                        for (int64_t s = s0; s < s_end; ++s) {
                            const T* kv = k + (s * Hkv + g) * Dh;
                            const T* vv = v + (s * Hkv + g) * Dh;
                            const T p = probs ? probs[row * NT + s]
                                              : std::exp(sc * dot(qv, kv, Dh) - row_lse[size_t(row)]);
                            const T ds = sc * p * (dot(gv, vv, Dh) - D);
                            T* dka = dk_acc.data() + (s - s0) * Dh;
                            T* dva = dv_acc.data() + (s - s0) * Dh;
#pragma omp simd
                            for (int64_t d = 0; d < Dh; ++d) {
                                dka[d] += ds * qv[d];
                                dva[d] += p * gv[d];
                            }
                        }
                    }
                }
                for (int64_t s = s0; s < s1; ++s) {
                    std::copy_n(dk_acc.data() + (s - s0) * Dh, Dh, dk + (s * Hkv + g) * Dh);
                    std::copy_n(dv_acc.data() + (s - s0) * Dh, Dh, dv + (s * Hkv + g) * Dh);
                }
            }
        }
    }
}

template void causal_attention_backward<float>(float*, float*, float*, const float*, const float*,
                                               const float*, const float*, const float*, int64_t, int64_t,
                                               int64_t, int64_t, double);
template void causal_attention_backward<double>(double*, double*, double*, const double*, const double*,
                                                const double*, const double*, const double*, int64_t, int64_t,
                                                int64_t, int64_t, double);

}  // namespace hydra::cpu
