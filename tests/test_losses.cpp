// Tests for the vocabulary-chunked LM-head losses (train/losses.h): against a naive full-matrix
// double implementation under many tilings, finite differences, a PyTorch golden, ignore-index,
// large logits, and the overwrite/accumulate contract of the gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model_paths.h"
#include "train/losses.h"

namespace hydra {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

Vec randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    Vec v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

// logits (T, V) = h (T, C) @ W^T in double.
DVec ref_logits(const Vec& h, const Vec& W, int64_t T, int64_t C, int64_t V, double scale = 1.0) {
    DVec z(size_t(T * V));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t v = 0; v < V; ++v) {
            double s = 0;
            for (int64_t c = 0; c < C; ++c) s += double(h[size_t(t * C + c)]) * double(W[size_t(v * C + c)]);
            z[size_t(t * V + v)] = s * scale;
        }
    return z;
}

DVec ref_log_softmax_row(const double* z, int64_t V) {
    double m = *std::max_element(z, z + V), s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - m);
    DVec out(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) out[size_t(v)] = z[v] - m - std::log(s);
    return out;
}

struct Ref {
    double loss = 0;
    int64_t count = 0;
    DVec dh, dW;  // gradients of grad_scale * loss
};

// dh = G @ W, dW = G^T @ h for G (T, V) = d(loss)/d(logits).
void ref_backprop(const DVec& G, const Vec& h, const Vec& W, int64_t T, int64_t C, int64_t V, Ref& r) {
    r.dh.assign(size_t(T * C), 0.0);
    r.dW.assign(size_t(V * C), 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t v = 0; v < V; ++v) {
            const double g = G[size_t(t * V + v)];
            for (int64_t c = 0; c < C; ++c) {
                r.dh[size_t(t * C + c)] += g * W[size_t(v * C + c)];
                r.dW[size_t(v * C + c)] += g * h[size_t(t * C + c)];
            }
        }
}

Ref ref_ce(const Vec& h, const Vec& W, const std::vector<int32_t>& tg, int64_t T, int64_t C, int64_t V,
           double grad_scale) {
    Ref r;
    const DVec z = ref_logits(h, W, T, C, V);
    DVec G(size_t(T * V), 0.0);
    for (int64_t t = 0; t < T; ++t) {
        if (tg[size_t(t)] < 0) continue;
        const DVec lp = ref_log_softmax_row(&z[size_t(t * V)], V);
        r.loss -= lp[size_t(tg[size_t(t)])];
        r.count++;
        for (int64_t v = 0; v < V; ++v)
            G[size_t(t * V + v)] = grad_scale * (std::exp(lp[size_t(v)]) - (v == tg[size_t(t)] ? 1.0 : 0.0));
    }
    ref_backprop(G, h, W, T, C, V, r);
    return r;
}

Ref ref_kl(const Vec& hs, const Vec& Ws, int64_t Cs, const Vec& ht, const Vec& Wt, int64_t Ct, int64_t T,
           int64_t V, double tau, double grad_scale) {
    Ref r;
    const DVec zs = ref_logits(hs, Ws, T, Cs, V, 1.0 / tau), zt = ref_logits(ht, Wt, T, Ct, V, 1.0 / tau);
    DVec G(size_t(T * V));
    for (int64_t t = 0; t < T; ++t) {
        const DVec ls = ref_log_softmax_row(&zs[size_t(t * V)], V),
                   lt = ref_log_softmax_row(&zt[size_t(t * V)], V);
        for (int64_t v = 0; v < V; ++v) {
            const double pt = std::exp(lt[size_t(v)]), ps = std::exp(ls[size_t(v)]);
            r.loss += tau * tau * pt * (lt[size_t(v)] - ls[size_t(v)]);
            G[size_t(t * V + v)] = grad_scale * tau * (ps - pt);
        }
        r.count++;
    }
    ref_backprop(G, hs, Ws, T, Cs, V, r);
    return r;
}

double max_abs_diff(const Vec& a, const DVec& b) {
    EXPECT_EQ(a.size(), b.size());
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
    return m;
}

double max_abs(const DVec& b) {
    double m = 0;
    for (double x : b) m = std::max(m, std::abs(x));
    return m;
}

// Tilings that cover: one tile, ragged last row block and vocab chunk, single rows/columns, cached
// and recomputed second pass.
std::vector<LossChunking> tilings() {
    return {
        LossChunking{},               // defaults: one tile, cached
        LossChunking{3, 5, 0},        // ragged blocks, recompute
        LossChunking{3, 5, 1 << 20},  // ragged blocks, cached
        LossChunking{1, 37, 0},       // one row at a time, whole vocabulary
        LossChunking{7, 1, 0},        // one column at a time
        LossChunking{4, 8, 0},        // 37 = 4 * 8 + 5
        LossChunking{2, 16, 2 * 37},  // exactly at the cache limit (CE caches, KL recomputes)
    };
}

constexpr int64_t kT = 7, kC = 5, kV = 37;

std::vector<int32_t> some_targets() {
    return {3, 36, 0, 17, -1, 8, 36};
}

TEST(Losses, CrossEntropyMatchesNaiveReferenceUnderAllTilings) {
    const Vec h = randn(kT * kC, 1, 1.3f), W = randn(kV * kC, 2);
    const auto tg = some_targets();
    const float scale = 0.37f;
    const Ref ref = ref_ce(h, W, tg, kT, kC, kV, scale);
    ASSERT_EQ(ref.count, 6);
    for (const LossChunking& ck : tilings()) {
        SCOPED_TRACE(testing::Message() << "row_block " << ck.row_block << " vocab_chunk " << ck.vocab_chunk
                                        << " cache " << ck.max_cached_logits);
        Vec dh(kT * kC, 123.0f), dW(kV * kC, 0.0f);
        const LossResult r =
            cross_entropy_lm_head(h.data(), W.data(), tg.data(), kT, kC, kV, dh.data(), dW.data(), scale, ck);
        EXPECT_EQ(r.count, ref.count);
        EXPECT_NEAR(r.loss, ref.loss, 1e-5 * std::abs(ref.loss));
        EXPECT_LT(max_abs_diff(dh, ref.dh), 1e-6 * std::max(1.0, max_abs(ref.dh)) * 10);
        EXPECT_LT(max_abs_diff(dW, ref.dW), 1e-6 * std::max(1.0, max_abs(ref.dW)) * 10);
        // Forward only gives the same loss.
        const LossResult f =
            cross_entropy_lm_head(h.data(), W.data(), tg.data(), kT, kC, kV, nullptr, nullptr, scale, ck);
        EXPECT_EQ(f.count, r.count);
        EXPECT_DOUBLE_EQ(f.loss, r.loss);
    }
}

TEST(Losses, CrossEntropyGradientsMatchFiniteDifferences) {
    const Vec h = randn(kT * kC, 3, 0.8f), W = randn(kV * kC, 4);
    const auto tg = some_targets();
    Vec dh(kT * kC), dW(kV * kC, 0.0f);
    const LossChunking ck{3, 5, 0};
    cross_entropy_lm_head(h.data(), W.data(), tg.data(), kT, kC, kV, dh.data(), dW.data(), 1.0f, ck);
    // Central differences of the float loss (summed in double); step large enough to beat rounding.
    const float eps = 1e-2f;
    auto loss_at = [&](const Vec& hh, const Vec& WW) {
        return cross_entropy_lm_head(hh.data(), WW.data(), tg.data(), kT, kC, kV, nullptr, nullptr, 1.0f, ck)
            .loss;
    };
    for (size_t i = 0; i < h.size(); i += 3) {
        Vec hp = h, hm = h;
        hp[i] += eps;
        hm[i] -= eps;
        const double fd = (loss_at(hp, W) - loss_at(hm, W)) / (2.0 * eps);
        EXPECT_NEAR(dh[i], fd, 2e-3) << "dhidden[" << i << "]";
    }
    for (size_t i = 0; i < W.size(); i += 7) {
        Vec Wp = W, Wm = W;
        Wp[i] += eps;
        Wm[i] -= eps;
        const double fd = (loss_at(h, Wp) - loss_at(h, Wm)) / (2.0 * eps);
        EXPECT_NEAR(dW[i], fd, 2e-3) << "dW[" << i << "]";
    }
}

TEST(Losses, CrossEntropyIgnoreIndexAndAccumulateContract) {
    const Vec h = randn(kT * kC, 5), W = randn(kV * kC, 6);
    const std::vector<int32_t> tg = {-1, 4, -1, -1, 20, -1, -1};
    const Ref ref = ref_ce(h, W, tg, kT, kC, kV, 1.0);
    Vec dh(kT * kC, 9.0f), dW(kV * kC, 1.0f);  // dh must be overwritten, dW accumulated
    const LossResult r = cross_entropy_lm_head(h.data(), W.data(), tg.data(), kT, kC, kV, dh.data(),
                                               dW.data(), 1.0f, LossChunking{2, 6, 0});
    EXPECT_EQ(r.count, 2);
    EXPECT_NEAR(r.loss, ref.loss, 1e-5 * ref.loss);
    for (int64_t t = 0; t < kT; ++t)
        for (int64_t c = 0; c < kC; ++c) {
            const size_t i = size_t(t * kC + c);
            if (tg[size_t(t)] < 0) {
                EXPECT_EQ(dh[i], 0.0f) << "ignored row " << t;
            }
            EXPECT_NEAR(dh[i], ref.dh[i], 1e-5);
        }
    for (size_t i = 0; i < dW.size(); ++i) EXPECT_NEAR(dW[i], 1.0 + ref.dW[i], 1e-5);

    // Every target ignored: zero loss, zero count, dhidden zeroed, dW untouched.
    const std::vector<int32_t> none(kT, -1);
    Vec dh2(kT * kC, 5.0f), dW2(kV * kC, 2.0f);
    const LossResult z =
        cross_entropy_lm_head(h.data(), W.data(), none.data(), kT, kC, kV, dh2.data(), dW2.data(), 1.0f);
    EXPECT_EQ(z.count, 0);
    EXPECT_EQ(z.loss, 0.0);
    for (float x : dh2) EXPECT_EQ(x, 0.0f);
    for (float x : dW2) EXPECT_EQ(x, 2.0f);
}

TEST(Losses, CrossEntropyRejectsOutOfRangeTargets) {
    const Vec h = randn(kT * kC, 7), W = randn(kV * kC, 8);
    std::vector<int32_t> tg = some_targets();
    tg[2] = int32_t(kV);
    EXPECT_THROW(cross_entropy_lm_head(h.data(), W.data(), tg.data(), kT, kC, kV, nullptr, nullptr, 1.0f),
                 Error);
    tg[2] = -2;
    EXPECT_THROW(cross_entropy_lm_head(h.data(), W.data(), tg.data(), kT, kC, kV, nullptr, nullptr, 1.0f),
                 Error);
    tg[2] = 0;
    EXPECT_THROW(cross_entropy_lm_head(h.data(), W.data(), tg.data(), kT, kC, kV, nullptr, nullptr, 1.0f,
                                       LossChunking{0, 8, 0}),
                 Error);
}

TEST(Losses, CrossEntropyStableForHugeLogits) {
    // Logits around +-1e4: a naive exp overflows; the online log-sum-exp must not.
    const Vec h = randn(kT * kC, 9, 60.0f), W = randn(kV * kC, 10, 60.0f);
    const auto tg = some_targets();
    const Ref ref = ref_ce(h, W, tg, kT, kC, kV, 1.0);
    const DVec z = ref_logits(h, W, kT, kC, kV);
    ASSERT_GT(max_abs(z), 5e3);
    for (const LossChunking& ck : tilings()) {
        Vec dh(kT * kC), dW(kV * kC, 0.0f);
        const LossResult r =
            cross_entropy_lm_head(h.data(), W.data(), tg.data(), kT, kC, kV, dh.data(), dW.data(), 1.0f, ck);
        ASSERT_TRUE(std::isfinite(r.loss));
        // f32 logits of size 1e4 carry ~1e-3 absolute error; the loss inherits it.
        EXPECT_NEAR(r.loss, ref.loss, 1e-5 * ref.loss + 1e-2);
        for (float x : dh) ASSERT_TRUE(std::isfinite(x));
        for (float x : dW) ASSERT_TRUE(std::isfinite(x));
        EXPECT_LT(max_abs_diff(dh, ref.dh), 1e-3 * max_abs(ref.dh) + 1e-2);
        EXPECT_LT(max_abs_diff(dW, ref.dW), 1e-3 * max_abs(ref.dW) + 1e-2);
    }
}

TEST(Losses, KlMatchesNaiveReferenceUnderAllTilings) {
    const int64_t Cs = kC, Ct = 9;
    const Vec hs = randn(kT * Cs, 11, 1.5f), Ws = randn(kV * Cs, 12), ht = randn(kT * Ct, 13),
              Wt = randn(kV * Ct, 14);
    for (float tau : {1.0f, 2.5f}) {
        const float scale = 0.3f;
        const Ref ref = ref_kl(hs, Ws, Cs, ht, Wt, Ct, kT, kV, tau, scale);
        ASSERT_GT(ref.loss, 0.1);
        for (const LossChunking& ck : tilings()) {
            SCOPED_TRACE(testing::Message()
                         << "tau " << tau << " row_block " << ck.row_block << " vocab_chunk "
                         << ck.vocab_chunk << " cache " << ck.max_cached_logits);
            Vec dh(kT * Cs, -4.0f), dW(kV * Cs, 0.0f);
            const LossResult r = kl_lm_head(hs.data(), Ws.data(), Cs, ht.data(), Wt.data(), Ct, kT, kV, tau,
                                            dh.data(), dW.data(), scale, ck);
            EXPECT_EQ(r.count, kT);
            EXPECT_NEAR(r.loss, ref.loss, 1e-5 * ref.loss + 1e-6);
            EXPECT_LT(max_abs_diff(dh, ref.dh), 1e-5 * std::max(1.0, max_abs(ref.dh)));
            EXPECT_LT(max_abs_diff(dW, ref.dW), 1e-5 * std::max(1.0, max_abs(ref.dW)));
        }
    }
}

TEST(Losses, KlGradientsMatchFiniteDifferencesAndVanishAtTeacher) {
    const int64_t Cs = kC;
    const Vec hs = randn(kT * Cs, 15), Ws = randn(kV * Cs, 16), ht = randn(kT * Cs, 17),
              Wt = randn(kV * Cs, 18);
    const float tau = 1.7f;
    const LossChunking ck{3, 5, 0};
    Vec dh(kT * Cs), dW(kV * Cs, 0.0f);
    kl_lm_head(hs.data(), Ws.data(), Cs, ht.data(), Wt.data(), Cs, kT, kV, tau, dh.data(), dW.data(), 1.0f,
               ck);
    const float eps = 1e-2f;
    auto loss_at = [&](const Vec& h, const Vec& W) {
        return kl_lm_head(h.data(), W.data(), Cs, ht.data(), Wt.data(), Cs, kT, kV, tau, nullptr, nullptr,
                          1.0f, ck)
            .loss;
    };
    for (size_t i = 0; i < hs.size(); i += 2) {
        Vec p = hs, m = hs;
        p[i] += eps;
        m[i] -= eps;
        EXPECT_NEAR(dh[i], (loss_at(p, Ws) - loss_at(m, Ws)) / (2.0 * eps), 2e-3) << "dhidden[" << i << "]";
    }
    for (size_t i = 0; i < Ws.size(); i += 5) {
        Vec p = Ws, m = Ws;
        p[i] += eps;
        m[i] -= eps;
        EXPECT_NEAR(dW[i], (loss_at(hs, p) - loss_at(hs, m)) / (2.0 * eps), 2e-3) << "dW[" << i << "]";
    }
    // Student == teacher: KL is 0 and so are the gradients.
    Vec dh0(kT * Cs, 1.0f), dW0(kV * Cs, 0.0f);
    const LossResult z = kl_lm_head(ht.data(), Wt.data(), Cs, ht.data(), Wt.data(), Cs, kT, kV, tau,
                                    dh0.data(), dW0.data(), 1.0f, ck);
    EXPECT_NEAR(z.loss, 0.0, 1e-5);
    for (float x : dh0) EXPECT_NEAR(x, 0.0f, 1e-6);
    for (float x : dW0) EXPECT_NEAR(x, 0.0f, 1e-6);
}

TEST(Losses, KlStableForHugeLogits) {
    const int64_t Cs = kC;
    const Vec hs = randn(kT * Cs, 19, 60.0f), Ws = randn(kV * Cs, 20, 60.0f), ht = randn(kT * Cs, 21, 60.0f),
              Wt = randn(kV * Cs, 22, 60.0f);
    const Ref ref = ref_kl(hs, Ws, Cs, ht, Wt, Cs, kT, kV, 1.0, 1.0);
    Vec dh(kT * Cs), dW(kV * Cs, 0.0f);
    const LossResult r = kl_lm_head(hs.data(), Ws.data(), Cs, ht.data(), Wt.data(), Cs, kT, kV, 1.0f,
                                    dh.data(), dW.data(), 1.0f, LossChunking{3, 5, 0});
    ASSERT_TRUE(std::isfinite(r.loss));
    EXPECT_NEAR(r.loss, ref.loss, 1e-5 * ref.loss + 2e-2);
    for (float x : dh) ASSERT_TRUE(std::isfinite(x));
    EXPECT_LT(max_abs_diff(dh, ref.dh), 1e-3 * max_abs(ref.dh) + 1e-2);
    EXPECT_LT(max_abs_diff(dW, ref.dW), 1e-3 * max_abs(ref.dW) + 1e-2);
}

TEST(Losses, MseSumAndGradient) {
    const Vec a = {1.0f, -2.0f, 0.5f, 3.0f}, t = {0.0f, -1.0f, 0.5f, 5.0f};
    Vec da(4, 99.0f);
    const LossResult r = mse(a.data(), t.data(), 4, da.data(), 0.25f);
    EXPECT_EQ(r.count, 4);
    EXPECT_DOUBLE_EQ(r.loss, 1.0 + 1.0 + 0.0 + 4.0);
    const Vec expect = {0.5f, -0.5f, 0.0f, -1.0f};  // 0.25 * 2 * (a - t)
    for (size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(da[i], expect[i]);
    // Large n takes the parallel path: compare with a serial double sum.
    const Vec x = randn(100000, 23), y = randn(100000, 24);
    double s = 0;
    for (size_t i = 0; i < x.size(); ++i) s += double(x[i] - y[i]) * double(x[i] - y[i]);
    EXPECT_NEAR(mse(x.data(), y.data(), int64_t(x.size()), nullptr, 1.0f).loss, s, 1e-9 * s);
}

// --- PyTorch golden (tools/make_optim_golden.py) ---

nlohmann::json load_golden() {
    std::ifstream f(test::test_data("optim_golden.json"));
    EXPECT_TRUE(f.good()) << "missing tests/data/optim_golden.json (run tools/make_optim_golden.py)";
    return nlohmann::json::parse(f);
}

Vec to_vec(const nlohmann::json& j) {
    return j.get<Vec>();
}

void expect_close(const Vec& got, const nlohmann::json& want, double tol, const char* what) {
    const DVec w = want.get<DVec>();
    ASSERT_EQ(got.size(), w.size()) << what;
    for (size_t i = 0; i < w.size(); ++i)
        EXPECT_NEAR(got[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << "[" << i << "]";
}

TEST(Losses, CrossEntropyMatchesTorchGolden) {
    const nlohmann::json g = load_golden()["cross_entropy"];
    const int64_t T = g["T"], C = g["C"], V = g["V"];
    const Vec h = to_vec(g["hidden"]), W = to_vec(g["W"]);
    const auto tg = g["targets"].get<std::vector<int32_t>>();
    const float scale = g["grad_scale"];
    for (const LossChunking& ck : {LossChunking{}, LossChunking{4, 3, 0}}) {
        Vec dh(size_t(T * C)), dW(size_t(V * C), 0.0f);
        const LossResult r =
            cross_entropy_lm_head(h.data(), W.data(), tg.data(), T, C, V, dh.data(), dW.data(), scale, ck);
        EXPECT_EQ(r.count, g["count"].get<int64_t>());
        EXPECT_NEAR(r.loss, g["loss"].get<double>(), 1e-5 * g["loss"].get<double>());
        expect_close(dh, g["dhidden"], 1e-5, "dhidden");
        expect_close(dW, g["dW"], 1e-5, "dW");
    }
}

TEST(Losses, KlMatchesTorchGolden) {
    const nlohmann::json g = load_golden()["kl"];
    const int64_t T = g["T"], Cs = g["Cs"], Ct = g["Ct"], V = g["V"];
    const Vec hs = to_vec(g["s_hidden"]), Ws = to_vec(g["s_W"]), ht = to_vec(g["t_hidden"]),
              Wt = to_vec(g["t_W"]);
    const float tau = g["tau"], scale = g["grad_scale"];
    for (const LossChunking& ck : {LossChunking{}, LossChunking{2, 4, 0}}) {
        Vec dh(size_t(T * Cs)), dW(size_t(V * Cs), 0.0f);
        const LossResult r = kl_lm_head(hs.data(), Ws.data(), Cs, ht.data(), Wt.data(), Ct, T, V, tau,
                                        dh.data(), dW.data(), scale, ck);
        EXPECT_EQ(r.count, T);
        EXPECT_NEAR(r.loss, g["loss"].get<double>(), 1e-5 * g["loss"].get<double>());
        expect_close(dh, g["dhidden"], 1e-5, "dhidden");
        expect_close(dW, g["dW"], 1e-5, "dW");
    }
}

}  // namespace
}  // namespace hydra
