// GPU inference of a prompt in chunks (gpu/gpu_forward.h) against the same prompt in one prefill, with a
// continued chunk (pos0 > 0) run both ways GpuForward offers: in one multi-token pass (attention through
// gpu/prefill_attention.h over the cache rows [0, pos0 + T), the short convolutions from the cached windows,
// the GDN chunked forward from the cached state) and as single-token steps. Every position's logits within
// max(2e-2, 2 x the CPU's bf16 floor) relative RMS (bf16 paths that round differently: cuDNN over S keys
// against S' keys, GDN chunk boundaries moved; the floor is how far bf16 weights move the CPU's own logits,
// cpu_logits_floor.h; at a position where the one-pass prefill is further than that from the CPU, as at a
// real model's outlier tokens, 2 x that distance), then 32 greedy tokens from each. With the prefill
// attention on its default backend (cuDNN where it loads) and on our kernels (HYDRA_PREFILL_ATTN=own's path:
// the flash kernel from 0, the decode kernel per row after).
// Models: random weights at SmolLM2's head shape (Dh 64, 9 / 3 heads, 4 layers): the teacher, kv-granular
// 1:1 hybrids (GDN state and conv windows carried across chunks; scale-norm and Hymba fusion), head-granular
// 7:1 hybrids (uneven KV groups; scale-norm and no fusion), and a Qwen-style teacher at Dh 128 (16 / 8 heads,
// q/k bias and norm); prompt 600 tokens in chunks of 250, 7 and 343 (and a 1-token chunk: 250, 1, 349).
// Random weights give near-tied logits, so there the greedy streams are reported, not required.
// GpuForwardChunks.RealModel: the model at $HYDRA_MODEL on 300 tokens of prose in chunks of 120, 5, 175:
// logits within the tolerance and the 32 greedy tokens identical up to a tie (the one-pass run's logits of
// the two tokens within 4 x the last position's difference x the logits' RMS).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "cpu_logits_floor.h"
#include "eval/model_text_encoder.h"
#include "eval/text_sources.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu/prefill_attention.h"
#include "gpu_train_common.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "model_paths.h"
#include "parity.h"
#include "serve/sampler.h"

namespace hydra::gputest {

namespace {

constexpr double kTol = 2e-2;
constexpr int64_t kGen = 32;

int32_t argmax_row(const float* x, int64_t n) {
    return argmax({x, size_t(n)});
}

struct Run {
    std::vector<float> logits;       // (T, V)
    std::vector<int32_t> greedy;     // kGen tokens after the prompt
    std::vector<float> step_logits;  // (kGen, V): the logits each greedy token was fed back with
};

// The prompt in the given chunks (one chunk: a plain prefill) with every position's logits, then kGen
// greedy tokens.
Run run_chunks(gpu::GpuForward& fwd, gpu::GpuCache& cache, const std::vector<int32_t>& prompt,
               const std::vector<int64_t>& chunks) {
    const int64_t V = fwd.model().config().vocab_size;
    Run r;
    cache.reset(fwd.stream());
    int64_t at = 0;
    for (int64_t n : chunks) {
        const std::vector<float> lg =
            fwd.forward_all_logits(cache, std::span<const int32_t>(prompt.data() + at, size_t(n)));
        r.logits.insert(r.logits.end(), lg.begin(), lg.end());
        at += n;
    }
    HYDRA_ASSERT(at == int64_t(prompt.size()), "chunks cover {} of {} tokens", at, prompt.size());
    int32_t tok = argmax_row(r.logits.data() + (at - 1) * V, V);
    for (int64_t i = 0; i < kGen; ++i) {
        r.greedy.push_back(tok);
        const std::vector<float> lg = fwd.forward_last_logits(cache, std::span<const int32_t>(&tok, 1));
        r.step_logits.insert(r.step_logits.end(), lg.begin(), lg.end());
        tok = argmax_row(lg.data(), V);
    }
    return r;
}

// One model: the chunked runs against the one-pass run, for each prefill-attention backend.
void check_chunks(const LlamaModel& model, const std::vector<int32_t>& prompt,
                  const std::vector<std::vector<int64_t>>& splits, bool strict) {
    const int64_t V = model.config().vocab_size, T = int64_t(prompt.size());
    // GPU against GPU, but the two orders of rounding move the logits as far as bf16 weights move the
    // CPU's (cpu_logits_floor.h), and at a real model's outlier tokens as far as the one-pass prefill
    // itself is from the CPU: position t may differ by max(2e-2, 2 x floor, 2 x |one-pass - CPU| at t).
    const LogitsFloor floor = cpu_logits_floor(model, prompt);
    const double tol = std::max(kTol, 2 * floor.worst);
    std::printf("bf16 floor of the CPU logits: worst %.3e (position %lld); tolerance at least %.3e\n",
                floor.worst, (long long)floor.worst_at, tol);
    gpu::GpuTrainModel gm(model, false);
    gpu::GpuForward fwd(gm);
    gpu::GpuCache cache(gm, T + kGen + 1);
    for (const bool one_pass : {false, true})
        for (auto backend : {gpu::PrefillAttention::Backend::Auto, gpu::PrefillAttention::Backend::Own}) {
            fwd.set_continue_in_one_pass(one_pass);
            fwd.prefill_attention().set_backend(backend);
            (void)run_chunks(fwd, cache, prompt, {T});  // warm-up: workspaces, plans
            const Run one = run_chunks(fwd, cache, prompt, {T});
            const std::string path_one = fwd.prefill_attention().last_path();
            for (const auto& chunks : splits) {
                const Run ch = run_chunks(fwd, cache, prompt, chunks);
                std::string label = backend == gpu::PrefillAttention::Backend::Own ? "own" : "auto";
                label += one_pass ? " one-pass" : " steps";
                label += " chunks";
                for (int64_t n : chunks) label += " " + std::to_string(n);
                double worst = 0, excess = 0;  // excess: the largest error / allowance (> 1 fails)
                int64_t agree = 0, worst_at = 0;
                for (int64_t t = 0; t < T; ++t) {
                    const RelRms r = rel_rms(ch.logits.data() + t * V, one.logits.data() + t * V, size_t(V));
                    const double x = r.finite ? r.value : INFINITY;
                    if (x > worst) worst = x, worst_at = t;
                    const double own =
                        rel_rms(one.logits.data() + t * V, floor.fp32.data() + t * V, size_t(V)).value;
                    excess = std::max(excess, x / std::max(tol, 2 * own));
                    agree +=
                        argmax_row(ch.logits.data() + t * V, V) == argmax_row(one.logits.data() + t * V, V);
                }
                const double last_rel =
                    rel_rms(ch.logits.data() + (T - 1) * V, one.logits.data() + (T - 1) * V, size_t(V)).value;
                int64_t same = 0;
                while (same < kGen && ch.greedy[size_t(same)] == one.greedy[size_t(same)]) ++same;
                std::printf(
                    "%s (prefill path %s, last chunk %s): worst rel RMS %.3e at position %lld; top-1 "
                    "%lld/%lld; "
                    "greedy %lld/%lld equal\n",
                    label.c_str(), path_one.c_str(), fwd.prefill_attention().last_path(), worst,
                    (long long)worst_at, (long long)agree, (long long)T, (long long)same, (long long)kGen);
                EXPECT_LE(excess, 1.0) << label << ": logits against the one-pass prefill, worst " << worst
                                       << " at position " << worst_at;
                if (strict && same < kGen) {
                    // the streams may part only at a tie of the one-pass run's own logits there, within 4 x
                    // the last prompt position's difference (x the logits' RMS)
                    const float* ref =
                        same == 0 ? one.logits.data() + (T - 1) * V : one.step_logits.data() + (same - 1) * V;
                    double ms = 0;
                    for (int64_t i = 0; i < V; ++i) ms += double(ref[i]) * double(ref[i]);
                    const double band = 4 * std::max(last_rel, floor.last) * std::sqrt(ms / double(V));
                    const double gap =
                        double(ref[one.greedy[size_t(same)]]) - double(ref[ch.greedy[size_t(same)]]);
                    std::printf("  streams part at token %lld: logit gap %.4f, tie band %.4f\n",
                                (long long)same, gap, band);
                    EXPECT_LE(gap, band)
                        << label << ": greedy tokens part at " << same << " where it is no tie";
                }
            }
        }
}

std::vector<int32_t> random_prompt(int64_t n, int64_t V, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    for (int32_t& t : prompt) t = int32_t(rng.uniform() * double(V - 1));
    return prompt;
}

struct ChunkCase {
    std::string name;
    bool qwen128 = false;            // Qwen-style: Dh 128, 16 / 8 heads, q/k bias and norm
    std::string granularity, ratio;  // empty: the teacher
    int index = 0;
    FusionKind fusion = FusionKind::ScaleNorm;
};

void PrintTo(const ChunkCase& c, std::ostream* os) {
    *os << c.name;
}

class Chunks : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(Chunks, MatchOnePassPrefill) {
    const ChunkCase& cc = GetParam();
    ModelConfig c = bench::smollm2_heads_synthetic_config();
    if (cc.qwen128) {
        c.hidden_size = 1024, c.num_heads = 16, c.num_kv_heads = 8, c.head_dim = 128, c.rope_dim = 128;
        c.attention_bias = true, c.qk_norm = true;
    }
    std::optional<HybridPlan> plan;
    if (!cc.ratio.empty()) {
        PlanRequest r;
        r.select = "random";
        r.ratio = parse_ratio(cc.ratio, "synthetic");
        r.granularity = cc.granularity;
        r.fusion = cc.fusion;
        r.seed = 7;
        r.gdn.norm_eps = c.rms_norm_eps;
        plan = build_plan(c, r);
    }
    LlamaModel model(c, plan ? &*plan : nullptr);
    bench::randomise(model, 2000 + uint64_t(cc.index), /*unit_logits=*/false);
    std::printf("plan %s\n", model.plan().ratio_summary().c_str());
    check_chunks(model, random_prompt(600, c.vocab_size, 77 + uint64_t(cc.index)),
                 {{250, 7, 343}, {250, 1, 349}}, false);
}

INSTANTIATE_TEST_SUITE_P(
    GpuForwardChunks, Chunks,
    ::testing::Values(ChunkCase{"teacher", false, "", "", 0},
                      ChunkCase{"hybrid_kv_1to1", false, "kv", "1:1", 1},
                      ChunkCase{"hybrid_head_7to1", false, "head", "7:1", 2},
                      ChunkCase{"qwen_style_d128", true, "", "", 3},
                      ChunkCase{"hybrid_kv_1to1_hymba", false, "kv", "1:1", 4, FusionKind::Hymba},
                      ChunkCase{"hybrid_head_7to1_nofusion", false, "head", "7:1", 5, FusionKind::None}),
    [](const ::testing::TestParamInfo<ChunkCase>& info) { return info.param.name; });

TEST(GpuForwardChunks, RealModel) {
    const std::string path = test::default_model_path();
    if (!test::default_model_present())
        GTEST_SKIP() << "the model is not at " << path << " (set HYDRA_MODEL)";
    const std::string text_file = default_prose_dir() + "/austen_emma.txt";
    if (!std::filesystem::exists(text_file)) GTEST_SKIP() << "the prose cache is not at " << text_file;
    LoadedModel m = load_model(path);
    ModelText text = model_text_for(path, m.vocab, m.model->config().eos_token_ids);
    std::ifstream f(text_file, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string prose = ss.str();
    std::vector<int32_t> prompt;
    if (text.bos_id >= 0) prompt.push_back(text.bos_id);
    for (int32_t id :
         text.encoder->encode(prose.substr(std::min<size_t>(20000, prose.size() / 2), 300 * 16))) {
        if (prompt.size() >= 300) break;
        prompt.push_back(id);
    }
    ASSERT_EQ(prompt.size(), 300u) << text_file << ": too few prompt tokens";
    check_chunks(*m.model, prompt, {{120, 5, 175}}, true);
}

}  // namespace

}  // namespace hydra::gputest
