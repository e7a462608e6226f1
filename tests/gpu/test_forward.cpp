// GPU inference (gpu/gpu_forward.h) against the CPU reference forward (model/llama_forward.cpp, fp32):
//   - the last position's logits within max(2e-2, 2 x the CPU's bf16 floor there) relative RMS, and with
//     random weights every position's within max(2e-2, 2 x the worst floor) (cpu_logits_floor.h: per-head
//     normalised fusions on random weights move the CPU's own logits by up to ~0.4 at some positions when
//     only its matrices are rounded to bf16);
//   - GPU decode against GPU prefill: the prompt less its last 16 tokens prefilled, then those one at a
//     time, their logits within the same worst-position tolerance of the prefill's rows;
//   - with real weights also: greedy continuations of 32 tokens (CPU fp32 decode against GPU decode) equal up
//     to the first token where the CPU's own top choice is a tie within the GPU's error (its logit of the
//     GPU's token within 4 x the last position's relative error x its logits' RMS of its best), and decode
//     against prefill with the same top-1 everywhere (random weights give near-tied logits);
//   - CUDA-graph decode against eager decode (same kernels: equal to fp32 rounding, 1e-5 of the largest
//     |logit|): the prompt as single-token steps from position 0 (so the attention grid passes through
//     several graph sizes), then 32 greedy tokens, equal; the graphs really ran, no capture fell back.
// Models (GpuForward/Synthetic.<name>): random weights at SmolLM2's head shape (Dh 64, 9 q / 3 KV heads,
// 4 layers) for every plan kind the GPU path branches on: teacher, kv-granular hybrids (mixed, all-LA and
// all-FA layers) with each fusion kind, head-granular hybrids (uneven KV groups), a Qwen-style teacher
// (q/k bias, q/k norm) and the sliding-window baseline (half the heads windowed to 40 positions + 2 sinks),
// 300 random tokens. GpuForward.RealModel: the model at $HYDRA_MODEL (or the default
// under .cache; skipped when absent) on 300 tokens of prose. GpuForwardGraphs: the graph check at
// SmolLM2-135M's shape (random teacher and 7:1 hybrid) and on the real model's 7:1 conversion.
// GpuForwardRopeScaling: the tiny Llama-3-style model of tests/data/tiny_hf/llama3 (rope_scaling llama3,
// head dim 64) and its weights under linear, dynamic NTK and YaRN configs and without rotation (NoPE): GPU
// prefill logits (transformers' differ by 17-25% between these configs) against
// transformers', GPU decode step by step against the CPU's (dynamic NTK's per-call length rule), graphs
// against eager; and a YaRN + NoPE hybrid converted from it, GPU against CPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "cpu_logits_floor.h"
#include "eval/eval_runner.h"
#include "eval/model_text_encoder.h"
#include "eval/text_sources.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu_train_common.h"
#include "io/safetensors.h"
#include "model/hybrid_conversion.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "model/rope_scaling.h"
#include "model_paths.h"
#include "parity.h"
#include "serve/sampler.h"

namespace hydra::gputest {

namespace {

constexpr double kTol = 2e-2;
constexpr int64_t kTokens = 300, kGen = 32, kSteps = 16;

// ||a - ref|| / ||ref|| over n logits (parity.h; infinite where an element is not finite)
double rel(const float* a, const float* ref, int64_t n) {
    return rel_rms(a, ref, size_t(n)).value;
}

int32_t argmax_row(const float* x, int64_t n) {
    return argmax({x, size_t(n)});
}

// CUDA-graph decode against eager decode on the same GpuForward, each from an empty cache of its own.
void expect_graphs_match_eager(gpu::GpuForward& fwd, const std::vector<int32_t>& prompt, int64_t n_gen,
                               double rel_tol = 1e-5) {
    const int64_t V = fwd.model().config().vocab_size, T = int64_t(prompt.size());
    gpu::GpuCache cache(fwd.model(), T + n_gen + 1);
    const bool was_on = fwd.cuda_graphs();
    const gpu::GpuForward::GraphStats before = fwd.graph_stats();
    std::vector<float> logits[2];
    std::vector<int32_t> greedy[2];
    for (int mode = 0; mode < 2; ++mode) {  // 0 eager (the reference), 1 graphs
        fwd.set_cuda_graphs(mode == 1);
        cache.reset(fwd.stream());
        logits[mode].reserve(size_t(T * V));
        for (int64_t t = 0; t < T; ++t) {
            const std::vector<float> lg =
                fwd.forward_last_logits(cache, std::span<const int32_t>(&prompt[size_t(t)], 1));
            logits[mode].insert(logits[mode].end(), lg.begin(), lg.end());
        }
        int32_t tok = argmax_row(logits[mode].data() + (T - 1) * V, V);
        for (int64_t i = 0; i < n_gen; ++i) {
            greedy[mode].push_back(tok);
            tok = fwd.forward_argmax(cache, std::span<const int32_t>(&tok, 1));
        }
    }
    fwd.set_cuda_graphs(was_on);
    const gpu::GpuForward::GraphStats& after = fwd.graph_stats();
    double max_abs = 0, max_ref = 0;
    bool finite = true;
    for (size_t i = 0; i < logits[0].size(); ++i) {
        const float a = logits[1][i], r = logits[0][i];
        finite &= std::isfinite(a) && std::isfinite(r);
        max_abs = std::max(max_abs, std::fabs(double(a) - double(r)));
        max_ref = std::max(max_ref, std::fabs(double(r)));
    }
    int64_t equal = 0;
    while (equal < n_gen && greedy[0][size_t(equal)] == greedy[1][size_t(equal)]) ++equal;
    const int64_t replays = after.replays - before.replays, captures = after.captures - before.captures;
    const double r = max_abs / std::max(max_ref, 1e-30);
    std::printf(
        "CUDA graphs vs eager, %lld single-token steps + %lld greedy: max |diff| %.3e (max |logit| %.3g, rel "
        "%.2e); greedy %lld/%lld equal; %lld captures, %lld replays\n",
        (long long)T, (long long)n_gen, max_abs, max_ref, r, (long long)equal, (long long)n_gen,
        (long long)captures, (long long)replays);
    EXPECT_TRUE(finite) << "non-finite logits";
    EXPECT_LE(r, rel_tol) << "graph logits differ from eager: max |diff| " << max_abs << " of max |logit| "
                          << max_ref;
    EXPECT_EQ(equal, n_gen) << "greedy streams part at token " << equal;
    EXPECT_GE(replays, T + n_gen) << "the graphs did not run every step";
    EXPECT_EQ(after.fallbacks, before.fallbacks) << "graph capture failed (eager fallback)";
}

// The CPU-reference checks on one model and prompt; `strict` adds the top-1 and continuation requirements
// (real weights); then the graph check.
void check_forward(const LlamaModel& model, const ModelText& text, const std::vector<int32_t>& prompt,
                   bool strict) {
    const int64_t V = model.config().vocab_size, T = int64_t(prompt.size());

    // CPU reference: every position's logits (fp32 weights, no quantized decode)
    ForwardOptions fp32;
    fp32.quantized_decode = false;
    KVCache cpu_cache(model, T + kGen + 1);
    const Tensor cpu_logits = compute_logits(model, forward_hidden(model, prompt, cpu_cache, fp32));

    gpu::GpuTrainModel gm(model, false);
    gpu::GpuForward fwd(gm);
    gpu::GpuCache cache(gm, T + kGen + 1);
    std::vector<float> gpu_logits = fwd.forward_all_logits(cache, prompt);  // warm-up (workspaces, cuBLAS)
    cache.reset(fwd.stream());
    gpu_logits = fwd.forward_all_logits(cache, prompt);

    const double last_rel = rel(gpu_logits.data() + (T - 1) * V, cpu_logits.f32() + (T - 1) * V, V);
    double worst = 0;
    int64_t agree = 0;
    for (int64_t t = 0; t < T; ++t) {
        worst = std::max(worst, rel(gpu_logits.data() + t * V, cpu_logits.f32() + t * V, V));
        agree += argmax_row(gpu_logits.data() + t * V, V) == argmax_row(cpu_logits.f32() + t * V, V);
    }
    // the CPU's own move when only its matrices are rounded to bf16 (cpu_logits_floor.h)
    const LogitsFloor floor = cpu_logits_floor(model, prompt);
    const double tol_last = std::max(kTol, 2 * floor.last), tol_worst = std::max(kTol, 2 * floor.worst);
    std::printf(
        "logits rel RMS: last %.3e, worst position %.3e; top-1 agreement %lld/%lld; bf16 floor: last "
        "%.3e, worst %.3e (position %lld)\n",
        last_rel, worst, (long long)agree, (long long)T, floor.last, floor.worst, (long long)floor.worst_at);
    EXPECT_LT(last_rel, tol_last) << "last position's logits against the CPU";
    // Random weights: the floor explains every position. Real weights carry a few tokens of 5-9x the usual
    // activation norm (hydra analyze), whose bf16 activations move more than the weight floor shows
    // (SmolLM2-135M: 0.05-0.13 at one position, 0.023 floor): reported, not required.
    if (!strict) EXPECT_LT(worst, tol_worst) << "the worst position's logits against the CPU";

    // greedy continuations (no stop at EOS: compare the raw argmax streams)
    ModelText nostop = text;
    nostop.stop_ids.clear();
    cpu_cache.reset();
    const GreedyResult cg = greedy_decode(nostop, prompt, kGen, T + kGen,
                                          [&](std::span<const int32_t> tk) {
                                              const Tensor lg =
                                                  forward_last_logits(model, tk, cpu_cache, fp32);
                                              return argmax_row(lg.f32(), V);
                                          },
                                          {});
    cache.reset(fwd.stream());
    const GreedyResult gg =
        greedy_decode(nostop, prompt, kGen, T + kGen,
                      [&](std::span<const int32_t> tk) { return fwd.forward_argmax(cache, tk); }, {});
    int64_t same = 0;
    while (same < int64_t(std::min(cg.tokens.size(), gg.tokens.size())) &&
           cg.tokens[size_t(same)] == gg.tokens[size_t(same)])
        ++same;
    const bool cont_ok = cg.tokens == gg.tokens && int64_t(gg.tokens.size()) == kGen;
    std::printf("greedy %lld tokens: %s (first %lld equal)\n", (long long)kGen,
                cont_ok ? "identical" : "DIFFERENT", (long long)same);
    if (strict && !cont_ok) {
        // The streams may part only where the CPU's own choice is a tie within the GPU's error: its logit
        // of the GPU's token at least its best minus 4 x (the last position's relative error x its logits'
        // RMS). SmolLM2-135M on this prompt parts at token 24, where the CPU's top two differ by 0.006.
        ASSERT_LT(same, int64_t(std::min(cg.tokens.size(), gg.tokens.size())))
            << "one stream ended early (EOS is not a stop here)";
        std::vector<int32_t> ctx = prompt;
        ctx.insert(ctx.end(), cg.tokens.begin(), cg.tokens.begin() + same);
        KVCache tie_cache(model, int64_t(ctx.size()) + 1);
        const Tensor lg = forward_last_logits(model, ctx, tie_cache, fp32);
        const float* l = lg.f32();
        double ms = 0;
        for (int64_t i = 0; i < V; ++i) ms += double(l[i]) * double(l[i]);
        const double band = 4 * std::max(last_rel, floor.last) * std::sqrt(ms / double(V));
        const double gap = double(l[cg.tokens[size_t(same)]]) - double(l[gg.tokens[size_t(same)]]);
        std::printf("streams part at token %lld: CPU logit gap to the GPU's token %.4f, tie band %.4f\n",
                    (long long)same, gap, band);
        EXPECT_LE(gap, band) << "greedy continuations part at token " << same
                             << " where the CPU's choice is no tie";
    }

    // decode against prefill on the GPU
    const int64_t k = std::min<int64_t>(kSteps, T - 1);
    cache.reset(fwd.stream());
    (void)fwd.forward_last_logits(cache, std::span<const int32_t>(prompt.data(), size_t(T - k)));
    double dp_worst = 0;
    int64_t dp_agree = 0;
    for (int64_t t = T - k; t < T; ++t) {
        const std::vector<float> lg =
            fwd.forward_last_logits(cache, std::span<const int32_t>(&prompt[size_t(t)], 1));
        dp_worst = std::max(dp_worst, rel(lg.data(), gpu_logits.data() + t * V, V));
        dp_agree += argmax_row(lg.data(), V) == argmax_row(gpu_logits.data() + t * V, V);
    }
    std::printf("GPU decode vs prefill, last %lld positions: worst rel RMS %.3e, top-1 equal %lld/%lld\n",
                (long long)k, dp_worst, (long long)dp_agree, (long long)k);
    EXPECT_LT(dp_worst, tol_worst) << "decode against prefill";
    if (strict) {
        EXPECT_EQ(dp_agree, k) << "decode and prefill disagree on the top-1 token";
    }
    // diagnostic: the whole prompt as single-token steps (decode kernels only) against the CPU, to tell
    // prefill-kernel error from the rest
    {
        cache.reset(fwd.stream());
        double sw_worst = 0;
        for (int64_t t = 0; t < T; ++t) {
            const std::vector<float> lg =
                fwd.forward_last_logits(cache, std::span<const int32_t>(&prompt[size_t(t)], 1));
            sw_worst = std::max(sw_worst, rel(lg.data(), cpu_logits.f32() + t * V, V));
        }
        std::printf("diagnostic, GPU single-token steps vs CPU: worst rel RMS %.3e\n", sw_worst);
    }
    expect_graphs_match_eager(fwd, prompt, kGen);
}

std::vector<int32_t> random_prompt(int64_t n, int64_t V, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    for (int32_t& t : prompt) t = int32_t(rng.uniform() * double(V - 1));
    return prompt;
}

// ---- synthetic models ----

struct SyntheticCase {
    std::string name;
    bool qwen = false;               // q/k bias and q/k norm
    std::string granularity, ratio;  // empty: the teacher (all full attention)
    FusionKind fusion = FusionKind::ScaleNorm;
    int index = 0;              // seeds: weights 1000 + index, prompt 42 + index
    int window = 0, sinks = 0;  // > 0: the sliding-window baseline (the ratio's LA heads windowed instead)
    bool la_bias = false;       // the fusion's LA offsets
};

void PrintTo(const SyntheticCase& c, std::ostream* os) {
    *os << c.name;
}

std::vector<SyntheticCase> synthetic_cases() {
    return {
        {"teacher", false, "", "", FusionKind::ScaleNorm, 0},
        {"hybrid_kv_1to1_scalenorm", false, "kv", "1:1", FusionKind::ScaleNorm, 1},
        {"hybrid_kv_2to1_hymba", false, "kv", "2:1", FusionKind::Hymba, 2},
        {"hybrid_kv_1to2_laonly", false, "kv", "1:2", FusionKind::LaOnly, 3},
        {"hybrid_head_7to1_scalenorm", false, "head", "7:1", FusionKind::ScaleNorm, 4},
        {"hybrid_head_1to1_none", false, "head", "1:1", FusionKind::None, 5},
        {"qwen_style_teacher_bias_qknorm", true, "", "", FusionKind::ScaleNorm, 6},
        {"sliding_window_head_1to1_w40_s2", false, "head", "1:1", FusionKind::None, 7, 40, 2},
        {"hybrid_kv_1to1_scalenorm_la_offsets", false, "kv", "1:1", FusionKind::ScaleNorm, 8, 0, 0, true},
        {"hybrid_head_1to1_hymba_la_offsets", false, "head", "1:1", FusionKind::Hymba, 9, 0, 0, true},
    };
}

class Synthetic : public ::testing::TestWithParam<SyntheticCase> {};

TEST_P(Synthetic, MatchesCpuAndGraphsMatchEager) {
    const SyntheticCase& sc = GetParam();
    ModelConfig c = bench::smollm2_heads_synthetic_config();
    if (sc.qwen) c.attention_bias = true, c.qk_norm = true;
    std::optional<HybridPlan> plan;
    if (!sc.ratio.empty()) {
        PlanRequest r;
        r.select = "random";
        r.ratio = parse_ratio(sc.ratio, "synthetic");
        r.granularity = sc.granularity;
        r.fusion = sc.fusion;
        r.seed = 7;
        r.gdn.norm_eps = c.rms_norm_eps;
        r.window = sc.window, r.sinks = sc.sinks;
        r.la_bias = sc.la_bias;
        plan = build_plan(c, r);
    }
    LlamaModel model(c, plan ? &*plan : nullptr);
    bench::randomise(model, 1000 + uint64_t(sc.index), /*unit_logits=*/false);
    std::printf("plan %s\n", model.plan().ratio_summary().c_str());
    ModelText text = byte_model_text();
    text.stop_ids.clear();
    check_forward(model, text, random_prompt(kTokens, c.vocab_size, 42 + uint64_t(sc.index)), false);
}

INSTANTIATE_TEST_SUITE_P(GpuForward, Synthetic, ::testing::ValuesIn(synthetic_cases()),
                         [](const ::testing::TestParamInfo<SyntheticCase>& info) { return info.param.name; });

// ---- the real model ----

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

TEST(GpuForward, RealModel) {
    const std::string path = test::default_model_path();
    if (!test::default_model_present())
        GTEST_SKIP() << "the model is not at " << path << " (set HYDRA_MODEL)";
    const std::string text_file = default_prose_dir() + "/austen_emma.txt";
    if (!std::filesystem::exists(text_file)) GTEST_SKIP() << "the prose cache is not at " << text_file;
    LoadedModel m = load_model(path);
    const LlamaModel& model = *m.model;
    ModelText text = model_text_for(path, m.vocab, model.config().eos_token_ids);
    std::printf("%s: %lld layers, plan %s\n", path.c_str(), (long long)model.config().num_layers,
                model.plan().ratio_summary().c_str());
    // prompt: BOS + prose from 20 kB into the book (past the front matter)
    const std::string prose = read_text(text_file);
    std::vector<int32_t> prompt;
    if (text.bos_id >= 0) prompt.push_back(text.bos_id);
    const std::vector<int32_t> body =
        text.encoder->encode(prose.substr(std::min<size_t>(20000, prose.size() / 2), size_t(kTokens) * 16));
    for (int32_t id : body) {
        if (int64_t(prompt.size()) >= kTokens) break;
        prompt.push_back(id);
    }
    ASSERT_EQ(int64_t(prompt.size()), kTokens) << text_file << ": too few prompt tokens";
    check_forward(model, text, prompt, true);
}

// ---- CUDA graphs against eager at SmolLM2-135M's size ----

void graphs_on(const LlamaModel& model) {
    std::printf("plan %s\n", model.plan().ratio_summary().c_str());
    gpu::GpuTrainModel gm(model, false);
    gpu::GpuForward fwd(gm);
    expect_graphs_match_eager(fwd, random_prompt(kTokens, model.config().vocab_size, 7), kGen);
}

std::unique_ptr<LlamaModel> smollm2_shape_teacher() {
    auto t = std::make_unique<LlamaModel>(bench::smollm2_135m_config());
    bench::randomise(*t, 21);
    return t;
}

HybridPlan plan_7to1(const ModelConfig& c) {
    return build_plan(c, bench::plan_request(c, "7:1", "kv", FusionKind::ScaleNorm, 1));
}

TEST(GpuForwardGraphs, Smollm2ShapeTeacher) {
    graphs_on(*smollm2_shape_teacher());
}

TEST(GpuForwardGraphs, Smollm2ShapeHybrid7to1) {
    const ModelConfig c = bench::smollm2_135m_config();
    const HybridPlan plan = plan_7to1(c);
    LlamaModel h(c, &plan);
    bench::randomise(h, 22);
    graphs_on(h);
}

TEST(GpuForwardGraphs, RealModelHybrid7to1) {
    if (!test::default_model_present())
        GTEST_SKIP() << "the model is not at " << test::default_model_path() << " (set HYDRA_MODEL)";
    LoadedModel m = load_model(test::default_model_path());
    if (!m.model->plan().is_all_fa()) GTEST_SKIP() << "the model is already a hybrid";
    graphs_on(*convert_to_hybrid(*m.model, plan_7to1(m.model->config()), ConversionOptions{}));
}

// ---- RoPE scaling on the tiny Llama-3-style model ----

// The tiny model's directory with config.json's RoPE replaced by `variant` of rope_variants.json (empty: the
// model's own llama3; "nope": llama3 with hydra_fa_nope), in a temporary directory that lives as long as the
// object.
struct TinyVariant {
    std::filesystem::path dir;
    explicit TinyVariant(const std::string& variant) {
        const std::string src = test::test_data("tiny_hf/llama3");
        dir = std::filesystem::temp_directory_path() /
              ("hydra_gpu_rope_" + (variant.empty() ? "llama3" : variant) + "_" + std::to_string(::getpid()));
        std::filesystem::remove_all(dir);
        std::filesystem::create_directories(dir);
        nlohmann::json cfg = nlohmann::json::parse(read_text(src + "/config.json"));
        if (variant == "nope") {
            cfg["hydra_fa_nope"] = true;
        } else if (!variant.empty()) {
            const nlohmann::json v = nlohmann::json::parse(read_text(src + "/rope_variants.json"))[variant];
            cfg["max_position_embeddings"] = v["max_position_embeddings"];
            nlohmann::json params = v["rope_parameters"];
            params["rope_theta"] = 10000.0;
            cfg["rope_parameters"] = params;
        }
        std::ofstream(dir / "config.json") << cfg.dump(1);
        std::filesystem::copy_file(src + "/model.safetensors", dir / "model.safetensors");
    }
    ~TinyVariant() { std::filesystem::remove_all(dir); }
};

// GPU against CPU, both as a prefill of the first `split` tokens then one token at a time (the same calls, so
// dynamic NTK sees the same lengths), every position's logits.
void expect_stepwise_gpu_matches_cpu(const LlamaModel& model, const std::vector<int32_t>& prompt,
                                     int64_t split) {
    const int64_t T = int64_t(prompt.size()), V = model.config().vocab_size;
    ForwardOptions fp32;
    fp32.quantized_decode = false;
    KVCache cpu_cache(model, T);
    gpu::GpuTrainModel gm(model, false);
    gpu::GpuForward fwd(gm);
    gpu::GpuCache cache(gm, T);
    const std::span<const int32_t> all(prompt);
    const Tensor cpu_first =
        compute_logits(model, forward_hidden(model, all.first(size_t(split)), cpu_cache, fp32));
    const std::vector<float> gpu_first = fwd.forward_all_logits(cache, all.first(size_t(split)));
    double worst = rel(gpu_first.data(), cpu_first.f32(), split * V);
    for (int64_t t = split; t < T; ++t) {
        const Tensor c = forward_last_logits(model, all.subspan(size_t(t), 1), cpu_cache, fp32);
        const std::vector<float> g = fwd.forward_last_logits(cache, all.subspan(size_t(t), 1));
        worst = std::max(worst, rel(g.data(), c.f32(), V));
    }
    // the CPU's own move when only its matrices are rounded to bf16 (cpu_logits_floor.h): per-head normalised
    // fusion on random hybrid weights amplifies it past any fixed bf16 tolerance; a teacher's floor is tiny
    const LogitsFloor floor = cpu_logits_floor(model, prompt);
    const double tol = std::max(kTol, 2 * floor.worst);
    std::printf("stepwise GPU vs CPU: worst rel RMS %.3e (tolerance %.3e: the CPU's bf16 floor %.3e)\n",
                worst, tol, floor.worst);
    EXPECT_LT(worst, tol);
}

class GpuForwardRopeScaling : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuForwardRopeScaling, TinyLlama3MatchesTransformersAndCpu) {
    const std::string variant = GetParam();
    TinyVariant tv(variant == "llama3" ? "" : variant);
    LoadedModel m = load_model(tv.dir.string());
    const LlamaModel& model = *m.model;
    ASSERT_EQ(model.config().fa_nope, variant == "nope");
    if (variant != "nope") {
        ASSERT_EQ(rope_type_name(model.config().rope_scaling.type), variant);
    }
    SafetensorsFile ref =
        SafetensorsFile::open(test::test_data("tiny_hf/llama3/reference_logits.safetensors"));
    const Tensor ids = ref.copy("ids");
    const Tensor expected = ref.to_f32(variant == "llama3" ? "logits" : "logits_" + variant);
    const std::vector<int32_t> prompt(ids.data<int32_t>(), ids.data<int32_t>() + ids.numel());
    const int64_t T = int64_t(prompt.size()), V = model.config().vocab_size;

    gpu::GpuTrainModel gm(model, false);
    gpu::GpuForward fwd(gm);
    gpu::GpuCache cache(gm, T + 16);
    const std::vector<float> logits = fwd.forward_all_logits(cache, prompt);
    const double r = rel(logits.data(), expected.f32(), T * V);
    std::printf("%s: GPU prefill against transformers, rel RMS %.3e\n", variant.c_str(), r);
    EXPECT_LT(r, kTol);
    expect_stepwise_gpu_matches_cpu(model, prompt, 24);
    expect_graphs_match_eager(fwd, prompt, 8);
}

INSTANTIATE_TEST_SUITE_P(Types, GpuForwardRopeScaling,
                         ::testing::Values("llama3", "linear", "dynamic", "yarn"));

TEST(GpuForwardRopeScalingHybrid, YarnNopeHybridMatchesCpu) {
    LoadedModel teacher = load_model(test::test_data("tiny_hf/llama3"));
    PlanRequest req;
    req.select = "random";
    req.granularity = "head";
    req.ratio = parse_ratio("1:1", "test");
    const HybridPlan plan = build_plan(teacher.model->config(), req);
    for (bool nope : {false, true}) {
        ConversionOptions opt;
        opt.rope_scaling = parse_rope_scaling_spec("yarn:4");
        opt.fa_nope = nope;
        auto hybrid = convert_to_hybrid(*teacher.model, plan, opt);
        bench::randomise(*hybrid, 31);  // fresh GDN weights are near zero: make every path count
        std::printf("yarn hybrid, NoPE %d\n", int(nope));
        expect_stepwise_gpu_matches_cpu(*hybrid, random_prompt(64, hybrid->config().vocab_size, 5), 40);
    }
}

}  // namespace

}  // namespace hydra::gputest
