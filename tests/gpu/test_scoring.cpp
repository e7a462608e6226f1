// Head scoring on the GPU (cli/gpu_scoring_backend.h) against the CPU backend (interp/scoring_backend.h)
// on tiny random teachers (3 layers x 4 heads, Dh 64, 2 KV groups; one with q/k bias and q/k norm), one
// clean/corrupted pair each: the same scoring code (activation_patching, attribution_patching,
// path_patching, the score aggregation) through each backend, compared per head.
//
// Setup that keeps the comparison about the backends: the weights are rounded to bf16 on the host first,
// so both backends compute with the same weights and only the GPU's bf16 activations (DESIGN.md §3)
// differ; q/k weights are scaled up so that attention is sharp and heads differ; the answer/distractor
// tokens are the pair whose logit difference the corruption moves most, so the gap is of the order of
// the logits' scale (effects are LD changes divided by the gap).
//
// Tolerances, from bf16: one bf16 rounding is a relative error of at most 2^-9 (0.2%); a layer rounds its
// activations about six times (normed input, q/k/v, heads, normed mid, gate/up, SwiGLU), so 3 layers give
// about sqrt(18) x 0.2% ~ 1% relative error in the residual stream, and the same in any LD read from it.
// Normalised effects are LD differences over the gap (chosen >= the LD scale here): each LD is off by
// ~1% of the LD scale, so an effect by up to ~2% of the gap; we allow kTolEffect = 6% (3x). Attribution
// also multiplies by a bf16 gradient (one more 0.2% rounding): the same tolerance. Rankings: every two
// heads whose CPU scores differ by more than 2 kTolEffect must be ordered the same on the GPU (the
// well-separated part of "equal rankings"); the Spearman correlation over all heads is printed.
// Forward: the answer position's final residual and head outputs within 2e-2 relative RMS (parity.h).
// Retrieval decode, teacher-forced with the CPU's greedy tokens: the greedy token and each head's top-1
// attended position agree in at least 90% of the steps (a flip needs two candidates within ~1% of each
// other, which random weights make occasional, never common).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/gpu_scoring_backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "gpu_train_common.h"
#include "interp/activation_patching.h"
#include "interp/attribution_patching.h"
#include "interp/path_patching.h"
#include "interp/score_aggregation.h"
#include "interp/scoring_backend.h"
#include "parity.h"

namespace hydra::gputest {

namespace {

constexpr double kTolEffect = 0.06;
constexpr int64_t kTokens = 96;

std::unique_ptr<LlamaModel> tiny_teacher(bool qwen_style, uint64_t seed) {
    ModelConfig c;
    c.name = qwen_style ? "tiny qwen-style teacher" : "tiny teacher";
    c.vocab_size = 96, c.hidden_size = 128, c.intermediate_size = 256, c.num_layers = 3;
    c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 64, c.rope_dim = 64, c.max_position_embeddings = 512;
    c.rope_theta = 10000.f, c.rms_norm_eps = 1e-5f, c.tie_word_embeddings = true;
    c.attention_bias = qwen_style, c.qk_norm = qwen_style;
    auto m = std::make_unique<LlamaModel>(c);
    bench::randomise(*m, seed);
    ParamArena& a = m->params();
    for (const ArenaEntry& e : a.entries()) {
        Tensor t = a.get(e.name);
        float* p = t.f32();
        const bool qk = e.name.find("q_proj.weight") != std::string::npos ||
                        e.name.find("k_proj.weight") != std::string::npos;
        for (int64_t i = 0; i < t.numel(); ++i) p[i] = round_bf16(qk ? 3.f * p[i] : p[i]);
    }
    return m;
}

// The clean prompt, and the corrupted one with a few tokens changed in the middle.
std::pair<std::vector<int32_t>, std::vector<int32_t>> prompts(Rng& rng, int64_t V) {
    std::vector<int32_t> clean(static_cast<size_t>(kTokens));
    for (auto& t : clean) t = int32_t(uniform_below(rng, V));
    std::vector<int32_t> corr = clean;
    for (int64_t i = kTokens / 3; i < kTokens / 3 + 4; ++i)
        corr[size_t(i)] = int32_t((clean[size_t(i)] + 1 + uniform_below(rng, V - 1)) % V);
    return {clean, corr};
}

// (answer, distractor): the tokens whose logit difference the corruption moves most (CPU runs).
std::pair<int32_t, int32_t> widest_pair(const FaWeights<float>& w, const FaRun<float>& clean,
                                        const FaRun<float>& corr) {
    const ModelConfig& c = w.config();
    const int64_t C = c.hidden_size, V = c.vocab_size;
    auto normed = [&](const float* x) {
        double ss = 0;
        for (int64_t i = 0; i < C; ++i) ss += double(x[i]) * x[i];
        const double r = 1.0 / std::sqrt(ss / double(C) + c.rms_norm_eps);
        std::vector<double> y(static_cast<size_t>(C));
        for (int64_t i = 0; i < C; ++i) y[size_t(i)] = x[i] * r * w.final_norm()[i];
        return y;
    };
    const auto yc = normed(clean.x_final_last(C)), yx = normed(corr.x_final_last(C));
    int32_t best = 0, worst = 0;
    double hi = -1e300, lo = 1e300;
    for (int64_t v = 0; v < V; ++v) {
        double d = 0;
        for (int64_t i = 0; i < C; ++i) d += double(w.lm_head()[v * C + i]) * (yc[size_t(i)] - yx[size_t(i)]);
        if (d > hi) hi = d, best = int32_t(v);
        if (d < lo) lo = d, worst = int32_t(v);
    }
    return {best, worst};
}

// Per-head effects of the two backends: within kTolEffect, and the well-separated pairs in the same order.
void expect_same_effects(const std::string& what, const std::vector<double>& gpu,
                         const std::vector<double>& cpu) {
    ASSERT_EQ(gpu.size(), cpu.size()) << what;
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
        ASSERT_TRUE(std::isfinite(gpu[i])) << what << " head " << i;
        worst = std::max(worst, std::fabs(gpu[i] - cpu[i]));
    }
    long long misordered = 0, separated = 0;
    for (size_t i = 0; i < cpu.size(); ++i)
        for (size_t j = 0; j < cpu.size(); ++j)
            if (cpu[i] - cpu[j] > 2 * kTolEffect) {
                ++separated;
                misordered += gpu[i] > gpu[j] ? 0 : 1;
            }
    const double rho = spearman(gpu, cpu);
    std::printf(
        "  %-28s max |gpu - cpu| %.4f (tol %.2f)  Spearman %.4f  separated pairs %lld, misordered %lld\n",
        what.c_str(), worst, kTolEffect, rho, separated, misordered);
    std::string row_c, row_g;
    for (size_t i = 0; i < cpu.size(); ++i) row_c += " " + std::to_string(cpu[i]).substr(0, 7);
    for (size_t i = 0; i < gpu.size(); ++i) row_g += " " + std::to_string(gpu[i]).substr(0, 7);
    std::printf("    cpu:%s\n    gpu:%s\n", row_c.c_str(), row_g.c_str());
    EXPECT_LE(worst, kTolEffect) << what;
    EXPECT_EQ(misordered, 0) << what << ": well-separated heads ranked differently";
}

void expect_same_result(const std::string& what, const HeadPatchResult& g, const HeadPatchResult& c) {
    expect_scalar(what + " gap", g.gap(), c.gap(), 2e-2, std::fabs(c.ld_clean) + std::fabs(c.ld_corrupted));
    expect_same_effects(what + " noising", g.noising_effect(), c.noising_effect());
    expect_same_effects(what + " denoising", g.denoising_effect(), c.denoising_effect());
}

void check_scoring(const LlamaModel& model, const std::string& name) {
    Rng rng = case_rng(name);
    CpuScoringBackend cpu(model);
    gpu::GpuScoringBackend gpu(model);
    const ModelConfig& c = model.config();
    const int64_t L = c.num_layers, H = c.num_heads, C = c.hidden_size, HD = H * c.head_dim;
    const auto [clean_ids, corr_ids] = prompts(rng, c.vocab_size);

    // forward (every position kept: attribution over all positions reads them)
    const FaRun<float> cc = cpu.forward(clean_ids, true), cx = cpu.forward(corr_ids, true);
    const FaRun<float> gc = gpu.forward(clean_ids, true), gx = gpu.forward(corr_ids, true);
    const FaRun<float> gc1 = gpu.forward(clean_ids, false);
    const auto final_of = [&](const FaRun<float>& r) {
        return std::vector<float>(r.x_final_last(C), r.x_final_last(C) + C);
    };
    expect_rel("final residual (answer row)", final_of(gc), final_of(cc), 2e-2);
    expect_rel("final residual, answer-only run", final_of(gc1), final_of(cc), 2e-2);
    for (int64_t l = 0; l < L; ++l) {
        expect_rel("heads at every position, layer " + std::to_string(l), gc.heads[size_t(l)],
                   cc.heads[size_t(l)], 2e-2);
        expect_rel("answer-row heads, layer " + std::to_string(l),
                   std::vector<float>(gc1.heads_last(l, HD), gc1.heads_last(l, HD) + HD),
                   std::vector<float>(cc.heads_last(l, HD), cc.heads_last(l, HD) + HD), 2e-2);
    }

    const auto [answer, distractor] = widest_pair(cpu.weights(), cc, cx);
    const LogitDiff<float> ld(cpu.weights(), answer, distractor);
    std::printf("  LD clean %.3f corrupted %.3f (answer %d, distractor %d)\n", ld(cc.x_final_last(C)),
                ld(cx.x_final_last(C)), answer, distractor);

    const HeadPatchResult act_c = activation_patching(cpu, cc, cx, ld, 5);
    const HeadPatchResult act_g = activation_patching(gpu, gc, gx, ld, 5);  // batches of 5: several per sweep
    expect_same_result("activation", act_g, act_c);
    const HeadPatchResult act_g1 = activation_patching(gpu, gc, gx, ld, 1024);  // one batch
    expect_same_result("activation, one batch", act_g1, act_c);

    const HeadPatchResult atp_c = attribution_patching(cpu, cc, cx, ld);
    const HeadPatchResult atp_g = attribution_patching(gpu, gc, gx, ld);
    expect_same_result("attribution (answer)", atp_g, atp_c);
    const HeadPatchResult all_c = attribution_patching(cpu, cc, cx, ld, AttributionPositions::All);
    const HeadPatchResult all_g = attribution_patching(gpu, gc, gx, ld, AttributionPositions::All);
    expect_same_result("attribution (all positions)", all_g, all_c);

    const std::vector<std::pair<int64_t, int64_t>> receivers = top_heads(
        [&] {
            TaskScoreAccumulator acc(L * H);
            acc.add_pair(act_c, ScoreConfig{});
            return acc.mean().score;
        }(),
        H, 3);
    const PathPatchResult path_c = path_patching(cpu, cc, cx, ld, receivers, 7);
    const PathPatchResult path_g = path_patching(gpu, gc, gx, ld, receivers, 7);
    expect_same_result("path (direct)", path_g.direct, path_c.direct);
    expect_same_result("path (via receivers)", path_g.via_receivers, path_c.via_receivers);

    // The per-head scores the aggregation makes of one pair (what scores.json ranks).
    for (const auto& [what, g, cr] :
         {std::tuple{"activation score", &act_g, &act_c}, std::tuple{"attribution score", &atp_g, &atp_c}}) {
        TaskScoreAccumulator ag(L * H), ac(L * H);
        ag.add_pair(*g, ScoreConfig{});
        ac.add_pair(*cr, ScoreConfig{});
        expect_same_effects(what, ag.mean().score, ac.mean().score);
    }

    // Retrieval decode, teacher-forced with the CPU's tokens.
    std::unique_ptr<RetrievalDecoder> dc = cpu.decoder(), dg = gpu.decoder();
    const int64_t steps = 24, P = kTokens - 1;
    dc->start(std::span<const int32_t>(clean_ids).first(size_t(P)), kTokens + steps);
    dg->start(std::span<const int32_t>(clean_ids).first(size_t(P)), kTokens + steps);
    int32_t tok = clean_ids.back();
    int64_t same_token = 0, same_top = 0;
    std::vector<int64_t> tc, tg;
    for (int64_t s = 0; s < steps; ++s) {
        const int32_t nc = dc->step(tok, tc), ng = dg->step(tok, tg);
        same_token += nc == ng ? 1 : 0;
        for (int64_t i = 0; i < L * H; ++i) same_top += tc[size_t(i)] == tg[size_t(i)] ? 1 : 0;
        tok = nc;
    }
    std::printf(
        "  retrieval decode, %lld steps: greedy token equal %lld, top-1 position equal %lld of %lld\n",
        (long long)steps, (long long)same_token, (long long)same_top, (long long)(steps * L * H));
    EXPECT_GE(double(same_token), 0.9 * double(steps));
    EXPECT_GE(double(same_top), 0.9 * double(steps * L * H));
}

}  // namespace

TEST(GpuScoring, TinyTeacherMatchesCpu) {
    const auto m = tiny_teacher(false, 11);
    check_scoring(*m, "GpuScoring.TinyTeacher");
}

TEST(GpuScoring, TinyQwenStyleTeacherMatchesCpu) {
    const auto m = tiny_teacher(true, 12);
    check_scoring(*m, "GpuScoring.TinyQwenStyleTeacher");
}

TEST(GpuScoring, RefusesRunsOfTheCpuBackend) {
    const auto m = tiny_teacher(false, 13);
    CpuScoringBackend cpu(*m);
    gpu::GpuScoringBackend gpu(*m);
    const std::vector<int32_t> ids = {1, 2, 3, 4, 5};
    const FaRun<float> r = cpu.forward(ids, false);
    const std::vector<PatchedCopy<float>> none(1);
    EXPECT_THROW(gpu.sweep(r, none, 8), Error);
    EXPECT_THROW(gpu.forward(std::vector<int32_t>{1, 200}, false), Error);
}

}  // namespace hydra::gputest
