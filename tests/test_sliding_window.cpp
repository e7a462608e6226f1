// The head-level sliding-window baseline on the CPU (DuoAttention's streaming heads, issue 34): heads with
// a window W attend to their query's last W positions plus the first `sinks` ones.
//   - the attention op with per-head windows against a direct double-precision reference (fresh and
//     continued after cached keys; a decode step over several key chunks, some wholly outside a window),
//     its weights zero outside the window, and its backward against central
//     finite differences;
//   - the plan (build_plan with a window: the heads the selection would make LA stay softmax heads with the
//     window), its JSON round trip and checks;
//   - a converted model: a window covering the whole sequence gives the teacher's logits exactly, a short
//     one differs, and prefill in chunks + single-token steps through the cache equal one prefill.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/hybrid_conversion.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/plan_builders.h"
#include "ops/cpu/attention.h"
#include "tiny_model.h"

namespace hydra {
namespace {

std::vector<double> randn(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<double> v(n);
    for (double& x : v) x = rng.normal();
    return v;
}

// out (T, H, Dh) of queries at positions pos0.. over keys [0, pos0 + T): the masked softmax written out.
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, int64_t T, int64_t pos0, int64_t H, int64_t Hkv,
                              int64_t Dh, double scale, const std::vector<int32_t>& window, int64_t sinks,
                              std::vector<double>* probs = nullptr) {
    const int64_t S = pos0 + T, G = H / Hkv;
    std::vector<double> out(size_t(T * H * Dh), 0.0);
    if (probs) probs->assign(size_t(T * H * S), 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t p = pos0 + t, g = h / G, W = window[size_t(h)];
            std::vector<double> w(size_t(S), 0.0);
            double mx = -INFINITY;
            auto visible = [&](int64_t j) { return j <= p && (W == 0 || j > p - W || j < sinks); };
            for (int64_t j = 0; j < S; ++j) {
                if (!visible(j)) continue;
                double d = 0;
                for (int64_t i = 0; i < Dh; ++i)
                    d += q[size_t((t * H + h) * Dh + i)] * k[size_t((j * Hkv + g) * Dh + i)];
                w[size_t(j)] = scale * d;
                mx = std::max(mx, w[size_t(j)]);
            }
            double z = 0;
            for (int64_t j = 0; j < S; ++j)
                if (visible(j)) z += (w[size_t(j)] = std::exp(w[size_t(j)] - mx));
            for (int64_t j = 0; j < S; ++j) {
                const double pj = visible(j) ? w[size_t(j)] / z : 0.0;
                if (probs) (*probs)[size_t((t * H + h) * S + j)] = pj;
                for (int64_t i = 0; i < Dh; ++i)
                    out[size_t((t * H + h) * Dh + i)] += pj * v[size_t((j * Hkv + g) * Dh + i)];
            }
        }
    return out;
}

constexpr int64_t kH = 4, kHkv = 2, kDh = 5;
const std::vector<int32_t> kWindows = {0, 3, 1, 7};  // full, window 3, window 1 (itself + sinks), window 7

TEST(SlidingWindow, AttentionMatchesTheReferenceFreshAndContinued) {
    const double scale = 0.4;
    for (const int64_t sinks : {int64_t(0), int64_t(2)})
        for (const auto& [T, pos0] : {std::pair<int64_t, int64_t>{70, 0}, {1, 40}, {9, 23}, {1, 700}}) {
            SCOPED_TRACE(testing::Message() << "T " << T << " pos0 " << pos0 << " sinks " << sinks);
            const int64_t S = pos0 + T;
            const auto q = randn(size_t(T * kH * kDh), 1), k = randn(size_t(S * kHkv * kDh), 2),
                       v = randn(size_t(S * kHkv * kDh), 3);
            std::vector<double> ref_probs;
            const auto ref = reference(q, k, v, T, pos0, kH, kHkv, kDh, scale, kWindows, sinks, &ref_probs);
            std::vector<double> out(ref.size()), probs(size_t(T * kH * S));
            cpu::causal_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), T, pos0, kH,
                                          kHkv, kDh, scale, nullptr, kWindows.data(), sinks);
            for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-12) << i;
            for (size_t i = 0; i < probs.size(); ++i) ASSERT_NEAR(probs[i], ref_probs[i], 1e-12) << i;
            // float: the fast exp, the same mask
            std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end()),
                of(ref.size());
            cpu::causal_attention_forward(of.data(), static_cast<float*>(nullptr), qf.data(), kf.data(),
                                          vf.data(), T, pos0, kH, kHkv, kDh, scale, nullptr, kWindows.data(),
                                          sinks);
            for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(of[i], ref[i], 1e-5) << i;
        }
}

TEST(SlidingWindow, AWindowCoveringEveryKeyIsFullAttention) {
    const int64_t T = 30;
    const auto q = randn(size_t(T * kH * kDh), 4), k = randn(size_t(T * kHkv * kDh), 5),
               v = randn(size_t(T * kHkv * kDh), 6);
    const std::vector<int32_t> wide = {0, T, T + 5, 1 << 20};
    std::vector<double> a(size_t(T * kH * kDh)), b(a.size());
    cpu::causal_attention_forward(a.data(), static_cast<double*>(nullptr), q.data(), k.data(), v.data(), T, 0,
                                  kH, kHkv, kDh, 0.3);
    cpu::causal_attention_forward(b.data(), static_cast<double*>(nullptr), q.data(), k.data(), v.data(), T, 0,
                                  kH, kHkv, kDh, 0.3, nullptr, wide.data(), 3);
    EXPECT_EQ(a, b);
}

TEST(SlidingWindow, BackwardMatchesFiniteDifferences) {
    const int64_t T = 12, sinks = 2;
    const double scale = 0.5, eps = 1e-6;
    auto q = randn(size_t(T * kH * kDh), 7), k = randn(size_t(T * kHkv * kDh), 8),
         v = randn(size_t(T * kHkv * kDh), 9);
    const auto R = randn(size_t(T * kH * kDh), 10);  // loss = sum(out * R)
    auto loss = [&] {
        std::vector<double> out(R.size());
        cpu::causal_attention_forward(out.data(), static_cast<double*>(nullptr), q.data(), k.data(), v.data(),
                                      T, 0, kH, kHkv, kDh, scale, nullptr, kWindows.data(), sinks);
        double s = 0;
        for (size_t i = 0; i < R.size(); ++i) s += out[i] * R[i];
        return s;
    };
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    for (const bool saved : {false, true}) {
        SCOPED_TRACE(saved ? "saved weights" : "recomputed weights");
        std::vector<double> probs(size_t(T * kH * T)), out(R.size());
        cpu::causal_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), T, 0, kH, kHkv,
                                      kDh, scale, nullptr, kWindows.data(), sinks);
        cpu::causal_attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(),
                                       v.data(), saved ? probs.data() : nullptr, T, kH, kHkv, kDh, scale,
                                       nullptr, kWindows.data(), sinks);
        for (auto* pair : {&q, &k, &v}) {
            std::vector<double>& x = *pair;
            const std::vector<double>& g = pair == &q ? dq : pair == &k ? dk : dv;
            for (size_t i = 0; i < x.size(); i += 3) {
                const double keep = x[i];
                x[i] = keep + eps;
                const double up = loss();
                x[i] = keep - eps;
                const double down = loss();
                x[i] = keep;
                ASSERT_NEAR(g[i], (up - down) / (2 * eps), 1e-6) << (pair == &q   ? "dq "
                                                                     : pair == &k ? "dk "
                                                                                  : "dv ")
                                                                 << i;
            }
        }
    }
}

test::TinyShape shape() {
    test::TinyShape s;
    s.layers = 2, s.heads = 4, s.kv_heads = 2;
    return s;
}

TEST(SlidingWindow, PlanKeepsEveryHeadSoftmaxWithWindows) {
    const ModelConfig c = test::tiny_llama_config(shape());
    PlanRequest r;
    r.select = "random";
    r.ratio = parse_ratio("1:1", "test");
    r.seed = 5;
    const HybridPlan gdn = build_plan(c, r);
    r.window = 16;
    r.sinks = 4;
    const HybridPlan swa = build_plan(c, r);
    EXPECT_EQ(swa.total_la_heads(), 0);
    EXPECT_TRUE(swa.has_windows());
    EXPECT_FALSE(swa.is_all_fa());
    EXPECT_EQ(swa.window_sinks, 4);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const LayerPlan& g = gdn.layers[size_t(l)];
        const LayerPlan& s = swa.layers[size_t(l)];
        ASSERT_EQ(s.fa_heads.size(), size_t(c.num_heads));
        for (size_t i = 0; i < s.fa_heads.size(); ++i) {
            const bool was_fa =
                std::find(g.fa_heads.begin(), g.fa_heads.end(), s.fa_heads[i]) != g.fa_heads.end();
            EXPECT_EQ(s.fa_window[i], was_fa ? 0 : 16) << "layer " << l << " head " << s.fa_heads[i];
        }
    }
    EXPECT_EQ(swa.ratio_summary(), "4 full + 4 sliding-window heads (window 16, 4 sinks)");
    const HybridPlan back = HybridPlan::from_json(swa.to_json(), c, "round trip");
    EXPECT_EQ(back.layers[1].fa_window, swa.layers[1].fa_window);
    EXPECT_EQ(back.window_sinks, 4);
    EXPECT_FALSE(gdn.to_json().contains("window_sinks"));  // plans without windows read and write as before
    nlohmann::json bad = swa.to_json();
    bad["layers"][0]["fa_window"] = {16};
    EXPECT_THROW(HybridPlan::from_json(bad, c, "bad"), Error);
    r.sinks = 2, r.window = 0;
    EXPECT_THROW(build_plan(c, r), Error);  // sinks without a window
}

// Logits of every position from one prefill.
std::vector<float> all_logits(const LlamaModel& m, const std::vector<int32_t>& tokens) {
    KVCache cache(m, int64_t(tokens.size()));
    const Tensor lg = compute_logits(m, forward_hidden(m, tokens, cache));
    return std::vector<float>(lg.f32(), lg.f32() + lg.numel());
}

TEST(SlidingWindow, ConvertedModelWindowsAndCache) {
    ModelConfig c = test::tiny_llama_config(shape());
    c.max_position_embeddings = 256;
    LlamaModel teacher(c, nullptr);
    test::randomize_params(teacher, 11, 0.2f);
    std::vector<int32_t> tokens(40);
    Rng rng(3);
    for (auto& t : tokens) t = int32_t(rng.next_u64() % uint64_t(c.vocab_size));
    PlanRequest r;
    r.select = "random";
    r.ratio = parse_ratio("1:1", "test");
    r.granularity = "head";
    r.seed = 2;
    r.window = 64;  // wider than the sequence: exactly the teacher
    const auto wide = convert_to_hybrid(teacher, build_plan(c, r), ConversionOptions{});
    const std::vector<float> t_logits = all_logits(teacher, tokens);
    EXPECT_EQ(all_logits(*wide, tokens), t_logits);
    r.window = 4;
    r.sinks = 1;
    const auto narrow = convert_to_hybrid(teacher, build_plan(c, r), ConversionOptions{});
    const std::vector<float> n_logits = all_logits(*narrow, tokens);
    double diff = 0;
    for (size_t i = 0; i < n_logits.size(); ++i)
        diff = std::max(diff, double(std::fabs(n_logits[i] - t_logits[i])));
    EXPECT_GT(diff, 1e-3) << "a 4-token window must change later positions";
    const int64_t V = c.vocab_size;
    for (size_t i = 0; i < size_t(4 * V); ++i)
        EXPECT_FLOAT_EQ(n_logits[i], t_logits[i]);  // inside the window
    // prefill 25 tokens, then 15 single-token steps through the cache: the same logits
    KVCache cache(*narrow, int64_t(tokens.size()));
    const std::span<const int32_t> all(tokens);
    Tensor first = compute_logits(*narrow, forward_hidden(*narrow, all.first(25), cache));
    for (size_t i = 0; i < size_t(25 * V); ++i) ASSERT_NEAR(first.f32()[i], n_logits[i], 1e-4) << i;
    for (size_t t = 25; t < tokens.size(); ++t) {
        const Tensor lg = forward_last_logits(*narrow, all.subspan(t, 1), cache);
        for (int64_t j = 0; j < V; ++j)
            ASSERT_NEAR(lg.f32()[j], n_logits[t * size_t(V) + size_t(j)], 1e-4) << t;
    }
}

}  // namespace
}  // namespace hydra
