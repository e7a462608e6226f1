// Vocabulary-chunked LM-head losses (see losses.h). Each row block runs two passes over the
// vocabulary: pass 1 builds every row's log-sum-exp online, pass 2 converts the logits tiles into
// gradients and multiplies them back through the head (dhidden += G @ W_c, dW_c += G^T @ h).
#include "train/losses.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/gemm.h"
#include "ops/cpu/fast_exp.h"

namespace hydra {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check_shapes(const char* what, int64_t T, int64_t V, const LossChunking& ck) {
    HYDRA_CHECK(T >= 0 && V > 0, "{}: need T >= 0 and V > 0 (got T={}, V={})", what, T, V);
    HYDRA_CHECK(
        ck.row_block > 0 && ck.vocab_chunk > 0 && ck.max_cached_logits >= 0,
        "{}: LossChunking needs row_block > 0, vocab_chunk > 0, max_cached_logits >= 0 (got {}, {}, {})",
        what, ck.row_block, ck.vocab_chunk, ck.max_cached_logits);
}

// Online log-sum-exp of one row: max is the largest logit seen, sum = sum exp(z - max).
struct OnlineLse {
    float max = kNegInf;
    double sum = 0;

    // Folds in n logits; returns the (possibly new) max so callers can rescale companion sums.
    // vector_exp: the vectorised cpu::exp_approx (relative error < 1e-7) instead of libm's expf.
    void add(const float* z, int64_t n, double* rescale, bool vector_exp = false) {
        float cm = kNegInf;
#pragma omp simd reduction(max : cm)
        for (int64_t j = 0; j < n; ++j) cm = std::max(cm, z[j]);
        *rescale = 1.0;
        if (cm > max) {
            *rescale = max == kNegInf ? 0.0 : std::exp(double(max) - double(cm));
            sum *= *rescale;
            max = cm;
        }
        if (max == kNegInf) return;  // every logit so far is -inf
        double s = 0;
        if (vector_exp) {
            const float m = max;
#pragma omp simd reduction(+ : s)
            for (int64_t j = 0; j < n; ++j) s += double(cpu::exp_approx(z[j] - m));
        } else {
            for (int64_t j = 0; j < n; ++j) s += std::exp(z[j] - max);
        }
        sum += s;
    }
    double lse() const {
        return double(max) + std::log(sum);
    }
};

// Rows [r0, r0 + nb) of one tile live at tile + i * ld; a tile covers columns [v0, v0 + nv).
struct Tiling {
    int64_t rows, cols;  // row block and vocabulary chunk actually used
    bool cached;         // the whole row block's logits stay in memory between the passes
};

Tiling make_tiling(int64_t T, int64_t V, const LossChunking& ck, int64_t matrices) {
    Tiling t;
    t.rows = std::max<int64_t>(1, std::min(ck.row_block, T));
    t.cols = std::min(ck.vocab_chunk, V);
    t.cached = t.rows * V * matrices <= ck.max_cached_logits;
    return t;
}

// logits tile (nb, nv) at `out` (leading dim ld) = alpha * h (nb, C) @ W[v0 : v0 + nv]^T.
void logits_tile(const float* h, const float* W, int64_t nb, int64_t C, int64_t v0, int64_t nv, float alpha,
                 float* out, int64_t ld) {
    gemm(false, true, nb, nv, C, alpha, h, C, W + v0 * C, C, 0.0f, out, ld);
}

// dhidden (nb, C) += G (nb, nv) @ W_c (nv, C);  dW_c (nv, C) += G^T @ h (nb, C).
void backprop_tile(const float* G, int64_t ld, const float* h, const float* W, int64_t nb, int64_t C,
                   int64_t v0, int64_t nv, float* dh, float* dW) {
    if (dh) gemm(false, false, nb, C, nv, 1.0f, G, ld, W + v0 * C, C, 1.0f, dh, C);
    if (dW) gemm(true, false, nv, C, nb, 1.0f, G, ld, h, C, 1.0f, dW + v0 * C, C);
}

// Grow-only logits buffers of the calling thread: with a large vocabulary a cached row block is tens of
// MiB, which a fresh vector would fault in again on every call.
float* tile_buffer(int which, size_t n) {
    static thread_local std::vector<float> bufs[2];
    if (bufs[which].size() < n) bufs[which].resize(n);
    return bufs[which].data();
}

// OpenMP pays off only for tiles with real work in them.
constexpr int64_t kParallelMin = 1 << 15;

}  // namespace

LossResult cross_entropy_lm_head(const float* hidden, const float* W, const int32_t* targets, int64_t T,
                                 int64_t C, int64_t V, float* dhidden, float* dW, float grad_scale,
                                 const LossChunking& chunking) {
    check_shapes("cross_entropy_lm_head", T, V, chunking);
    HYDRA_CHECK(C > 0, "cross_entropy_lm_head: need C > 0 (got {})", C);
    for (int64_t t = 0; t < T; ++t)
        HYDRA_CHECK(targets[t] >= -1 && targets[t] < V,
                    "cross_entropy_lm_head: target {} at row {} is outside [0, {}) and is not -1 (ignore)",
                    targets[t], t, V);
    LossResult result;
    if (dhidden) std::memset(dhidden, 0, size_t(T * C) * sizeof(float));
    if (T == 0) return result;

    const Tiling tl = make_tiling(T, V, chunking, 1);
    const int64_t ld_tile = tl.cached ? V : tl.cols;
    float* const buf = tile_buffer(0, size_t(tl.rows * ld_tile));
    std::vector<OnlineLse> stats(size_t(tl.rows));
    std::vector<float> target_logit(size_t(tl.rows));
    std::vector<double> lse(size_t(tl.rows));
    const bool want_grad = dhidden || dW;

    for (int64_t r0 = 0; r0 < T; r0 += tl.rows) {
        const int64_t nb = std::min(tl.rows, T - r0);
        const float* h = hidden + r0 * C;
        const int32_t* tg = targets + r0;
        std::fill(stats.begin(), stats.end(), OnlineLse{});
        std::fill(target_logit.begin(), target_logit.end(), 0.0f);

        // Pass 1: log-sum-exp and the target's logit per row.
        for (int64_t v0 = 0; v0 < V; v0 += tl.cols) {
            const int64_t nv = std::min(tl.cols, V - v0);
            float* tile = buf + (tl.cached ? v0 : 0);
            logits_tile(h, W, nb, C, v0, nv, 1.0f, tile, ld_tile);
#pragma omp parallel for schedule(static) if (nb * nv >= kParallelMin)
            for (int64_t i = 0; i < nb; ++i) {
                const float* z = tile + i * ld_tile;
                double rescale;
                stats[size_t(i)].add(z, nv, &rescale, true);
                if (tg[i] >= v0 && tg[i] < v0 + nv) target_logit[size_t(i)] = z[tg[i] - v0];
            }
        }
        bool any = false;
        for (int64_t i = 0; i < nb; ++i) {
            lse[size_t(i)] = stats[size_t(i)].lse();
            if (tg[i] < 0) continue;
            result.loss += lse[size_t(i)] - double(target_logit[size_t(i)]);
            result.count++;
            any = true;
        }
        if (!want_grad || !any) continue;

        // Pass 2: G = grad_scale * (softmax - onehot), zero on ignored rows, then through the head.
        for (int64_t v0 = 0; v0 < V; v0 += tl.cols) {
            const int64_t nv = std::min(tl.cols, V - v0);
            float* tile = buf + (tl.cached ? v0 : 0);
            if (!tl.cached) logits_tile(h, W, nb, C, v0, nv, 1.0f, tile, ld_tile);
#pragma omp parallel for schedule(static) if (nb * nv >= kParallelMin)
            for (int64_t i = 0; i < nb; ++i) {
                float* z = tile + i * ld_tile;
                if (tg[i] < 0) {
                    std::fill(z, z + nv, 0.0f);
                    continue;
                }
                const float l = float(lse[size_t(i)]);
#pragma omp simd
                for (int64_t j = 0; j < nv; ++j) z[j] = cpu::exp_approx(z[j] - l) * grad_scale;
                if (tg[i] >= v0 && tg[i] < v0 + nv) z[tg[i] - v0] -= grad_scale;
            }
            backprop_tile(tile, ld_tile, h, W, nb, C, v0, nv, dhidden ? dhidden + r0 * C : nullptr, dW);
        }
    }
    return result;
}

LossResult cross_entropy_lm_head(const double* h, const double* W, const int32_t* targets, int64_t N,
                                 int64_t C, int64_t V, double* dh, double* dW, double scale) {
    LossResult r;
    std::vector<double> logits(static_cast<size_t>(V));
    for (int64_t n = 0; n < N; ++n) {
        if (dh) std::fill(dh + n * C, dh + (n + 1) * C, 0.0);
        if (targets[n] < 0) continue;
        HYDRA_CHECK(targets[n] < V, "cross-entropy: target {} at row {} outside 0..{}", targets[n], n, V - 1);
        double m = -INFINITY;
        for (int64_t v = 0; v < V; ++v) {
            double s = 0;
            for (int64_t c = 0; c < C; ++c) s += h[n * C + c] * W[v * C + c];
            logits[size_t(v)] = s;
            m = std::max(m, s);
        }
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(logits[size_t(v)] - m);
        r.loss += std::log(z) + m - logits[size_t(targets[n])];
        r.count++;
        if (!dh && !dW) continue;
        for (int64_t v = 0; v < V; ++v) {
            const double g = (std::exp(logits[size_t(v)] - m) / z - (v == targets[n] ? 1.0 : 0.0)) * scale;
            for (int64_t c = 0; c < C; ++c) {
                if (dh) dh[n * C + c] += g * W[v * C + c];
                if (dW) dW[v * C + c] += g * h[n * C + c];
            }
        }
    }
    return r;
}

LossResult kl_lm_head(const float* s_hidden, const float* s_W, int64_t Cs, const float* t_hidden,
                      const float* t_W, int64_t Ct, int64_t T, int64_t V, float tau, float* dhidden,
                      float* dW, float grad_scale, const LossChunking& chunking) {
    check_shapes("kl_lm_head", T, V, chunking);
    HYDRA_CHECK(Cs > 0 && Ct > 0, "kl_lm_head: need Cs > 0 and Ct > 0 (got {}, {})", Cs, Ct);
    HYDRA_CHECK(std::isfinite(tau) && tau > 0, "kl_lm_head: temperature tau must be > 0 (got {})", tau);
    LossResult result;
    if (dhidden) std::memset(dhidden, 0, size_t(T * Cs) * sizeof(float));
    if (T == 0) return result;

    const Tiling tl = make_tiling(T, V, chunking, 2);
    const int64_t ld_tile = tl.cached ? V : tl.cols;
    float* const sbuf = tile_buffer(0, size_t(tl.rows * ld_tile));
    float* const tbuf = tile_buffer(1, size_t(tl.rows * ld_tile));
    std::vector<OnlineLse> s_stats(size_t(tl.rows)), t_stats(size_t(tl.rows));
    // cross[i] = sum_v exp(zt - t_max) * (zt - zs), rescaled together with the teacher's sum, so
    // that KL = cross / t_sum - lse_t + lse_s (logits already divided by tau).
    std::vector<double> cross(size_t(tl.rows)), s_lse(size_t(tl.rows)), t_lse(size_t(tl.rows));
    const bool want_grad = dhidden || dW;
    const float inv_tau = 1.0f / tau;
    // d(tau^2 KL)/d(raw student logit) = tau^2 * (p_s - p_t) / tau.
    const float g_mul = grad_scale * tau;

    for (int64_t r0 = 0; r0 < T; r0 += tl.rows) {
        const int64_t nb = std::min(tl.rows, T - r0);
        const float* hs = s_hidden + r0 * Cs;
        const float* ht = t_hidden + r0 * Ct;
        std::fill(s_stats.begin(), s_stats.end(), OnlineLse{});
        std::fill(t_stats.begin(), t_stats.end(), OnlineLse{});
        std::fill(cross.begin(), cross.end(), 0.0);

        for (int64_t v0 = 0; v0 < V; v0 += tl.cols) {
            const int64_t nv = std::min(tl.cols, V - v0);
            float* zs_tile = sbuf + (tl.cached ? v0 : 0);
            float* zt_tile = tbuf + (tl.cached ? v0 : 0);
            logits_tile(hs, s_W, nb, Cs, v0, nv, inv_tau, zs_tile, ld_tile);
            logits_tile(ht, t_W, nb, Ct, v0, nv, inv_tau, zt_tile, ld_tile);
#pragma omp parallel for schedule(static) if (nb * nv >= kParallelMin)
            for (int64_t i = 0; i < nb; ++i) {
                const float* zs = zs_tile + i * ld_tile;
                const float* zt = zt_tile + i * ld_tile;
                double rescale;
                s_stats[size_t(i)].add(zs, nv, &rescale);
                OnlineLse& ts = t_stats[size_t(i)];
                ts.add(zt, nv, &rescale);
                cross[size_t(i)] *= rescale;
                if (ts.max == kNegInf) continue;
                double c = 0;
                for (int64_t j = 0; j < nv; ++j) {
                    const double e = std::exp(zt[j] - ts.max);
                    if (e > 0) c += e * (double(zt[j]) - double(zs[j]));
                }
                cross[size_t(i)] += c;
            }
        }
        for (int64_t i = 0; i < nb; ++i) {
            s_lse[size_t(i)] = s_stats[size_t(i)].lse();
            t_lse[size_t(i)] = t_stats[size_t(i)].lse();
            const double kl = cross[size_t(i)] / t_stats[size_t(i)].sum - t_lse[size_t(i)] + s_lse[size_t(i)];
            result.loss += double(tau) * double(tau) * kl;
        }
        result.count += nb;
        if (!want_grad) continue;

        for (int64_t v0 = 0; v0 < V; v0 += tl.cols) {
            const int64_t nv = std::min(tl.cols, V - v0);
            float* zs_tile = sbuf + (tl.cached ? v0 : 0);
            float* zt_tile = tbuf + (tl.cached ? v0 : 0);
            if (!tl.cached) {
                logits_tile(hs, s_W, nb, Cs, v0, nv, inv_tau, zs_tile, ld_tile);
                logits_tile(ht, t_W, nb, Ct, v0, nv, inv_tau, zt_tile, ld_tile);
            }
#pragma omp parallel for schedule(static) if (nb * nv >= kParallelMin)
            for (int64_t i = 0; i < nb; ++i) {
                float* zs = zs_tile + i * ld_tile;
                const float* zt = zt_tile + i * ld_tile;
                const float ls = float(s_lse[size_t(i)]), lt = float(t_lse[size_t(i)]);
                for (int64_t j = 0; j < nv; ++j)
                    zs[j] = (std::exp(zs[j] - ls) - std::exp(zt[j] - lt)) * g_mul;
            }
            backprop_tile(zs_tile, ld_tile, hs, s_W, nb, Cs, v0, nv, dhidden ? dhidden + r0 * Cs : nullptr,
                          dW);
        }
    }
    return result;
}

LossResult mse(const float* a, const float* target, int64_t n, float* da, float grad_scale) {
    HYDRA_CHECK(n >= 0, "mse: negative element count {}", n);
    double sum = 0;
    const float two_scale = 2.0f * grad_scale;
#pragma omp parallel for schedule(static) reduction(+ : sum) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
        const float d = a[i] - target[i];
        sum += double(d) * double(d);
        if (da) da[i] = two_scale * d;
    }
    return {sum, n};
}

}  // namespace hydra
