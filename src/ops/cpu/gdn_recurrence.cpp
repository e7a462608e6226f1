// Gated delta rule: recurrent and chunked forms, forward and backward (see gdn_recurrence.h and
// research/gdn.md §2-§3). Inside a value head everything is sequential; heads run in parallel.
#include "ops/cpu/gdn_recurrence.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/gemm.h"

namespace hydra::cpu {

namespace {

void check_dims(const GdnDims& d) {
    HYDRA_ASSERT(d.T >= 0 && d.H > 0 && d.HV > 0 && d.K > 0 && d.V > 0, "gdn: bad dims T={} H={} HV={} K={} V={}",
                 d.T, d.H, d.HV, d.K, d.V);
    HYDRA_ASSERT(d.HV % d.H == 0, "gdn: HV={} is not a multiple of H={}", d.HV, d.H);
}

// Heads are worth a parallel region only when there is enough work per call (decode: T = 1).
bool worth_threads(const GdnDims& d) { return d.HV > 1 && d.T * d.HV * d.V * d.K >= (1 << 16); }

// The working state of head j: state_out's slice, or a scratch buffer when no state is returned;
// initialised from state_in (unless it is the same memory) or to zeros.
template <typename T>
T* init_state(T* state_out, const T* state_in, std::vector<T>& scratch, int64_t j, int64_t VK) {
    T* M = state_out ? state_out + j * VK : scratch.data();
    if (state_in) {
        if (M != state_in + j * VK) std::memcpy(M, state_in + j * VK, size_t(VK) * sizeof(T));
    } else {
        std::fill(M, M + VK, T(0));
    }
    return M;
}

// One token of §2.1 on one head's state M (V x K), row by row: e_i = alpha (m_i . k) reads the row,
// then m_i <- alpha m_i + delta_i k and o_i = m_i . q in a second pass, so each row is written once
// while it is in cache. Rows go four at a time so the four dot products are independent chains (a
// single row is latency-bound on its reductions).
template <typename T>
void recurrent_step(T* M, T* o, const T* q, const T* k, const T* v, T alpha, T beta, T scale, int64_t K,
                    int64_t V) {
    int64_t i = 0;
    for (; i + 4 <= V; i += 4) {
        T* m0 = M + i * K;
        T* m1 = m0 + K;
        T* m2 = m1 + K;
        T* m3 = m2 + K;
        T e0 = 0, e1 = 0, e2 = 0, e3 = 0;
#pragma omp simd reduction(+ : e0, e1, e2, e3)
        for (int64_t c = 0; c < K; ++c) {
            const T kc = k[c];
            e0 += m0[c] * kc, e1 += m1[c] * kc, e2 += m2[c] * kc, e3 += m3[c] * kc;
        }
        const T d0 = beta * (v[i] - alpha * e0), d1 = beta * (v[i + 1] - alpha * e1),
                d2 = beta * (v[i + 2] - alpha * e2), d3 = beta * (v[i + 3] - alpha * e3);
        T o0 = 0, o1 = 0, o2 = 0, o3 = 0;
#pragma omp simd reduction(+ : o0, o1, o2, o3)
        for (int64_t c = 0; c < K; ++c) {
            const T kc = k[c], qc = q[c];
            m0[c] = alpha * m0[c] + d0 * kc, m1[c] = alpha * m1[c] + d1 * kc;
            m2[c] = alpha * m2[c] + d2 * kc, m3[c] = alpha * m3[c] + d3 * kc;
            o0 += m0[c] * qc, o1 += m1[c] * qc, o2 += m2[c] * qc, o3 += m3[c] * qc;
        }
        if (o) o[i] = scale * o0, o[i + 1] = scale * o1, o[i + 2] = scale * o2, o[i + 3] = scale * o3;
    }
    for (; i < V; ++i) {
        T* m = M + i * K;
        T e = 0;
#pragma omp simd reduction(+ : e)
        for (int64_t c = 0; c < K; ++c) e += m[c] * k[c];
        const T delta = beta * (v[i] - alpha * e);
        T out = 0;
#pragma omp simd reduction(+ : out)
        for (int64_t c = 0; c < K; ++c) {
            m[c] = alpha * m[c] + delta * k[c];
            out += m[c] * q[c];
        }
        if (o) o[i] = scale * out;
    }
}

// dq, dk of value head j go straight to (T, H, K) when each key head has one value head; otherwise to
// per-value-head scratch (T, HV, K) that reduce_group sums afterwards in a fixed order.
template <typename T>
void reduce_group(T* dq, const T* scratch, const GdnDims& d) {
    const int64_t r = d.HV / d.H;
#pragma omp parallel for schedule(static) if (d.T * d.HV * d.K > 65536)
    for (int64_t t = 0; t < d.T; ++t)
        for (int64_t h = 0; h < d.H; ++h) {
            T* out = dq + (t * d.H + h) * d.K;
            const T* src = scratch + (t * d.HV + h * r) * d.K;
            for (int64_t c = 0; c < d.K; ++c) out[c] = src[c];
            for (int64_t jj = 1; jj < r; ++jj)
                for (int64_t c = 0; c < d.K; ++c) out[c] += src[jj * d.K + c];
        }
}

// C (M, N) = alpha op(A) op(B), overwriting C. OpenBLAS scales C by beta in a separate pass that
// for beta = 0 costs about a quarter of a 64x64x64 product; zeroing C here and accumulating with
// beta = 1 gives the same bits (0 + x = x) for a fraction of that.
template <typename T>
void gemm_set(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
              int64_t ldb, T* C, int64_t ldc) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, T(0));
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, T(1), C, ldc);
}

// ---- chunked form: per-head scratch and the chunk recomputation shared by forward and backward ----
//
// Matrix products are merged where operands can share a buffer, so each chunk makes few, larger BLAS
// calls (a 64x64x64 product spends a good part of its time packing operands): the chunk's keys and
// queries are copied into one buffer `big` with rows [K; Q; W|U], so K K^T and Q K^T are one
// product, and so are Q M0^T and W M0^T.

template <typename T>
struct ChunkWork {
    int64_t C, K, V, KV;                  // KV = K + V, the row length of XY, big, dWD, dXY
    std::vector<double> gam, ea, eb, dgam, dbet, colsum;  // (C)
    std::vector<T> Gam, dec, bet;                         // (C): exp(gamma_r), exp(gamma_last - gamma_r), beta_r
    std::vector<T> E;      // (C, C) exp(gamma_r - gamma_c) for c <= r
    std::vector<T> S2;     // (2C, C) rows [0, L): K K^T; rows [L, 2L): P = (Q K^T) o E, causal
    std::vector<T> A, Tm;  // (C, C) strictly lower A; T = (I + A)^-1
    std::vector<T> XY;     // (C, K+V) [diag(beta Gamma) K | diag(beta) V]
    std::vector<T> big;    // (3C, K+V) rows [0, L): K; [L, 2L): Q (first K columns); [2L, 3L): [W | U]
    std::vector<T> R;      // (2C, V) [Q M0^T; W M0^T]
    std::vector<T> D;      // (C, V) delta = U - W M0^T
    // backward only
    std::vector<T> OD;            // (2C, V) [dO; d delta]
    std::vector<T> RK;            // (2C, K) [dO M0; d delta M0]
    std::vector<T> GP;            // (C, C) G_P = (scale dO delta^T) o E, causal
    std::vector<T> tK;            // (C, K) the elementwise parts of dk
    std::vector<T> QGW;           // (2C, K) [scale diag(Gamma) Q; -W]
    std::vector<T> dWD, dXY;      // (C, K+V) [dW | d delta]; T^T [dW | d delta] = [dX | dY]
    std::vector<T> dT, tLL, dA;   // (C, C)
    std::vector<T> LG;            // (C, 2C) [Gb + Gb^T | G_P^T]

    ChunkWork(int64_t C_, int64_t K_, int64_t V_, bool backward) : C(C_), K(K_), V(V_), KV(K_ + V_) {
        const size_t c = size_t(C), cc = size_t(C * C);
        gam.resize(c), ea.resize(c), eb.resize(c), Gam.resize(c), dec.resize(c), bet.resize(c);
        E.resize(cc), S2.resize(2 * cc), A.resize(cc), Tm.resize(cc);
        XY.resize(size_t(C * KV)), big.resize(size_t(3 * C * KV)), R.resize(size_t(2 * C * V)), D.resize(size_t(C * V));
        if (backward) {
            dgam.resize(c), dbet.resize(c), colsum.resize(c);
            OD.resize(size_t(2 * C * V)), RK.resize(size_t(2 * C * K)), GP.resize(cc), tK.resize(size_t(C * K));
            QGW.resize(size_t(2 * C * K)), dWD.resize(size_t(C * KV)), dXY.resize(size_t(C * KV));
            dT.resize(cc), tLL.resize(cc), dA.resize(cc), LG.resize(2 * cc);
        }
    }
};

// Where one chunk of one value head lives in the token-major inputs.
template <typename T>
struct ChunkView {
    int64_t t0, L;
    const T *q, *k, *v, *g, *beta;  // q, k rows of stride ldk; v rows of stride ldv; g, beta stride HV
    int64_t ldk, ldv, HV;
};

// Recomputes everything of a chunk that depends only on its inputs and the entering state M0:
// gamma (chunk-local inclusive cumsum of g, double), the decay matrix E, K K^T and the scores P, A,
// T = (I + A)^-1, X, Y, W = T X, U = T Y, and delta = U - W M0^T (the effective write of every token,
// §2.2 step 4). With q_state, also Q M0^T (rows [0, L) of R) for the outputs.
template <typename T>
void chunk_prepare(ChunkWork<T>& w, const ChunkView<T>& cv, const T* M0, bool q_state) {
    const int64_t C = w.C, K = w.K, V = w.V, KV = w.KV, L = cv.L;
    double acc = 0;
    for (int64_t r = 0; r < L; ++r) {
        acc += double(cv.g[r * cv.HV]);
        w.gam[size_t(r)] = acc;
        w.bet[size_t(r)] = cv.beta[r * cv.HV];
    }
    const double last = w.gam[size_t(L - 1)];
    for (int64_t r = 0; r < L; ++r) {
        w.Gam[size_t(r)] = T(std::exp(w.gam[size_t(r)]));
        w.dec[size_t(r)] = T(std::exp(last - w.gam[size_t(r)]));
    }
    // exp(gamma_r - gamma_c) = exp(gamma_r - s) exp(s - gamma_c) with s mid-range: 2L exponentials
    // instead of L^2/2, exact to double rounding as long as both factors stay inside double's range
    // (a chunk's total decay below ~1400 nats); stronger decays take the direct form.
    const double range = w.gam[0] - last;
    if (range < 1400.0) {
        const double s = 0.5 * (w.gam[0] + last);
        for (int64_t r = 0; r < L; ++r) {
            w.ea[size_t(r)] = std::exp(w.gam[size_t(r)] - s);
            w.eb[size_t(r)] = std::exp(s - w.gam[size_t(r)]);
        }
        for (int64_t r = 0; r < L; ++r) {
            const double ar = w.ea[size_t(r)];
            T* e = w.E.data() + r * C;
            for (int64_t c = 0; c <= r; ++c) e[c] = T(ar * w.eb[size_t(c)]);
        }
    } else {
        for (int64_t r = 0; r < L; ++r)
            for (int64_t c = 0; c <= r; ++c)
                w.E[size_t(r * C + c)] = T(std::exp(w.gam[size_t(r)] - w.gam[size_t(c)]));
    }
    T* Kc = w.big.data();
    T* Qc = Kc + L * KV;
    T* WU = Kc + 2 * L * KV;
    for (int64_t r = 0; r < L; ++r) {
        std::memcpy(Kc + r * KV, cv.k + r * cv.ldk, size_t(K) * sizeof(T));
        std::memcpy(Qc + r * KV, cv.q + r * cv.ldk, size_t(K) * sizeof(T));
    }
    // [K; Q] K^T: K K^T on top, Q K^T below (then decayed and masked into P)
    gemm_set(false, true, 2 * L, L, K, T(1), Kc, KV, Kc, KV, w.S2.data(), C);
    for (int64_t r = 0; r < L; ++r) {
        T* a = w.A.data() + r * C;
        const T* kk = w.S2.data() + r * C;
        T* p = w.S2.data() + (L + r) * C;
        const T* e = w.E.data() + r * C;
        const T b = w.bet[size_t(r)];
        for (int64_t c = 0; c < r; ++c) a[c] = b * kk[c] * e[c];
        for (int64_t c = r; c < L; ++c) a[c] = 0;
        for (int64_t c = 0; c <= r; ++c) p[c] *= e[c];
        for (int64_t c = r + 1; c < L; ++c) p[c] = 0;
    }
    // T = (I + A)^-1 by forward substitution, row by row: T_r = e_r - sum_{m<r} A[r,m] T_m
    // (row m of T is zero beyond column m).
    for (int64_t r = 0; r < L; ++r) {
        T* t = w.Tm.data() + r * C;
        std::fill(t, t + L, T(0));
        t[r] = 1;
        const T* a = w.A.data() + r * C;
        for (int64_t m = 0; m < r; ++m) {
            const T arm = a[m];
            const T* tm = w.Tm.data() + m * C;
#pragma omp simd
            for (int64_t c = 0; c <= m; ++c) t[c] -= arm * tm[c];
        }
    }
    for (int64_t r = 0; r < L; ++r) {
        const T sx = w.bet[size_t(r)] * w.Gam[size_t(r)], sy = w.bet[size_t(r)];
        const T* kr = Kc + r * KV;
        const T* vr = cv.v + r * cv.ldv;
        T* xy = w.XY.data() + r * KV;
        for (int64_t c = 0; c < K; ++c) xy[c] = sx * kr[c];
        for (int64_t c = 0; c < V; ++c) xy[K + c] = sy * vr[c];
    }
    // [W | U] = T [X | Y]
    gemm_set(false, false, L, KV, L, T(1), w.Tm.data(), C, w.XY.data(), KV, WU, KV);
    // [Q; W] M0^T (or only W M0^T), then delta = U - W M0^T
    if (q_state) gemm_set(false, true, 2 * L, V, K, T(1), Qc, KV, M0, K, w.R.data(), V);
    else gemm_set(false, true, L, V, K, T(1), WU, KV, M0, K, w.R.data() + L * V, V);
    for (int64_t r = 0; r < L; ++r) {
        const T* u = WU + r * KV + K;
        const T* wm = w.R.data() + (L + r) * V;
        T* dl = w.D.data() + r * V;
        for (int64_t c = 0; c < V; ++c) dl[c] = u[c] - wm[c];
    }
}

template <typename T>
ChunkView<T> chunk_view(const T* q, const T* k, const T* v, const T* g, const T* beta, const GdnDims& d, int64_t j,
                        int64_t n, int64_t C) {
    const int64_t h = j / (d.HV / d.H);
    const int64_t t0 = n * C, L = std::min(C, d.T - t0);
    return {t0,
            L,
            q + (t0 * d.H + h) * d.K,
            k + (t0 * d.H + h) * d.K,
            v + (t0 * d.HV + j) * d.V,
            g + t0 * d.HV + j,
            beta + t0 * d.HV + j,
            d.H * d.K,
            d.HV * d.V,
            d.HV};
}

// The forward over all chunks of value head j on the working state M (entering state in, leaving state
// out). o (may be null: states only) and chunk_states (may be null) as in gdn_chunked_forward; when
// head_states is set, the entering state of chunk n goes to head_states + n V K instead.
template <typename T>
void chunk_forward_head(ChunkWork<T>& w, T* M, T* o, T* chunk_states, T* head_states, const T* q, const T* k,
                        const T* v, const T* g, const T* beta, const GdnDims& d, int64_t j, T scale) {
    const int64_t C = w.C, K = d.K, V = d.V, VK = V * K, KV = w.KV;
    const int64_t NT = gdn_num_chunks(d.T, C);
    for (int64_t n = 0; n < NT; ++n) {
        if (chunk_states) std::memcpy(chunk_states + (n * d.HV + j) * VK, M, size_t(VK) * sizeof(T));
        if (head_states) std::memcpy(head_states + n * VK, M, size_t(VK) * sizeof(T));
        const ChunkView<T> cv = chunk_view(q, k, v, g, beta, d, j, n, C);
        const int64_t L = cv.L;
        chunk_prepare(w, cv, M, o != nullptr);
        if (o) {
            // O = scale [diag(Gamma) Q M0^T + P delta]
            T* oc = o + (cv.t0 * d.HV + j) * V;
            const int64_t ldo = d.HV * V;
            for (int64_t r = 0; r < L; ++r) {
                const T s = scale * w.Gam[size_t(r)];
                const T* qm = w.R.data() + r * V;
                T* orow = oc + r * ldo;
                for (int64_t c = 0; c < V; ++c) orow[c] = s * qm[c];
            }
            gemm(false, false, L, V, L, scale, w.S2.data() + L * C, C, w.D.data(), V, T(1), oc, ldo);
        }
        // M1 = Gamma_last M0 + (diag(dec) delta)^T K
        for (int64_t r = 0; r < L; ++r) {
            const T s = w.dec[size_t(r)];
            T* dl = w.D.data() + r * V;
            for (int64_t c = 0; c < V; ++c) dl[c] *= s;
        }
        const T gl = w.Gam[size_t(L - 1)];
        for (int64_t i = 0; i < VK; ++i) M[i] *= gl;
        gemm(true, false, V, K, L, T(1), w.D.data(), V, w.big.data(), KV, T(1), M, K);
    }
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

}  // namespace

// ---- recurrent -----------------------------------------------------------------------------------

template <typename T>
void gdn_recurrent_forward(T* o, T* state_out, const T* q, const T* k, const T* v, const T* g, const T* beta,
                           const T* state_in, const GdnDims& d, double scale) {
    check_dims(d);
    const int64_t r = d.HV / d.H, K = d.K, V = d.V, VK = V * K;
#pragma omp parallel if (worth_threads(d))
    {
        std::vector<T> scratch(state_out ? 0 : size_t(VK));
#pragma omp for schedule(static)
        for (int64_t j = 0; j < d.HV; ++j) {
            T* M = init_state(state_out, state_in, scratch, j, VK);
            const int64_t h = j / r;
            for (int64_t t = 0; t < d.T; ++t) {
                const int64_t tj = t * d.HV + j;
                recurrent_step(M, o + tj * V, q + (t * d.H + h) * K, k + (t * d.H + h) * K, v + tj * V,
                               T(std::exp(g[tj])), beta[tj], T(scale), K, V);
            }
        }
    }
}

// Reverse loop of §3.3 in the V x K layout, per token and row i of M (dM = gradient w.r.t. M):
//   o = M_t q~:           dM += do q~^T,  dq~ = M_t^T do
//   M_t = M' + delta k^T: ddelta = dM k,  dk += dM^T delta
//   delta = beta(v - e):  dbeta = ddelta.(v - e), dv = beta ddelta, de = -beta ddelta
//   e = M' k:             dM' = dM + de k^T, dk += M'^T de
//   M' = alpha M_{t-1}:   dg = <dM', M'>,  dM_{t-1} = alpha dM'
template <typename T>
void gdn_recurrent_backward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dstate_in, const T* d_o, const T* dstate_out,
                            const T* q, const T* k, const T* v, const T* g, const T* beta, const T* state_in,
                            const GdnDims& d, double scale) {
    check_dims(d);
    const int64_t r = d.HV / d.H, K = d.K, V = d.V, VK = V * K;
    const bool grouped = r > 1;
    std::vector<T> sq(grouped ? size_t(d.T * d.HV * K) : 0), sk(sq.size());
    const T s = T(scale);
#pragma omp parallel if (d.HV > 1)
    {
        std::vector<T> states(size_t((d.T + 1) * VK));  // states[t] = M before token t; states[T] = final
        std::vector<T> dMbuf(static_cast<size_t>(VK)), dqt(static_cast<size_t>(K)), dkt(static_cast<size_t>(K));
#pragma omp for schedule(static)
        for (int64_t j = 0; j < d.HV; ++j) {
            const int64_t h = j / r;
            T* S = states.data();
            if (state_in) std::memcpy(S, state_in + j * VK, size_t(VK) * sizeof(T));
            else std::fill(S, S + VK, T(0));
            for (int64_t t = 0; t < d.T; ++t) {
                const int64_t tj = t * d.HV + j;
                std::memcpy(S + (t + 1) * VK, S + t * VK, size_t(VK) * sizeof(T));
                recurrent_step<T>(S + (t + 1) * VK, nullptr, q + (t * d.H + h) * K, k + (t * d.H + h) * K,
                                  v + tj * V, T(std::exp(g[tj])), beta[tj], s, K, V);
            }
            T* dM = dMbuf.data();
            if (dstate_out) std::memcpy(dM, dstate_out + j * VK, size_t(VK) * sizeof(T));
            else std::fill(dM, dM + VK, T(0));
            T* dq_base = grouped ? sq.data() + j * K : dq + h * K;
            T* dk_base = grouped ? sk.data() + j * K : dk + h * K;
            const int64_t ld = grouped ? d.HV * K : d.H * K;
            for (int64_t t = d.T - 1; t >= 0; --t) {
                const int64_t tj = t * d.HV + j;
                const T* qt = q + (t * d.H + h) * K;
                const T* kt = k + (t * d.H + h) * K;
                const T* vt = v + tj * V;
                const T* dot_ = d_o + tj * V;
                const T alpha = T(std::exp(g[tj])), b = beta[tj];
                const T* Mp = S + t * VK;        // M_{t-1} (before the decay)
                const T* Mn = S + (t + 1) * VK;  // M_t (after the write)
                std::fill(dqt.begin(), dqt.end(), T(0));
                std::fill(dkt.begin(), dkt.end(), T(0));
                T dgt = 0, dbt = 0;
                for (int64_t i = 0; i < V; ++i) {
                    T* dm = dM + i * K;
                    const T* mp = Mp + i * K;
                    const T* mn = Mn + i * K;
                    const T doi = dot_[i], sdoi = s * doi;
                    T mpk = 0, ddelta = 0;
                    for (int64_t c = 0; c < K; ++c) {
                        dm[c] += sdoi * qt[c];
                        dqt[size_t(c)] += doi * mn[c];
                        ddelta += dm[c] * kt[c];
                        mpk += mp[c] * kt[c];
                    }
                    const T e = alpha * mpk;
                    const T delta = b * (vt[i] - e);
                    dbt += ddelta * (vt[i] - e);
                    dv[tj * V + i] = b * ddelta;
                    const T de = -b * ddelta;
                    T gacc = 0;
                    for (int64_t c = 0; c < K; ++c) {
                        dkt[size_t(c)] += delta * dm[c] + de * alpha * mp[c];
                        const T dmp = dm[c] + de * kt[c];  // dM'
                        gacc += dmp * mp[c];
                        dm[c] = alpha * dmp;
                    }
                    dgt += alpha * gacc;
                }
                T* dqo = dq_base + t * ld;
                T* dko = dk_base + t * ld;
                for (int64_t c = 0; c < K; ++c) dqo[c] = s * dqt[size_t(c)], dko[c] = dkt[size_t(c)];
                dg[tj] = dgt;
                dbeta[tj] = dbt;
            }
            if (dstate_in) std::memcpy(dstate_in + j * VK, dM, size_t(VK) * sizeof(T));
        }
    }
    if (grouped) {
        reduce_group(dq, sq.data(), d);
        reduce_group(dk, sk.data(), d);
    }
}

// ---- chunked -------------------------------------------------------------------------------------

template <typename T>
void gdn_chunked_forward(T* o, T* state_out, T* chunk_states, const T* q, const T* k, const T* v, const T* g,
                         const T* beta, const T* state_in, const GdnDims& d, double scale, int64_t chunk_size) {
    check_dims(d);
    HYDRA_ASSERT(chunk_size >= 1, "gdn: chunk_size {}", chunk_size);
    const int64_t VK = d.V * d.K;
#pragma omp parallel if (worth_threads(d))
    {
        ChunkWork<T> w(chunk_size, d.K, d.V, false);
        std::vector<T> scratch(state_out ? 0 : size_t(VK));
#pragma omp for schedule(static)
        for (int64_t j = 0; j < d.HV; ++j) {
            T* M = init_state(state_out, state_in, scratch, j, VK);
            chunk_forward_head(w, M, o, chunk_states, (T*)nullptr, q, k, v, g, beta, d, j, T(scale));
        }
    }
}

// Per chunk n (reverse order), with M0 the entering state and dM = dL/dM1 of the leaving state
// (gdn.md §3.2, in the V x K layout; E, Gamma, dec, P, A, T, W, delta recomputed by chunk_prepare):
//   d delta = diag(dec) K dM^T + scale P^T dO
//   dq      = scale diag(Gamma) dO M0 + G_P K,    G_P = (scale dO delta^T) o E (causal),
//   dk      = G_P^T Q + diag(dec) delta dM + diag(beta Gamma) dX + (Gb + Gb^T) K
//   dW      = -d delta M0;  [dX | dY] = T^T [dW | d delta];  dT = [dW | d delta] [X | Y]^T
//   dA      = -T^T dT T^T (strictly lower);  Gb = diag(beta) (dA o E);  dv = diag(beta) dY
//   dM0     = Gamma_last dM + scale dO^T diag(Gamma) Q - d delta^T W
// and d gamma collects every place gamma enters (E, Gamma, dec, Gamma_last), then dg is its reverse
// chunk-local cumsum.
template <typename T>
void gdn_chunked_backward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dstate_in, const T* d_o, const T* dstate_out,
                          const T* q, const T* k, const T* v, const T* g, const T* beta, const T* state_in,
                          const T* chunk_states, const GdnDims& d, double scale, int64_t chunk_size) {
    check_dims(d);
    HYDRA_ASSERT(chunk_size >= 1, "gdn: chunk_size {}", chunk_size);
    const int64_t r = d.HV / d.H, K = d.K, V = d.V, VK = V * K, C = chunk_size, KV = K + V;
    const int64_t NT = gdn_num_chunks(d.T, C);
    const bool grouped = r > 1;
    std::vector<T> sq(grouped ? size_t(d.T * d.HV * K) : 0), sk(sq.size());
    const T s = T(scale);
#pragma omp parallel if (d.HV > 1)
    {
        ChunkWork<T> w(C, K, V, true);
        std::vector<T> own_states(chunk_states ? 0 : size_t(NT * VK)), dMbuf(static_cast<size_t>(VK)), Mscan;
        if (!chunk_states) Mscan.resize(size_t(VK));
#pragma omp for schedule(static)
        for (int64_t j = 0; j < d.HV; ++j) {
            const int64_t h = j / r;
            if (!chunk_states) {
                T* M = init_state((T*)nullptr, state_in, Mscan, j, VK);
                chunk_forward_head(w, M, (T*)nullptr, (T*)nullptr, own_states.data(), q, k, v, g, beta, d, j, s);
            }
            T* dM = dMbuf.data();
            if (dstate_out) std::memcpy(dM, dstate_out + j * VK, size_t(VK) * sizeof(T));
            else std::fill(dM, dM + VK, T(0));
            T* dq_base = grouped ? sq.data() + j * K : dq + h * K;
            T* dk_base = grouped ? sk.data() + j * K : dk + h * K;
            const int64_t ldg = grouped ? d.HV * K : d.H * K;
            for (int64_t n = NT - 1; n >= 0; --n) {
                const T* M0 = chunk_states ? chunk_states + (n * d.HV + j) * VK : own_states.data() + n * VK;
                const ChunkView<T> cv = chunk_view(q, k, v, g, beta, d, j, n, C);
                const int64_t L = cv.L, t0 = cv.t0;
                chunk_prepare(w, cv, M0, false);
                const T* Kc = w.big.data();  // [K; Q] rows of stride KV
                const T* Qc = Kc + L * KV;
                const T* WU = Kc + 2 * L * KV;
                const T* P = w.S2.data() + L * C;
                T* dqc = dq_base + t0 * ldg;
                T* dkc = dk_base + t0 * ldg;
                double* dgam = w.dgam.data();
                std::fill(w.dgam.begin(), w.dgam.begin() + L, 0.0);
                std::fill(w.dbet.begin(), w.dbet.begin() + L, 0.0);
                T* dO = w.OD.data();
                T* dD = w.OD.data() + L * V;
                for (int64_t i = 0; i < L; ++i)
                    std::memcpy(dO + i * V, d_o + ((t0 + i) * d.HV + j) * V, size_t(V) * sizeof(T));

                // d delta = diag(dec) K dM^T + scale P^T dO
                gemm_set(false, true, L, V, K, T(1), Kc, KV, dM, K, dD, V);
                for (int64_t i = 0; i < L; ++i) {
                    const T sd = w.dec[size_t(i)];
                    T* row = dD + i * V;
                    for (int64_t c = 0; c < V; ++c) row[c] *= sd;
                }
                gemm(true, false, L, V, L, s, P, C, dO, V, T(1), dD, V);

                // [dO; d delta] M0: the inter-chunk dq (and its gamma term d gamma_r += q_r . dq_r), and -dW
                gemm_set(false, false, 2 * L, K, V, T(1), w.OD.data(), V, M0, K, w.RK.data(), K);
                for (int64_t i = 0; i < L; ++i) {
                    const T sg = s * w.Gam[size_t(i)];
                    const T* src = w.RK.data() + i * K;
                    const T* qr = Qc + i * KV;
                    T* row = dqc + i * ldg;
                    T acc = 0;
                    for (int64_t c = 0; c < K; ++c) {
                        row[c] = sg * src[c];
                        acc += qr[c] * row[c];
                    }
                    dgam[i] += double(acc);
                }
                // intra-chunk scores: dP = scale dO delta^T; gamma terms (row sums minus column sums of
                // dP o P), then G_P = dP o E
                gemm_set(false, true, L, L, V, s, dO, V, w.D.data(), V, w.GP.data(), C);
                std::fill(w.colsum.begin(), w.colsum.begin() + L, 0.0);
                for (int64_t i = 0; i < L; ++i) {
                    T* gp = w.GP.data() + i * C;
                    const T* p = P + i * C;
                    const T* e = w.E.data() + i * C;
                    double* cs = w.colsum.data();
                    double rs = 0;
#pragma omp simd reduction(+ : rs)
                    for (int64_t c = 0; c <= i; ++c) {
                        const double hh = double(gp[c]) * double(p[c]);
                        rs += hh;
                        cs[c] += hh;
                        gp[c] *= e[c];
                    }
                    for (int64_t c = i + 1; c < L; ++c) gp[c] = 0;
                    dgam[i] += rs;
                }
                for (int64_t c = 0; c < L; ++c) dgam[c] -= w.colsum[size_t(c)];
                gemm(false, false, L, K, L, T(1), w.GP.data(), C, Kc, KV, T(1), dqc, ldg);

                // dk through the leaving state: diag(dec) delta dM; gamma terms of dec and Gamma_last
                gemm_set(false, false, L, K, V, T(1), w.D.data(), V, dM, K, w.tK.data(), K);
                double glast = 0;
                for (int64_t i = 0; i < L; ++i) {
                    T* row = w.tK.data() + i * K;
                    const T* kr = Kc + i * KV;
                    const T sd = w.dec[size_t(i)];
                    T acc = 0;
                    for (int64_t c = 0; c < K; ++c) {
                        row[c] *= sd;
                        acc += kr[c] * row[c];
                    }
                    glast += double(acc);
                    dgam[i] -= double(acc);
                }
                glast += double(w.Gam[size_t(L - 1)]) * double(dot(M0, dM, VK));
                dgam[L - 1] += glast;

                // the state gradient for the previous chunk: Gamma_last dM + [dO; d delta]^T [scale
                // diag(Gamma) Q; -W]
                for (int64_t i = 0; i < L; ++i) {
                    const T sg = s * w.Gam[size_t(i)];
                    const T* qr = Qc + i * KV;
                    const T* wr = WU + i * KV;
                    T* a = w.QGW.data() + i * K;
                    T* b = w.QGW.data() + (L + i) * K;
                    for (int64_t c = 0; c < K; ++c) a[c] = sg * qr[c], b[c] = -wr[c];
                }
                const T gl = w.Gam[size_t(L - 1)];
                for (int64_t i = 0; i < VK; ++i) dM[i] *= gl;
                gemm(true, false, V, K, 2 * L, T(1), w.OD.data(), V, w.QGW.data(), K, T(1), dM, K);

                // back through [W | U] = T [X | Y]
                for (int64_t i = 0; i < L; ++i) {
                    T* row = w.dWD.data() + i * KV;
                    const T* nw = w.RK.data() + (L + i) * K;  // d delta M0 = -dW
                    for (int64_t c = 0; c < K; ++c) row[c] = -nw[c];
                    std::memcpy(row + K, dD + i * V, size_t(V) * sizeof(T));
                }
                gemm_set(false, true, L, L, KV, T(1), w.dWD.data(), KV, w.XY.data(), KV, w.dT.data(), C);
                gemm_set(true, false, L, KV, L, T(1), w.Tm.data(), C, w.dWD.data(), KV, w.dXY.data(), KV);
                for (int64_t i = 0; i < L; ++i) {
                    const T* kr = Kc + i * KV;
                    const T* vr = cv.v + i * cv.ldv;
                    const T* dx = w.dXY.data() + i * KV;
                    const T* dy = dx + K;
                    const T b = w.bet[size_t(i)], sg = w.Gam[size_t(i)];
                    const double px = double(dot(dx, kr, K));
                    w.dbet[size_t(i)] += double(sg) * px + double(dot(dy, vr, V));
                    dgam[i] += double(b) * double(sg) * px;
                    T* tk = w.tK.data() + i * K;
                    const T bg = b * sg;
                    for (int64_t c = 0; c < K; ++c) tk[c] += bg * dx[c];
                    T* dvr = dv + ((t0 + i) * d.HV + j) * V;
                    for (int64_t c = 0; c < V; ++c) dvr[c] = b * dy[c];
                }

                // back through T = (I + A)^-1: dA = -T^T dT T^T, kept strictly lower
                gemm_set(false, true, L, L, L, T(1), w.dT.data(), C, w.Tm.data(), C, w.tLL.data(), C);
                gemm_set(true, false, L, L, L, T(-1), w.Tm.data(), C, w.tLL.data(), C, w.dA.data(), C);
                std::fill(w.colsum.begin(), w.colsum.begin() + L, 0.0);
                for (int64_t i = 0; i < L; ++i) {
                    T* da = w.dA.data() + i * C;
                    const T* a = w.A.data() + i * C;
                    const T* e = w.E.data() + i * C;
                    const T* kk = w.S2.data() + i * C;
                    double* cs = w.colsum.data();
                    const T b = w.bet[size_t(i)];
                    double rs = 0;
                    T db = 0;
#pragma omp simd reduction(+ : rs, db)
                    for (int64_t c = 0; c < i; ++c) {
                        const double hh = double(da[c]) * double(a[c]);
                        rs += hh;
                        cs[c] += hh;
                        const T G = da[c] * e[c];
                        db += G * kk[c];
                        da[c] = b * G;  // Gb
                    }
                    dgam[i] += rs;
                    w.dbet[size_t(i)] += double(db);
                }
                for (int64_t c = 0; c < L; ++c) dgam[c] -= w.colsum[size_t(c)];

                // dk = [Gb + Gb^T | G_P^T] [K; Q] + the elementwise parts
                const int64_t ldlg = 2 * C;
                for (int64_t i = 0; i < L; ++i) {
                    T* lg = w.LG.data() + i * ldlg;
                    for (int64_t c = 0; c < i; ++c) lg[c] = w.dA[size_t(i * C + c)];  // Gb strictly lower
                    lg[i] = 0;
                    for (int64_t c = i + 1; c < L; ++c) lg[c] = w.dA[size_t(c * C + i)];
                    T* lt = lg + L;
                    for (int64_t c = 0; c < i; ++c) lt[c] = 0;
                    for (int64_t c = i; c < L; ++c) lt[c] = w.GP[size_t(c * C + i)];
                }
                gemm_set(false, false, L, K, 2 * L, T(1), w.LG.data(), ldlg, Kc, KV, dkc, ldg);
                for (int64_t i = 0; i < L; ++i) {
                    T* row = dkc + i * ldg;
                    const T* tk = w.tK.data() + i * K;
                    for (int64_t c = 0; c < K; ++c) row[c] += tk[c];
                }

                // dg_t = sum of d gamma_r over r >= t in the chunk
                double acc = 0;
                for (int64_t i = L - 1; i >= 0; --i) {
                    acc += dgam[i];
                    dg[(t0 + i) * d.HV + j] = T(acc);
                    dbeta[(t0 + i) * d.HV + j] = T(w.dbet[size_t(i)]);
                }
            }
            if (dstate_in) std::memcpy(dstate_in + j * VK, dM, size_t(VK) * sizeof(T));
        }
    }
    if (grouped) {
        reduce_group(dq, sq.data(), d);
        reduce_group(dk, sk.data(), d);
    }
}

#define HYDRA_INSTANTIATE(T)                                                                                     \
    template void gdn_recurrent_forward<T>(T*, T*, const T*, const T*, const T*, const T*, const T*, const T*,   \
                                           const GdnDims&, double);                                              \
    template void gdn_recurrent_backward<T>(T*, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*,      \
                                            const T*, const T*, const T*, const T*, const GdnDims&, double);     \
    template void gdn_chunked_forward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, const T*, \
                                         const GdnDims&, double, int64_t);                                       \
    template void gdn_chunked_backward<T>(T*, T*, T*, T*, T*, T*, const T*, const T*, const T*, const T*,        \
                                          const T*, const T*, const T*, const T*, const T*, const GdnDims&,      \
                                          double, int64_t);
HYDRA_INSTANTIATE(float)
HYDRA_INSTANTIATE(double)
#undef HYDRA_INSTANTIATE

}  // namespace hydra::cpu
