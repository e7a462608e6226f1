// Causal GQA attention forward and backward on GEMMs (see attention.h).
//
// Forward, per (query head h, block of up to kQueryBlock queries [t0, t1)): the scores of the block
// against keys [0, pos0 + t1) come from one GEMM (written straight into `probs` when it is given), a
// masked row softmax turns them into weights (entries past a row's last key set to 0), and one more
// GEMM multiplies them into V. Causality costs at most one partly masked block per row.
//
// Backward, per query head (pos0 = 0), query blocks from last to first; with P the block's weights
// (saved or recomputed) and dO its output gradient rows:
//   dP = dO V^T,  D_t = sum_s P_ts dP_ts (= dO_t . O_t),  dS = scale P * (dP - D)
//   dQ = dS K,  dK_h += dS^T Q,  dV_h += P^T dO
// dK_h / dV_h are the head's own contributions (per-head scratch); a second parallel pass sums them over
// the query heads of every KV head in head order, so no two threads ever add into the same element.
#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/gemm.h"
#include "ops/cpu/fast_exp.h"

namespace hydra::cpu {

namespace {

constexpr int64_t kQueryBlock = 64;

// Grow-only scratch buffer of the calling thread (OpenMP workers persist, so steady state allocates
// nothing).
template <typename T>
T* scratch(std::vector<T>& buf, int64_t n) {
    if (buf.size() < size_t(n)) buf.resize(size_t(n));
    return buf.data();
}

void check_map(const int32_t* kv_head_of, int64_t H, int64_t Hkv) {
    HYDRA_ASSERT(H > 0 && Hkv > 0, "attention: H = {} and Hkv = {} must be positive", H, Hkv);
    if (!kv_head_of) {
        HYDRA_ASSERT(H % Hkv == 0, "attention: H = {} is not a multiple of Hkv = {}", H, Hkv);
        return;
    }
    for (int64_t h = 0; h < H; ++h)
        HYDRA_ASSERT(kv_head_of[h] >= 0 && kv_head_of[h] < Hkv, "attention: kv_head_of[{}] = {} is outside [0, {})",
                     h, kv_head_of[h], Hkv);
}

inline int64_t kv_head(const int32_t* kv_head_of, int64_t h, int64_t group) {
    return kv_head_of ? int64_t(kv_head_of[h]) : h / group;
}

// Row softmax in place over x[0, n) (scores already scaled); x[n, n_zero) set to 0.
inline void softmax_row(float* x, int64_t n, int64_t n_zero) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t s = 0; s < n; ++s) mx = std::max(mx, x[s]);
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t s = 0; s < n; ++s) {
        const float e = exp_approx(x[s] - mx);
        x[s] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t s = 0; s < n; ++s) x[s] *= inv;
    if (n_zero > n) std::memset(x + n, 0, sizeof(float) * size_t(n_zero - n));
}

inline void softmax_row(double* x, int64_t n, int64_t n_zero) {
    double mx = -INFINITY;
    for (int64_t s = 0; s < n; ++s) mx = std::max(mx, x[s]);
    double sum = 0;
    for (int64_t s = 0; s < n; ++s) {
        x[s] = std::exp(x[s] - mx);
        sum += x[s];
    }
    const double inv = 1.0 / sum;
    for (int64_t s = 0; s < n; ++s) x[s] *= inv;
    for (int64_t s = n; s < n_zero; ++s) x[s] = 0;
}

// The softmax of a row whose keys are [0, n) (n = position + 1), zero up to n_zero; with a sliding window
// W > 0 only the keys [n - W, n) and the first `sinks` ones count, the others get weight 0.
template <typename T>
inline void window_softmax_row(T* x, int64_t n, int64_t n_zero, int64_t window, int64_t sinks) {
    const int64_t lo = window > 0 ? std::max<int64_t>(0, n - window) : 0;
    const int64_t cut = std::min(sinks, lo);  // keys [cut, lo) fall between the sinks and the window
    for (int64_t s = cut; s < lo; ++s) x[s] = T(-INFINITY);
    softmax_row(x, n, n_zero);
    for (int64_t s = cut; s < lo; ++s) x[s] = T(0);
}

// Scores of queries [t0, t0 + nq) of head h (absolute positions pos0 + t0 ...) against keys [0, nk) of
// KV head g, then the masked softmax: P (nq, ld) holds the weights of the block, zero past each row's
// last key up to column nk (and outside the head's window, when it has one).
template <typename T>
void block_softmax(T* P, int64_t ld, const T* q, const T* k, int64_t t0, int64_t nq, int64_t nk, int64_t pos0,
                   int64_t h, int64_t g, int64_t H, int64_t Hkv, int64_t Dh, double scale, int64_t window,
                   int64_t sinks) {
    gemm(false, true, nq, nk, Dh, T(scale), q + (t0 * H + h) * Dh, H * Dh, k + g * Dh, Hkv * Dh, T(0), P, ld);
    for (int64_t i = 0; i < nq; ++i) window_softmax_row(P + i * ld, pos0 + t0 + i + 1, nk, window, sinks);
}

// A single query row against keys / values [0, n) with row stride ld: P (n) receives the weights, o (Dh)
// the output.
template <typename T>
void single_query(T* P, T* o, const T* qv, const T* k, const T* v, int64_t n, int64_t ld, int64_t Dh,
                  double scale, int64_t window, int64_t sinks) {
    const T sc = T(scale);
    for (int64_t s = 0; s < n; ++s) {
        const T* kr = k + s * ld;
        T d = 0;
#pragma omp simd reduction(+ : d)
        for (int64_t i = 0; i < Dh; ++i) d += qv[i] * kr[i];
        P[s] = sc * d;
    }
    window_softmax_row(P, n, n, window, sinks);
    std::fill(o, o + Dh, T(0));
    for (int64_t s = 0; s < n; ++s) {
        const T p = P[s];
        const T* vr = v + s * ld;
#pragma omp simd
        for (int64_t i = 0; i < Dh; ++i) o[i] += p * vr[i];
    }
}

}  // namespace

template <typename T>
void causal_attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int64_t num_tokens,
                              int64_t pos0, int64_t H, int64_t Hkv, int64_t Dh, double scale,
                              const int32_t* kv_head_of, const int32_t* window_of, int64_t sinks) {
    check_map(kv_head_of, H, Hkv);
    if (num_tokens <= 0 || Dh <= 0) return;
    const int64_t group = H / std::max<int64_t>(Hkv, 1);
    const int64_t S = pos0 + num_tokens;
    const int64_t n_blocks = (num_tokens + kQueryBlock - 1) / kQueryBlock;
    const int64_t items = n_blocks * H;
    // Item i = (block i / H, head i % H); round-robin hands every thread blocks of every length.
#pragma omp parallel for schedule(static, 1) if (items > 1 && num_tokens * S * Dh > 32768)
    for (int64_t i = 0; i < items; ++i) {
        static thread_local std::vector<T> ws;
        const int64_t qb = i / H, h = i % H, g = kv_head(kv_head_of, h, group);
        const int64_t win = window_of ? int64_t(window_of[h]) : 0;
        const int64_t t0 = qb * kQueryBlock, nq = std::min(kQueryBlock, num_tokens - t0);
        const int64_t nk = pos0 + t0 + nq;  // keys any row of the block may see
        T* P;
        int64_t ld;
        if (probs) {
            P = probs + (t0 * H + h) * S;
            ld = H * S;
        } else {
            P = scratch(ws, nq * nk);
            ld = nk;
        }
        if (nq == 1) {
            // One query (decode): dot products and an axpy loop beat two GEMM calls of one row.
            single_query(P, out + (t0 * H + h) * Dh, q + (t0 * H + h) * Dh, k + g * Dh, v + g * Dh, nk,
                         Hkv * Dh, Dh, scale, win, sinks);
        } else {
            block_softmax(P, ld, q, k, t0, nq, nk, pos0, h, g, H, Hkv, Dh, scale, win, sinks);
            gemm(false, false, nq, Dh, nk, T(1), P, ld, v + g * Dh, Hkv * Dh, T(0), out + (t0 * H + h) * Dh, H * Dh);
        }
        if (probs && nk < S)
            for (int64_t r = 0; r < nq; ++r) std::fill(P + r * ld + nk, P + r * ld + S, T(0));
    }
}

template void causal_attention_forward<float>(float*, float*, const float*, const float*, const float*,
                                              int64_t, int64_t, int64_t, int64_t, int64_t, double,
                                              const int32_t*, const int32_t*, int64_t);
template void causal_attention_forward<double>(double*, double*, const double*, const double*, const double*,
                                               int64_t, int64_t, int64_t, int64_t, int64_t, double,
                                               const int32_t*, const int32_t*, int64_t);

template <typename T>
void causal_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                               const T* probs, int64_t num_tokens, int64_t H, int64_t Hkv, int64_t Dh,
                               double scale, const int32_t* kv_head_of, const int32_t* window_of,
                               int64_t sinks) {
    check_map(kv_head_of, H, Hkv);
    const int64_t NT = num_tokens;
    if (NT <= 0 || Dh <= 0) return;
    const int64_t group = H / Hkv;
    const T sc = T(scale);
    const int64_t n_blocks = (NT + kQueryBlock - 1) / kQueryBlock;
    // Per-head dK / dV contributions, (H, NT, Dh) each.
    static thread_local std::vector<T> part;
    T* dk_part = scratch(part, 2 * H * NT * Dh);
    T* dv_part = dk_part + H * NT * Dh;

#pragma omp parallel for schedule(static, 1) if (H > 1 && NT * NT * Dh > 32768)
    for (int64_t h = 0; h < H; ++h) {
        static thread_local std::vector<T> ws;
        const int64_t g = kv_head(kv_head_of, h, group);
        T* dkh = dk_part + h * NT * Dh;
        T* dvh = dv_part + h * NT * Dh;
        T* buf = scratch(ws, (probs ? 1 : 2) * kQueryBlock * NT);
        T* dS = buf;
        // The last block sees every key, so it initialises dkh / dvh (beta = 0) for all rows.
        for (int64_t qb = n_blocks - 1; qb >= 0; --qb) {
            const int64_t t0 = qb * kQueryBlock, nq = std::min(kQueryBlock, NT - t0), nk = t0 + nq;
            const T* qb_rows = q + (t0 * H + h) * Dh;
            const T* go_rows = dout + (t0 * H + h) * Dh;
            const T* P;
            int64_t ldp;
            if (probs) {
                P = probs + (t0 * H + h) * NT;
                ldp = H * NT;
            } else {
                T* Pw = buf + kQueryBlock * NT;
                block_softmax(Pw, nk, q, k, t0, nq, nk, int64_t(0), h, g, H, Hkv, Dh, scale,
                              window_of ? int64_t(window_of[h]) : 0, sinks);
                P = Pw;
                ldp = nk;
            }
            // dP (nq, nk) = dO V^T, then dS = scale P (dP - D) in place; P is 0 past each row's last key.
            gemm(false, true, nq, nk, Dh, T(1), go_rows, H * Dh, v + g * Dh, Hkv * Dh, T(0), dS, nk);
            for (int64_t r = 0; r < nq; ++r) {
                const T* pr = P + r * ldp;
                T* dr = dS + r * nk;
                const int64_t n = t0 + r + 1;
                T D = 0;
#pragma omp simd reduction(+ : D)
                for (int64_t s = 0; s < n; ++s) D += pr[s] * dr[s];
#pragma omp simd
                for (int64_t s = 0; s < n; ++s) dr[s] = sc * pr[s] * (dr[s] - D);
                for (int64_t s = n; s < nk; ++s) dr[s] = T(0);
            }
            const T beta = qb == n_blocks - 1 ? T(0) : T(1);
            gemm(false, false, nq, Dh, nk, T(1), dS, nk, k + g * Dh, Hkv * Dh, T(0), dq + (t0 * H + h) * Dh, H * Dh);
            gemm(true, false, nk, Dh, nq, T(1), dS, nk, qb_rows, H * Dh, beta, dkh, Dh);
            gemm(true, false, nk, Dh, nq, T(1), P, ldp, go_rows, H * Dh, beta, dvh, Dh);
        }
    }

    // dk / dv of KV head g = sum over the query heads mapped to g, in head order.
#pragma omp parallel for schedule(static) if (NT * Hkv * Dh > 32768)
    for (int64_t t = 0; t < NT; ++t) {
        for (int64_t g = 0; g < Hkv; ++g) {
            T* dko = dk + (t * Hkv + g) * Dh;
            T* dvo = dv + (t * Hkv + g) * Dh;
            bool first = true;
            for (int64_t h = 0; h < H; ++h) {
                if (kv_head(kv_head_of, h, group) != g) continue;
                const T* a = dk_part + (h * NT + t) * Dh;
                const T* b = dv_part + (h * NT + t) * Dh;
                if (first) {
                    std::memcpy(dko, a, sizeof(T) * size_t(Dh));
                    std::memcpy(dvo, b, sizeof(T) * size_t(Dh));
                    first = false;
                } else {
#pragma omp simd
                    for (int64_t d = 0; d < Dh; ++d) {
                        dko[d] += a[d];
                        dvo[d] += b[d];
                    }
                }
            }
            if (first) {
                std::fill(dko, dko + Dh, T(0));
                std::fill(dvo, dvo + Dh, T(0));
            }
        }
    }
}

template void causal_attention_backward<float>(float*, float*, float*, const float*, const float*,
                                               const float*, const float*, const float*, int64_t, int64_t,
                                               int64_t, int64_t, double, const int32_t*, const int32_t*,
                                               int64_t);
template void causal_attention_backward<double>(double*, double*, double*, const double*, const double*,
                                                const double*, const double*, const double*, int64_t, int64_t,
                                                int64_t, int64_t, double, const int32_t*, const int32_t*,
                                                int64_t);

}  // namespace hydra::cpu
