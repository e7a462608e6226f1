// Causal GQA attention forward and backward on GEMMs (see attention.h).
//
// Forward, per (query head h, block of up to kQueryBlock queries [t0, t1)): the scores of the block
// against keys [0, pos0 + t1) come from one GEMM (written straight into `probs` when it is given), a
// masked row softmax turns them into weights (entries past a row's last key set to 0), and one more
// GEMM multiplies them into V. Causality costs at most one partly masked block per row.
//
// Decode (one query row per head), where the cache read is the cost: work items (KV head, fixed chunk of
// keys), each reading its K / V rows once for all the query heads of the KV head (a per-head loop reads
// them once per query head), with the chunk's softmax statistics; a second pass combines the chunks in
// key order (flash-decoding). The chunks do not depend on the thread count, nor does the result.
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
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/gemm.h"
#include "ops/cpu/avx_hsum.h"
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
        HYDRA_ASSERT(kv_head_of[h] >= 0 && kv_head_of[h] < Hkv,
                     "attention: kv_head_of[{}] = {} is outside [0, {})", h, kv_head_of[h], Hkv);
}

inline int64_t kv_head(const int32_t* kv_head_of, int64_t h, int64_t group) {
    return kv_head_of ? int64_t(kv_head_of[h]) : h / group;
}

inline float exp_of(float x) {
    return exp_approx(x);
}
inline double exp_of(double x) {
    return std::exp(x);
}

// In place over x[0, n): x[s] = exp(x[s] - m), m the row's max; returns {m, sum of the exponentials}. A row
// of only -inf (every key masked) becomes zeros, with m = -inf and sum 0.
template <typename T>
inline std::pair<T, T> exp_minus_max(T* x, int64_t n) {
    T mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int64_t s = 0; s < n; ++s) mx = std::max(mx, x[s]);
    if (mx == T(-INFINITY)) {
        std::fill(x, x + n, T(0));
        return {mx, T(0)};
    }
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t s = 0; s < n; ++s) {
        const T e = exp_of(x[s] - mx);
        x[s] = e;
        sum += e;
    }
    return {mx, sum};
}

// Row softmax in place over x[0, n) (scores already scaled); x[n, n_zero) set to 0.
template <typename T>
inline void softmax_row(T* x, int64_t n, int64_t n_zero) {
    const T inv = T(1) / exp_minus_max(x, n).second;
#pragma omp simd
    for (int64_t s = 0; s < n; ++s) x[s] *= inv;
    if (n_zero > n) std::fill(x + n, x + n_zero, T(0));
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

// ---- decode: one query row per head, all heads of a KV head together, keys in fixed chunks ----

// Keys per chunk of the decode split: the unit of work (and of parallelism) along a long cache. Fixed, so
// that the chunks, and the order of their combination, do not depend on the thread count.
constexpr int64_t kDecodeKeys = 256;

// Query heads [first[g], first[g + 1]) read KV head g (check_map's monotone map, or the grouped layout).
std::vector<int64_t> heads_per_kv(const int32_t* kv_head_of, int64_t H, int64_t Hkv, int64_t group) {
    std::vector<int64_t> first(size_t(Hkv + 1), 0);
    for (int64_t h = 0; h < H; ++h) ++first[size_t(kv_head(kv_head_of, h, group) + 1)];
    for (int64_t g = 0; g < Hkv; ++g) first[size_t(g + 1)] += first[size_t(g)];
    return first;
}

// Scores of one query against keys [0, len) (rows ld apart): P[s] = scale * q . k_s.
template <typename T>
void scores_loop(T* P, const T* qv, const T* k, int64_t ld, int64_t len, int64_t Dh, T scale) {
    for (int64_t s = 0; s < len; ++s) {
        const T* kr = k + s * ld;
        T d = 0;
        for (int64_t i = 0; i < Dh; ++i) d += qv[i] * kr[i];
        P[s] = scale * d;
    }
}

// o[0, Dh) += sum_s P[s] v_s over value rows [0, len) (rows ld apart).
template <typename T>
void weighted_sum_loop(T* o, const T* P, const T* v, int64_t ld, int64_t len, int64_t Dh) {
    for (int64_t s = 0; s < len; ++s)
        for (int64_t i = 0; i < Dh; ++i) o[i] += P[s] * v[s * ld + i];
}

template <typename T>
void chunk_scores(T* P, const T* qv, const T* k, int64_t ld, int64_t len, int64_t Dh, T scale) {
    scores_loop(P, qv, k, ld, len, Dh, scale);
}

template <typename T>
void chunk_weighted_sum(T* o, const T* P, const T* v, int64_t ld, int64_t len, int64_t Dh) {
    weighted_sum_loop(o, P, v, ld, len, Dh);
}

#if defined(__AVX2__) && defined(__FMA__)
// The float forms in AVX registers (Dh a multiple of 8): four keys' dot products at a time, reduced
// together by horizontal adds (a per-key reduction through memory costs more than the products), and the
// output accumulated in registers 64 floats at a time.
template <>
void chunk_scores<float>(float* P, const float* qv, const float* k, int64_t ld, int64_t len, int64_t Dh,
                         float scale) {
    if (Dh % 8 != 0) return scores_loop(P, qv, k, ld, len, Dh, scale);
    const __m128 sc = _mm_set1_ps(scale);
    int64_t s = 0;
    for (; s + 4 <= len; s += 4) {
        const float *k0 = k + s * ld, *k1 = k0 + ld, *k2 = k1 + ld, *k3 = k2 + ld;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
               a3 = _mm256_setzero_ps();
        for (int64_t i = 0; i < Dh; i += 8) {
            const __m256 qi = _mm256_loadu_ps(qv + i);
            a0 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k0 + i), a0);
            a1 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k1 + i), a1);
            a2 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k2 + i), a2);
            a3 = _mm256_fmadd_ps(qi, _mm256_loadu_ps(k3 + i), a3);
        }
        // [a0 a1 a2 a3] lane sums: two rounds of pairwise adds, then the two 128-bit halves
        const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        const __m128 r = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        _mm_storeu_ps(P + s, _mm_mul_ps(r, sc));
    }
    for (; s < len; ++s) {
        const float* kr = k + s * ld;
        __m256 a = _mm256_setzero_ps();
        for (int64_t i = 0; i < Dh; i += 8)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(qv + i), _mm256_loadu_ps(kr + i), a);
        P[s] = scale * hsum(a);
    }
}

template <int NV>  // o[0, 8 NV) += sum_s P[s] v_s[0, 8 NV)
inline void weighted_sum_block(float* o, const float* P, const float* v, int64_t ld, int64_t len) {
    __m256 acc[NV];
    for (int n = 0; n < NV; ++n) acc[n] = _mm256_loadu_ps(o + 8 * n);
    for (int64_t s = 0; s < len; ++s) {
        const __m256 p = _mm256_set1_ps(P[s]);
        const float* vr = v + s * ld;
        for (int n = 0; n < NV; ++n) acc[n] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vr + 8 * n), acc[n]);
    }
    for (int n = 0; n < NV; ++n) _mm256_storeu_ps(o + 8 * n, acc[n]);
}

template <>
void chunk_weighted_sum<float>(float* o, const float* P, const float* v, int64_t ld, int64_t len,
                               int64_t Dh) {
    if (Dh % 8 != 0) return weighted_sum_loop(o, P, v, ld, len, Dh);
    int64_t d0 = 0;
    for (; d0 + 64 <= Dh; d0 += 64) weighted_sum_block<8>(o + d0, P, v + d0, ld, len);
    for (; d0 < Dh; d0 += 8) weighted_sum_block<1>(o + d0, P, v + d0, ld, len);
}
#endif

// The softmax attention of the G = first[g + 1] - first[g] queries of KV head g over keys [s0, s1) of n, the
// chunk's K and V rows read from memory once for all G (they stay in L2 between the queries). Leaves per
// query j the chunk's max score m, sum of exp l and unnormalised output o (Dh) at part + j * part_stride:
// [m, l, o]; with probs (H, n), the chunk's exp(score - m) in its entries of the query's row. A head with a
// window sees only its sinks and its last `window` keys (the others weigh 0, a chunk of only those has
// m = -inf, l = 0, o = 0).
template <typename T>
void decode_chunk(T* part, int64_t part_stride, T* probs, const T* q, const T* k, const T* v, int64_t h0,
                  int64_t G, int64_t g, int64_t s0, int64_t s1, int64_t n, int64_t Hkv, int64_t Dh, T scale,
                  const int32_t* window_of, int64_t sinks, std::vector<T>& ws) {
    const int64_t len = s1 - s0, ld = Hkv * Dh;
    for (int64_t j = 0; j < G; ++j) {
        const int64_t h = h0 + j;
        T* P = probs ? probs + h * n + s0 : scratch(ws, len);  // the query's scores, then exp(score - m)
        chunk_scores(P, q + h * Dh, k + s0 * ld + g * Dh, ld, len, Dh, scale);
        if (const int64_t win = window_of ? int64_t(window_of[h]) : 0; win > 0) {
            const int64_t lo = std::max<int64_t>(0, n - win), cut = std::min(sinks, lo);
            for (int64_t s = std::max(cut, s0); s < std::min(lo, s1); ++s) P[s - s0] = T(-INFINITY);
        }
        const auto [mx, sum] = exp_minus_max(P, len);
        T* pj = part + j * part_stride;
        pj[0] = mx, pj[1] = sum;
        std::fill(pj + 2, pj + 2 + Dh, T(0));
        if (mx == T(-INFINITY)) continue;  // every key of the chunk outside the head's window
        chunk_weighted_sum(pj + 2, P, v + s0 * ld + g * Dh, ld, len, Dh);
    }
}

// One new token per head (T = 1, keys [0, n)): the flash-decoding split. Work items are (KV head, chunk of
// kDecodeKeys keys), each reading its K / V rows once for all the KV head's queries; a second pass combines
// each head's chunks in key order (and scales its probabilities, when asked, to the whole row's softmax).
template <typename T>
void decode_attention(T* out, T* probs, const T* q, const T* k, const T* v, int64_t n, int64_t H, int64_t Hkv,
                      int64_t Dh, double scale, const int32_t* kv_head_of, int64_t group,
                      const int32_t* window_of, int64_t sinks) {
    const std::vector<int64_t> first = heads_per_kv(kv_head_of, H, Hkv, group);
    const int64_t n_chunks = (n + kDecodeKeys - 1) / kDecodeKeys, stride = Dh + 2;
    // the partials of query head h, chunk c at (h * n_chunks + c) * stride
    static thread_local std::vector<T> parts;
    T* part = scratch(parts, H * n_chunks * stride);
    const int64_t items = Hkv * n_chunks;
#pragma omp parallel for schedule(static, 1) if (items > 1 && n * H * Dh > 32768)
    for (int64_t i = 0; i < items; ++i) {
        static thread_local std::vector<T> ws;
        const int64_t g = i / n_chunks, c = i % n_chunks;
        const int64_t h0 = first[size_t(g)], G = first[size_t(g + 1)] - h0;
        if (G == 0) continue;
        const int64_t s0 = c * kDecodeKeys, s1 = std::min(n, s0 + kDecodeKeys);
        decode_chunk(part + (h0 * n_chunks + c) * stride, n_chunks * stride, probs, q, k, v, h0, G, g, s0, s1,
                     n, Hkv, Dh, T(scale), window_of, sinks, ws);
    }
    for (int64_t h = 0; h < H; ++h) {
        const T* ph = part + h * n_chunks * stride;
        T mx = -INFINITY;  // finite: the last key is inside every window
        for (int64_t c = 0; c < n_chunks; ++c) mx = std::max(mx, ph[c * stride]);
        T sum = 0;
        T* o = out + h * Dh;
        std::fill(o, o + Dh, T(0));
        for (int64_t c = 0; c < n_chunks; ++c) {
            const T* pc = ph + c * stride;
            if (pc[0] == T(-INFINITY)) continue;
            const T w = exp_of(pc[0] - mx);
            sum += w * pc[1];
#pragma omp simd
            for (int64_t i = 0; i < Dh; ++i) o[i] += w * pc[2 + i];
        }
        const T inv = T(1) / sum;
#pragma omp simd
        for (int64_t i = 0; i < Dh; ++i) o[i] *= inv;
        if (!probs) continue;
        for (int64_t c = 0; c < n_chunks; ++c) {
            const T* pc = ph + c * stride;
            const T f = pc[0] == T(-INFINITY) ? T(0) : exp_of(pc[0] - mx) * inv;
            T* row = probs + h * n + c * kDecodeKeys;
            const int64_t len = std::min(kDecodeKeys, n - c * kDecodeKeys);
#pragma omp simd
            for (int64_t s = 0; s < len; ++s) row[s] *= f;
        }
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
    if (num_tokens == 1) {  // decode: the split over keys (one query row per head)
        decode_attention(out, probs, q, k, v, S, H, Hkv, Dh, scale, kv_head_of, group, window_of, sinks);
        return;
    }
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
        block_softmax(P, ld, q, k, t0, nq, nk, pos0, h, g, H, Hkv, Dh, scale, win, sinks);
        gemm(false, false, nq, Dh, nk, T(1), P, ld, v + g * Dh, Hkv * Dh, T(0), out + (t0 * H + h) * Dh,
             H * Dh);
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
            gemm(false, false, nq, Dh, nk, T(1), dS, nk, k + g * Dh, Hkv * Dh, T(0), dq + (t0 * H + h) * Dh,
                 H * Dh);
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
