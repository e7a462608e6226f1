// Tests of the head-scoring module (src/interp/): the interp forward against the engine, answer-
// position patched re-runs against a full forward with a `blk.L.head_out` overwrite tap, the
// attribution gradients against finite differences (double), activation/path patching identities,
// aggregation, the scores.json round trip through load_head_scores, and input errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/threading.h"
#include "eval/model_text_encoder.h"
#include "eval/task_registry.h"
#include "interp/activation_patching.h"
#include "interp/attribution_patching.h"
#include "interp/fa_forward.h"
#include "interp/last_position_forward.h"
#include "interp/patching_metric.h"
#include "interp/path_patching.h"
#include "interp/retrieval_score.h"
#include "interp/score_aggregation.h"
#include "interp/score_heads.h"
#include "interp/scores_io.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "model_paths.h"
#include "tiny_model.h"

namespace hydra {
namespace {

ModelConfig tiny_config(bool bias = false, bool qk_norm = false) {
    ModelConfig c =
        test::tiny_llama_config({.vocab = 50, .hidden = 24, .intermediate = 40, .layers = 3, .head_dim = 4});
    c.max_position_embeddings = 64;
    c.attention_bias = bias;
    c.qk_norm = qk_norm;
    return c;
}

void randomize(LlamaModel& m, uint64_t seed) { test::randomize_params(m, seed, 0.4f); }

const std::vector<int32_t> kClean = {3, 17, 42, 8, 0, 49, 25, 11, 30, 7, 19};
const std::vector<int32_t> kCorrupt = {3, 17, 42, 8, 5, 44, 25, 11, 30, 7, 19};  // positions 4, 5 swapped

// The engine's final hidden state (after the final norm) of the last position, with optional taps.
std::vector<float> engine_last_hidden(const LlamaModel& m, const std::vector<int32_t>& ids,
                                      const Taps* taps = nullptr) {
    KVCache cache(m.config(), int64_t(ids.size()));
    ForwardOptions o;
    o.taps = taps;
    o.quantized_decode = false;
    Tensor h = forward_hidden(m, ids, cache, o);
    const int64_t C = m.config().hidden_size, T = int64_t(ids.size());
    return std::vector<float>(h.f32() + (T - 1) * C, h.f32() + T * C);
}

// LD from a final-normed hidden state: (lm_head[a] - lm_head[d]) . y.
double ld_of_hidden(const LlamaModel& m, const std::vector<float>& y, int32_t a, int32_t d) {
    const int64_t C = m.config().hidden_size;
    const float* E = m.lm_head().f32();
    double s = 0;
    for (int64_t i = 0; i < C; ++i) s += (double(E[a * C + i]) - double(E[d * C + i])) * double(y[size_t(i)]);
    return s;
}

// Overwrite head h at the last position of layer L's head_out with `value`.
Taps head_patch_tap(int64_t layer, int64_t head, std::vector<float> value) {
    Taps taps;
    taps.on("blk." + std::to_string(layer) + ".head_out", [head, value](std::string_view, int, Tensor& t) {
        const int64_t T = t.dim(0), H = t.dim(1), Dh = t.dim(2);
        for (int64_t d = 0; d < Dh; ++d) t.f32()[((T - 1) * H + head) * Dh + d] = value[size_t(d)];
    });
    return taps;
}

// Tests run single-threaded: OpenMP regions over a few rows only cost barriers, which get very slow
// on a busy shared 2-core machine (scoring itself parallelises by whole jobs, see parallel_jobs.h).
struct OneThread {
    int prev = num_threads();
    OneThread() { set_num_threads(1); }
    ~OneThread() { set_num_threads(prev); }
};

double rel_diff(double a, double b) {
    return std::fabs(a - b) / std::max(1.0, std::fabs(b));
}

// --- forward ---------------------------------------------------------------------------------

TEST(InterpForward, MatchesTheEngineForward) {
    OneThread one;
    for (bool variant : {false, true}) {
        LlamaModel m(tiny_config(variant, variant));
        randomize(m, 3);
        FaWeights<float> w(m);
        FaRun<float> run = fa_forward(w, kClean, true);
        const std::vector<float> y = engine_last_hidden(m, kClean);
        LogitDiff<float> ld(w, 4, 9);
        EXPECT_LT(rel_diff(ld(run.x_final_last(24)), ld_of_hidden(m, y, 4, 9)), 1e-5);
        // Head outputs equal the engine's head_out tap.
        Taps taps;
        int64_t checked = 0;
        taps.on("blk.*.head_out", [&](std::string_view, int layer, Tensor& t) {
            for (int64_t i = 0; i < t.numel(); ++i) {
                EXPECT_NEAR(t.f32()[i], run.heads[size_t(layer)][size_t(i)], 1e-5);
                ++checked;
            }
        });
        engine_last_hidden(m, kClean, &taps);
        EXPECT_EQ(checked, 3 * int64_t(kClean.size()) * 24);
    }
}

TEST(InterpForward, SharedPrefixEqualsAFullRun) {
    OneThread one;
    LlamaModel m(tiny_config());
    randomize(m, 4);
    FaWeights<double> w(m);
    for (bool all : {false, true}) {
        const FaRun<double> clean = fa_forward(w, kClean, all);
        const FaRun<double> full = fa_forward(w, kCorrupt, all);
        const FaRun<double> shared = fa_forward(w, kCorrupt, all, {}, &clean, kClean);
        EXPECT_EQ(shared.shared_prefix, 4);  // the prompts first differ at position 4
        EXPECT_EQ(full.shared_prefix, 0);
        ASSERT_EQ(shared.x_final.size(), full.x_final.size());
        for (size_t i = 0; i < full.x_final.size(); ++i)
            EXPECT_NEAR(shared.x_final[i], full.x_final[i], 1e-12);
        for (int64_t l = 0; l < 3; ++l) {
            for (size_t i = 0; i < full.k[size_t(l)].size(); ++i)
                EXPECT_NEAR(shared.k[size_t(l)][i], full.k[size_t(l)][i], 1e-12);
            for (size_t i = 0; i < full.heads[size_t(l)].size(); ++i)
                EXPECT_NEAR(shared.heads[size_t(l)][i], full.heads[size_t(l)][i], 1e-12);
            for (size_t i = 0; i < full.x_in[size_t(l)].size(); ++i)
                EXPECT_NEAR(shared.x_in[size_t(l)][i], full.x_in[size_t(l)][i], 1e-12);
        }
    }
    // Identical prompts still compute the answer position; a run that kept only the answer position
    // cannot lend the rows of an all-positions run.
    const FaRun<double> clean = fa_forward(w, kClean);
    EXPECT_EQ(fa_forward(w, kClean, false, {}, &clean, kClean).shared_prefix, int64_t(kClean.size()) - 1);
    EXPECT_EQ(fa_forward(w, kCorrupt, true, {}, &clean, kClean).shared_prefix, 0);
}

TEST(InterpForward, RefusesHybridsAndBadTokens) {
    LlamaModel m(tiny_config());
    FaWeights<float> w(m);
    const std::vector<int32_t> bad = {1, 50};
    EXPECT_THROW(fa_forward(w, bad), Error);
    EXPECT_THROW(fa_forward(w, std::vector<int32_t>{}), Error);
    EXPECT_THROW(LogitDiff<float>(w, 3, 3), Error);
    EXPECT_THROW(LogitDiff<float>(w, 3, 60), Error);
}

// --- answer-position re-runs -------------------------------------------------------------------

TEST(InterpLastPosition, PatchedRunEqualsFullForwardWithHeadOutTap) {
    OneThread one;
    for (bool variant : {false, true}) {
        LlamaModel m(tiny_config(variant, variant));
        randomize(m, 11);
        FaWeights<float> w(m);
        const FaRun<float> clean = fa_forward(w, kClean);
        const FaRun<float> corr = fa_forward(w, kCorrupt);
        LogitDiff<float> ld(w, 4, 9);
        const int64_t H = 6, Dh = 4, HDh = 24;
        // Copies: single patches in every layer, one copy patching two layers, one without patches;
        // max_batch 2 exercises the chunking.
        std::vector<std::pair<int64_t, int64_t>> heads = {{0, 1}, {1, 2}, {2, 5}, {1, 0}};
        std::vector<PatchedCopy<float>> copies;
        for (auto [l, h] : heads) copies.push_back({{{l, h, corr.heads_last(l, HDh) + h * Dh}}});
        copies.push_back(
            {{{0, 3, corr.heads_last(0, HDh) + 3 * Dh}, {2, 4, corr.heads_last(2, HDh) + 4 * Dh}}});
        copies.push_back({});
        const std::vector<double> got = ld.rows(last_position_sweep<float>(w, clean, copies, 2));
        for (size_t i = 0; i < heads.size(); ++i) {
            auto [l, h] = heads[i];
            std::vector<float> value(corr.heads_last(l, HDh) + h * Dh,
                                     corr.heads_last(l, HDh) + (h + 1) * Dh);
            Taps taps = head_patch_tap(l, h, value);
            EXPECT_LT(rel_diff(got[i], ld_of_hidden(m, engine_last_hidden(m, kClean, &taps), 4, 9)), 1e-5)
                << "layer " << l << " head " << h;
        }
        Taps two = head_patch_tap(
            0, 3, std::vector<float>(corr.heads_last(0, HDh) + 3 * Dh, corr.heads_last(0, HDh) + 4 * Dh));
        Taps second = head_patch_tap(
            2, 4, std::vector<float>(corr.heads_last(2, HDh) + 4 * Dh, corr.heads_last(2, HDh) + 5 * Dh));
        two.on("blk.2.head_out", [&](std::string_view p, int l, Tensor& t) { second.fire(p, l, t); });
        EXPECT_LT(rel_diff(got[4], ld_of_hidden(m, engine_last_hidden(m, kClean, &two), 4, 9)), 1e-5);
        EXPECT_EQ(got[5], ld(clean.x_final_last(24)));
        (void)H;
    }
}

// The default model, loaded once for all tests that use it.
const LoadedModel& real_model() {
    static const LoadedModel m = load_model(test::default_model_path());
    return m;
}

TEST(InterpLastPosition, RealModelPatchMatchesEngine) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model not present";
    OneThread one;
    const LlamaModel& m = *real_model().model;
    std::vector<int32_t> clean, corr;
    for (int i = 0; i < 48; ++i) clean.push_back(int32_t(1000 + (i * 37) % 900));
    corr = clean;
    corr[20] = 4242;
    FaWeights<float> w(m);
    const FaRun<float> rc = fa_forward(w, clean), rx = fa_forward(w, corr);
    LogitDiff<float> ld(w, 1234, 2345);
    const int64_t HDh = m.config().num_heads * m.config().head_dim, Dh = m.config().head_dim;
    std::vector<PatchedCopy<float>> copies = {{{{7, 4, rx.heads_last(7, HDh) + 4 * Dh}}}};
    const double got = ld.rows(last_position_sweep<float>(w, rc, copies))[0];
    Taps taps = head_patch_tap(
        7, 4, std::vector<float>(rx.heads_last(7, HDh) + 4 * Dh, rx.heads_last(7, HDh) + 5 * Dh));
    const double want = ld_of_hidden(m, engine_last_hidden(m, clean, &taps), 1234, 2345);
    EXPECT_LT(rel_diff(got, want), 1e-4) << got << " vs " << want;
}

// --- activation patching ------------------------------------------------------------------------

TEST(InterpActivation, ZeroEffectHeadAndAllHeadsRecoverCorrupted) {
    OneThread one;
    LlamaModel m(tiny_config());
    randomize(m, 5);
    // Head (1, 2) writes nothing: zero its o_proj columns.
    const int64_t C = 24, HDh = 24, Dh = 4, H = 6, L = 3;
    float* wo = m.layer(1).wo.f32();
    for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < Dh; ++d) wo[c * HDh + 2 * Dh + d] = 0;
    FaWeights<double> w(m);
    const FaRun<double> clean = fa_forward(w, kClean), corr = fa_forward(w, kCorrupt);
    LogitDiff<double> ld(w, 4, 9);
    const HeadPatchResult r = activation_patching(w, clean, corr, ld, 5);
    ASSERT_EQ(r.ld_noised.size(), size_t(L * H));
    ASSERT_GT(std::fabs(r.gap()), 1e-3);
    const auto ne = r.noising_effect(), pe = r.denoising_effect();
    EXPECT_NEAR(ne[1 * H + 2], 0.0, 1e-9);
    EXPECT_NEAR(pe[1 * H + 2], 0.0, 1e-9);
    double total = 0;
    for (double e : ne) total += std::fabs(e);
    EXPECT_GT(total, 1e-3);  // other heads do matter
    // Every head of every layer patched at once: the answer position becomes the corrupted run's.
    std::vector<PatchedCopy<double>> all(2);
    for (int64_t l = 0; l < L; ++l)
        for (int64_t h = 0; h < H; ++h) {
            all[0].patches.push_back({l, h, corr.heads_last(l, HDh) + h * Dh});
            all[1].patches.push_back({l, h, clean.heads_last(l, HDh) + h * Dh});
        }
    const auto noised = ld.rows(last_position_sweep<double>(w, clean, {all.data(), 1}));
    const auto denoised = ld.rows(last_position_sweep<double>(w, corr, {all.data() + 1, 1}));
    EXPECT_NEAR(noised[0], r.ld_corrupted, 1e-9);
    EXPECT_NEAR(denoised[0], r.ld_clean, 1e-9);
}

// --- attribution: gradients vs finite differences -----------------------------------------------

TEST(InterpAttribution, GradientsMatchFiniteDifferences) {
    OneThread one;
    for (bool variant : {false, true}) {
        LlamaModel m(tiny_config(variant, variant));
        randomize(m, 21);
        FaWeights<double> w(m);
        const FaRun<double> run = fa_forward(w, kClean, true);
        LogitDiff<double> ld(w, 4, 9);
        const std::vector<double> g_last = answer_position_head_grad(w, run, ld);
        const auto g_all = all_positions_head_grad(w, run, ld);
        const int64_t T = int64_t(kClean.size()), HDh = 24, C = 24;
        // The two backward passes agree at the answer position.
        for (int64_t l = 0; l < 3; ++l)
            for (int64_t i = 0; i < HDh; ++i)
                EXPECT_NEAR(g_all[size_t(l)][size_t((T - 1) * HDh + i)], g_last[size_t(l * HDh + i)], 1e-10);
        // Central differences on single head-output elements, at the answer and earlier positions.
        const double eps = 1e-5;
        std::mt19937 gen(7);
        for (int trial = 0; trial < 24; ++trial) {
            const int64_t l = int64_t(gen() % 3), t = trial % 3 == 0 ? T - 1 : int64_t(gen() % uint32_t(T));
            const int64_t i = int64_t(gen() % uint32_t(HDh));
            auto ld_at = [&](double delta) {
                HeadHook<double> hook = [&](int64_t layer, double* heads) {
                    if (layer == l) heads[t * HDh + i] += delta;
                };
                FaRun<double> r = fa_forward(w, kClean, false, hook);
                return ld(r.x_final_last(C));
            };
            const double fd = (ld_at(eps) - ld_at(-eps)) / (2 * eps);
            const double an = g_all[size_t(l)][size_t(t * HDh + i)];
            EXPECT_NEAR(an, fd, 1e-6 * std::max(1.0, std::fabs(fd))) << "l=" << l << " t=" << t << " i=" << i;
        }
    }
}

TEST(InterpAttribution, EstimatesCorrelateWithActivationPatching) {
    OneThread one;
    LlamaModel m(tiny_config());
    randomize(m, 8);
    FaWeights<double> w(m);
    const FaRun<double> clean = fa_forward(w, kClean), corr = fa_forward(w, kCorrupt);
    LogitDiff<double> ld(w, 4, 9);
    const HeadPatchResult atp = attribution_patching(w, clean, corr, ld);
    const HeadPatchResult act = activation_patching(w, clean, corr, ld);
    EXPECT_EQ(atp.ld_clean, act.ld_clean);
    // Rank agreement on a random tiny model is loose; the estimates must at least correlate.
    std::vector<double> a, b;
    for (size_t i = 0; i < act.ld_noised.size(); ++i)
        a.push_back(act.ld_noised[i] - act.ld_clean), b.push_back(atp.ld_noised[i] - atp.ld_clean);
    EXPECT_GT(spearman(a, b), 0.5);
    // All-positions attribution runs on runs that kept every position.
    const FaRun<double> c2 = fa_forward(w, kClean, true), x2 = fa_forward(w, kCorrupt, true);
    const HeadPatchResult all = attribution_patching(w, c2, x2, ld, AttributionPositions::All);
    EXPECT_EQ(all.ld_noised.size(), act.ld_noised.size());
    EXPECT_THROW(attribution_patching(w, clean, corr, ld, AttributionPositions::All), Error);
}

// --- path patching ------------------------------------------------------------------------------

TEST(InterpPath, MatchesEngineReferenceRuns) {
    OneThread one;
    LlamaModel m(tiny_config());
    randomize(m, 13);
    FaWeights<float> w(m);
    const FaRun<float> clean = fa_forward(w, kClean), corr = fa_forward(w, kCorrupt);
    LogitDiff<float> ld(w, 4, 9);
    const int64_t H = 6, Dh = 4, HDh = 24, C = 24, L = 3;
    const std::vector<std::pair<int64_t, int64_t>> receivers = {{2, 1}, {1, 4}};
    const PathPatchResult r = path_patching(w, clean, corr, ld, receivers);
    ASSERT_EQ(r.direct.ld_noised.size(), size_t(L * H));

    // Sender (0, 3), noising: delta = W_o[:, s] (z_corr - z_clean) at the answer position.
    const int64_t sl = 0, sh = 3;
    std::vector<float> delta(size_t(C), 0.0f);
    const float* wo = m.layer(sl).wo.f32();
    for (int64_t c = 0; c < C; ++c)
        for (int64_t d = 0; d < Dh; ++d)
            delta[size_t(c)] += wo[c * HDh + sh * Dh + d] * (corr.heads_last(sl, HDh)[sh * Dh + d] -
                                                             clean.heads_last(sl, HDh)[sh * Dh + d]);
    auto add_delta = [&](int64_t layer) {
        Taps t;
        t.on("blk." + std::to_string(layer) + ".resid_out", [&](std::string_view, int, Tensor& x) {
            const int64_t T = x.dim(0);
            for (int64_t c = 0; c < C; ++c) x.f32()[(T - 1) * C + c] += delta[size_t(c)];
        });
        return t;
    };
    // (a) direct: delta added after the last layer.
    Taps direct = add_delta(L - 1);
    EXPECT_LT(rel_diff(r.direct.ld_noised[size_t(sl * H + sh)],
                       ld_of_hidden(m, engine_last_hidden(m, kClean, &direct), 4, 9)),
              1e-5);
    // (b) receivers: z' of each receiver from (its layer's clean input + delta); then one run with both.
    std::vector<std::vector<float>> zr;
    for (auto [rl, rh] : receivers) {
        Taps t = add_delta(rl - 1);
        std::vector<float> z(static_cast<size_t>(Dh));
        t.on("blk." + std::to_string(rl) + ".head_out", [&, rh = rh](std::string_view, int, Tensor& x) {
            const int64_t T = x.dim(0);
            for (int64_t d = 0; d < Dh; ++d) z[size_t(d)] = x.f32()[((T - 1) * H + rh) * Dh + d];
        });
        engine_last_hidden(m, kClean, &t);
        zr.push_back(z);
    }
    Taps both = head_patch_tap(receivers[1].first, receivers[1].second, zr[1]);
    Taps other = head_patch_tap(receivers[0].first, receivers[0].second, zr[0]);
    both.on("blk.2.head_out", [&](std::string_view p, int l, Tensor& x) { other.fire(p, l, x); });
    const double want = ld_of_hidden(m, engine_last_hidden(m, kClean, &both), 4, 9);
    EXPECT_LT(rel_diff(r.via_receivers.ld_noised[size_t(sl * H + sh)], want), 1e-5);
    // A sender in the top layer has no receiver above it.
    EXPECT_EQ(r.via_receivers.ld_noised[size_t(2 * H + 0)], r.via_receivers.ld_clean);
    EXPECT_THROW(path_patching(w, clean, corr, ld, {{3, 0}}), Error);
}

// --- aggregation --------------------------------------------------------------------------------

TEST(InterpAggregation, ClippedPositivePartsMaxAwareMeanAndGroups) {
    HeadPatchResult r;
    r.layers = 1, r.heads = 4;
    r.ld_clean = 3, r.ld_corrupted = 1;  // gap 2
    r.ld_noised = {3, 1, 5, -7};         // NE = 0, 1, -1, 5 -> clipped 2
    r.ld_denoised = {1, 2, 1, 9};        // PE = 0, 0.5, 0, 4 -> clipped 2
    ScoreConfig cfg;
    const PairHeadScores s = pair_head_scores(r, cfg);
    EXPECT_EQ(s.score, (std::vector<double>{0, 0.75, 0, 2}));
    EXPECT_EQ(s.noising[2], -1);
    TaskScoreAccumulator acc;
    EXPECT_TRUE(acc.add_pair(r, cfg));
    HeadPatchResult flat = r;
    flat.ld_corrupted = 2.9;  // gap 0.1 < min_gap
    EXPECT_FALSE(acc.add_pair(flat, cfg));
    const TaskHeadScores t = acc.mean();
    EXPECT_EQ(t.count, 1);
    EXPECT_EQ(t.skipped, 1);
    EXPECT_EQ(t.score[1], 0.75);

    EXPECT_EQ(max_aware_mean({{1, 0}, {0, 0}}, 0.5), (std::vector<double>{0.75, 0}));

    ScoreSet set;
    set.layers = 1, set.heads = 4, set.kv_heads = 2;
    set.methods["activation"].tasks["a"] = t;
    TaskHeadScores ret;
    ret.count = 2;
    ret.score = {0.5, 0, 0, 0};
    set.methods["retrieval"].tasks["a"] = ret;
    aggregate_scores(set);
    // activation normalised by its max (2): 0, .375, 0, 1; retrieval by .5: 1, 0, 0, 0; weights 1 and .25.
    EXPECT_NEAR(set.aggregate[0], 0.25 / 1.25, 1e-12);
    EXPECT_NEAR(set.aggregate[1], 0.375 / 1.25, 1e-12);
    EXPECT_NEAR(set.aggregate[3], 1.0 / 1.25, 1e-12);
    EXPECT_EQ(set.aggregate_kv, (std::vector<double>{set.aggregate[1], set.aggregate[3]}));
    EXPECT_EQ(set.methods["activation"].weight, 1.0);
    EXPECT_EQ(method_weight("attribution", set.methods), 0.0);  // superseded by the exact values
    EXPECT_EQ(method_weight("path_direct", set.methods), 0.0);
    set.methods.erase("activation");
    EXPECT_EQ(method_weight("attribution", set.methods), 1.0);
}

TEST(InterpAggregation, SpearmanAndTopHeads) {
    EXPECT_NEAR(spearman({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0, 1e-12);
    EXPECT_NEAR(spearman({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0, 1e-12);
    EXPECT_TRUE(std::isnan(spearman({1, 1, 1}, {1, 2, 3})));
    EXPECT_NEAR(spearman({1, 2, 2, 3}, {1, 2, 3, 4}), 0.9486832980505138, 1e-12);
    const auto top = top_heads({0.1, 0.9, 0.5, 0.9}, 2, 3);
    EXPECT_EQ(top, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 1}, {1, 0}}));
}

// --- retrieval score and the driver on the real model ----------------------------------------------

TEST(InterpRetrieval, RealModelCopiesTheNeedle) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model not present";
    OneThread one;
    const LoadedModel& lm = real_model();
    auto ctx = std::make_shared<TaskContext>();
    ctx->text = model_text_for(test::default_model_path(), lm.vocab, lm.model->config().eos_token_ids);
    const TaskSample s = make_task("niah_single_2", ctx)->sample(256, 1, 0);
    const RetrievalTrial t = retrieval_trial(
        *lm.model, s.prompt, s.needle_spans, 16, ctx->text.stop_ids,
        [&](const std::vector<int32_t>& g) { return score_output(s, ctx->text.decode(g)) >= 1.0; });
    const std::string out = ctx->text.decode(t.generated);
    EXPECT_EQ(score_output(s, out), 1.0) << out;
    // Some head copied most of the 7-digit value out of the needle; scores are fractions of it.
    const double best = *std::max_element(t.scores.begin(), t.scores.end());
    EXPECT_GT(best, 0.1);
    EXPECT_LE(best, 1.0 + 1e-12);
    EXPECT_THROW(retrieval_trial(*lm.model, s.prompt, {{10, 5000}}, 4, {}), Error);
    std::vector<int32_t> empty;
    EXPECT_THROW(retrieval_trial(*lm.model, empty, {}, 4, {}), Error);
}

TEST(InterpScoreHeads, RealModelEndToEnd) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model not present";
    OneThread one;
    const LoadedModel& lm = real_model();
    auto ctx = std::make_shared<TaskContext>();
    ctx->text = model_text_for(test::default_model_path(), lm.vocab, lm.model->config().eos_token_ids);
    auto gen = make_task("niah_single_2", ctx);
    ScoreHeadsOptions o;
    o.methods = parse_methods("all");
    o.lengths = {192};
    o.samples = 1;
    o.receivers = 4;
    int64_t calls = 0;
    const ScoreReport r = score_heads(*lm.model, ctx->text, {{gen.get(), "value-swap"}}, o,
                                      [&](int64_t, int64_t, const std::string&) { ++calls; });
    EXPECT_EQ(calls, 2);
    ASSERT_EQ(r.pairs.size(), 1u);
    EXPECT_TRUE(r.pairs[0].used) << r.pairs[0].ld_clean << " " << r.pairs[0].ld_corrupted;
    EXPECT_GT(r.pairs[0].shared_prefix, 0);
    for (const char* m : {"activation", "attribution", "path", "path_direct", "retrieval"})
        EXPECT_EQ(r.scores.methods.count(m), 1u) << m;
    const int64_t n = 30 * 9;
    ASSERT_EQ(r.scores.aggregate.size(), size_t(n));
    EXPECT_EQ(r.scores.aggregate_kv.size(), size_t(30 * 3));
    EXPECT_NEAR(*std::max_element(r.scores.aggregate.begin(), r.scores.aggregate.end()), 1.0, 0.5);
    EXPECT_GT(spearman(r.scores.methods.at("activation").heads, r.scores.methods.at("attribution").heads),
              0.5);
    EXPECT_EQ(r.receivers.at("niah_single_2").size(), 4u);
    // A task without pairs cannot be patched.
    auto cwe = make_task("cwe", ctx);
    EXPECT_THROW(score_heads(*lm.model, ctx->text, {{cwe.get(), ""}}, o), Error);
}

// --- scores.json and the driver's input checks -------------------------------------------------

TEST(InterpScoresIo, RoundTripThroughLoadHeadScores) {
    const ModelConfig cfg = tiny_config();
    const int64_t L = cfg.num_layers, H = cfg.num_heads, Hkv = cfg.num_kv_heads;
    ScoreReport r;
    r.model_source = "tiny";
    ScoreSet& s = r.scores;
    s.layers = L, s.heads = H, s.kv_heads = Hkv;
    TaskHeadScores t;
    t.count = 3;
    for (int64_t i = 0; i < L * H; ++i) {
        t.score.push_back(0.01 * double((i * 7) % 18));
        t.denoising.push_back(0.1);
        t.noising.push_back(-0.2);
    }
    s.methods["activation"].tasks["niah_single_2"] = t;
    aggregate_scores(s);
    r.pairs.push_back(
        {"niah_single_2", "value-swap", 1024, 0, 5, 6, 4.5, -1.25, 300, true, {{"forward", 1.5}}});
    r.trials.push_back({"niah_single_2", 1024, 0, "answer \xff", true, 0.5});  // invalid UTF-8 is replaced
    r.receivers["niah_single_2"] = {{2, 1}};
    const std::string path = (std::filesystem::temp_directory_path() / "hydra_interp_scores.json").string();
    write_scores_json(path, cfg, r);
    const HeadScoreTable back = load_head_scores(path, cfg);
    ASSERT_EQ(back.heads.size(), size_t(L));
    ASSERT_EQ(back.kv_groups.size(), size_t(L));
    for (int64_t l = 0; l < L; ++l) {
        for (int64_t h = 0; h < H; ++h)
            EXPECT_DOUBLE_EQ(back.heads[size_t(l)][size_t(h)], s.aggregate[size_t(l * H + h)]);
        for (int64_t g = 0; g < Hkv; ++g)
            EXPECT_DOUBLE_EQ(back.kv_groups[size_t(l)][size_t(g)], s.aggregate_kv[size_t(l * Hkv + g)]);
    }
    // The same file names another model's shape: refused.
    ModelConfig other = cfg;
    other.num_heads = 8;
    other.num_kv_heads = 2;
    EXPECT_THROW(load_head_scores(path, other), Error);
    // A plan can be built from it.
    PlanRequest req;
    req.select = "scores";
    req.ratio = Ratio{2, 1};
    req.scores = &back;
    EXPECT_NO_THROW(build_plan(cfg, req));
    std::filesystem::remove(path);
}

TEST(InterpScoreHeads, InputErrors) {
    EXPECT_THROW(parse_methods("activation,bogus"), Error);
    EXPECT_THROW(parse_methods(""), Error);
    EXPECT_EQ(parse_methods("retrieval,activation,activation"),
              (std::vector<std::string>{"activation", "retrieval"}));
    EXPECT_EQ(parse_methods("all").size(), 4u);
    const auto specs = parse_task_specs("niah_single_2,niah_multikey_1:key-swap");
    ASSERT_EQ(specs.size(), 2u);
    EXPECT_EQ(specs[1].corruption, "key-swap");
    EXPECT_THROW(parse_task_specs("niah_single_2,"), Error);
    EXPECT_THROW(parse_task_specs("niah_single_2:"), Error);

    const ModelConfig cfg = tiny_config();  // context 64
    ScoreHeadsOptions o;
    o.lengths = {32};
    EXPECT_NO_THROW(check_score_options(cfg, o));
    o.lengths = {32, 65};
    EXPECT_THROW(check_score_options(cfg, o), Error);  // beyond the context
    o.lengths = {64};
    EXPECT_NO_THROW(check_score_options(cfg, o));  // patching reads the answer position only
    o.methods = {"activation", "retrieval"};
    EXPECT_THROW(check_score_options(cfg, o), Error);  // no position left for decoding
    o.methods = {"activation"};
    o.lengths = {8};
    EXPECT_THROW(check_score_options(cfg, o), Error);
    o.lengths = {32};
    o.methods = {"nope"};
    EXPECT_THROW(check_score_options(cfg, o), Error);
    o.methods = {"activation"};
    o.samples = 0;
    EXPECT_THROW(check_score_options(cfg, o), Error);
    o.samples = 1;
    o.config.lambda = 1.5;
    EXPECT_THROW(check_score_options(cfg, o), Error);
}

}  // namespace
}  // namespace hydra
