// GPU forward vs the CPU reference forward (model/llama_forward.cpp, fp32) on real models, teacher or
// hybrid: the same prompt (prose from the haystack cache, --tokens long) through both engines.
// Reports, per model:
//   - relative RMS error of the last position's logits, and the largest over all positions
//   - top-1 agreement over all positions
//   - greedy continuations of --gen tokens (CPU fp32 decode vs GPU decode): equal, or where they part
//   - GPU decode vs GPU prefill: prompt minus its last --steps tokens prefilled, then those tokens one at
//     a time; their logits against the full prefill's rows (relative RMS, top-1)
//   - GPU prefill and decode timings
//   - CUDA-graph decode vs eager decode (gpu_forward.h: same kernels, so equal to fp32 rounding): the whole
//     prompt as single-token steps from position 0 (so the attention grid passes through several graph
//     sizes), then --gen greedy tokens; max |logit difference| and greedy agreement
// Pass: last-logits rel RMS < --tol (2e-2: bf16 operands against fp32), same continuation, decode vs
// prefill rel RMS < --tol with equal top-1; graphs: max |diff| <= 1e-5 x max |logit|, equal greedy tokens,
// and the graphs really ran. Exit 1 when a model fails either.
//
// --synthetic (no model file needed): random-weight models of SmolLM2's head shape (Dh 64, 9 q / 3 KV
// heads, 4 layers) covering every plan kind the GPU path has branches for: teacher, kv-granular hybrid
// (mixed + all-LA + all-FA layers) with each fusion kind, head-granular hybrid (uneven KV groups), and a
// Qwen-style teacher (q/k bias, q/k norm); random token prompts. Random weights give near-tied logits,
// so only the logits error and decode-vs-prefill are required to pass there.
//
// --decode-timing 1024,8192,32768: decode ms/token eager vs CUDA graphs (bench/gpu_decode_timing.h) at
// those cache lengths, after the graph check on a --tokens random prompt, for each MODEL and its 7:1
// conversion (random kv groups, seed 1; teachers only), or without MODEL for random weights at
// SmolLM2-135M's shape (teacher and 7:1 hybrid; speed does not depend on the weights); --no-parity skips
// the CPU comparisons.
//
//   gpu_forward_parity [--tokens 300] [--gen 32] [--steps 16] [--tol 2e-2] [--text FILE] MODEL...
//   gpu_forward_parity --synthetic [--tokens 300]
//   gpu_forward_parity --no-parity --decode-timing 1024,8192,32768 [--timing-steps 200] [--timing-warmup 10] [MODEL...]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/tensor.h"
#include "eval/eval_runner.h"
#include "eval/model_text_encoder.h"
#include "eval/text_sources.h"
#include "gpu_decode_timing.h"
#include "gpu_train_common.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/cuda_device.h"
#include "gpu/gpu_train_model.h"
#include "model/hybrid_conversion.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "core/rng.h"
#include "serve/sampler.h"

using namespace hydra;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double rel_rms(const float* a, const float* ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = double(a[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

int32_t argmax_row(const float* x, int64_t n) { return argmax({x, size_t(n)}); }

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    HYDRA_CHECK(f.good(), "{}: cannot read the prompt text", path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// CUDA-graph decode vs eager decode on the same GpuForward, each from an empty cache of its own: the
// prompt as single-token steps from position 0, then n_gen greedy tokens. Same kernels and cuBLAS calls,
// so the logits must agree to fp32 rounding (rel_tol of the largest |logit|); they are normally identical.
bool graph_parity(gpu::GpuForward& fwd, const std::vector<int32_t>& prompt, int64_t n_gen, double rel_tol = 1e-5) {
    const int64_t V = fwd.model().config().vocab_size, T = int64_t(prompt.size());
    gpu::GpuCache cache(fwd.model(), T + n_gen + 1);
    const bool was_on = fwd.cuda_graphs();
    const gpu::GpuForward::GraphStats before = fwd.graph_stats();
    std::vector<float> logits[2];
    std::vector<int32_t> greedy[2];
    double seconds[2] = {0, 0};
    for (int mode = 0; mode < 2; ++mode) {  // 0 eager (the reference), 1 graphs
        fwd.set_cuda_graphs(mode == 1);
        cache.reset(fwd.stream());
        const auto t0 = clock_type::now();
        logits[mode].reserve(size_t(T * V));
        for (int64_t t = 0; t < T; ++t) {
            const std::vector<float> lg = fwd.forward_last_logits(cache, std::span<const int32_t>(&prompt[size_t(t)], 1));
            logits[mode].insert(logits[mode].end(), lg.begin(), lg.end());
        }
        int32_t tok = argmax_row(logits[mode].data() + (T - 1) * V, V);
        for (int64_t i = 0; i < n_gen; ++i) {
            greedy[mode].push_back(tok);
            tok = fwd.forward_argmax(cache, std::span<const int32_t>(&tok, 1));
        }
        seconds[mode] = seconds_since(t0);
    }
    fwd.set_cuda_graphs(was_on);
    const gpu::GpuForward::GraphStats& after = fwd.graph_stats();
    double max_abs = 0, max_ref = 0;
    int64_t identical_steps = 0;
    bool finite = true;
    for (int64_t t = 0; t < T; ++t) {
        bool same = true;
        for (int64_t i = t * V; i < (t + 1) * V; ++i) {
            const float a = logits[1][size_t(i)], r = logits[0][size_t(i)];
            finite &= std::isfinite(a) && std::isfinite(r);
            max_abs = std::max(max_abs, std::fabs(double(a) - double(r)));
            max_ref = std::max(max_ref, std::fabs(double(r)));
            same &= std::memcmp(&a, &r, sizeof(float)) == 0;
        }
        identical_steps += same;
    }
    int64_t equal = 0;
    while (equal < n_gen && greedy[0][size_t(equal)] == greedy[1][size_t(equal)]) ++equal;
    const int64_t replays = after.replays - before.replays, captures = after.captures - before.captures;
    const double rel = max_abs / std::max(max_ref, 1e-30);
    const bool ok = finite && rel <= rel_tol && equal == n_gen && replays >= T + n_gen &&
                    after.fallbacks == before.fallbacks;
    fmt::print("CUDA graphs vs eager, {} single-token steps from position 0 + {} greedy: max |diff| {:.3e} "
               "(max |logit| {:.3g}, rel {:.2e}), bit-identical steps {}/{}; greedy {}/{} equal; "
               "{} captures ({} nodes last), {} replays; {:.2f} vs {:.2f} ms/step -> {}\n",
               T, n_gen, max_abs, max_ref, rel, identical_steps, T, equal, n_gen, captures, after.last_nodes, replays,
               1000.0 * seconds[0] / double(T + n_gen), 1000.0 * seconds[1] / double(T + n_gen),
               ok ? "PASS" : "FAIL");
    if (!finite) fmt::print("FAIL: non-finite logits\n");
    if (after.fallbacks != before.fallbacks) fmt::print("FAIL: graph capture failed (eager fallback)\n");
    return ok;
}

struct Outcome {
    bool cpu_ok = true;    // the CPU-reference checks
    bool graph_ok = true;  // CUDA graphs vs eager
};

// The checks on one model and prompt; `strict` adds top-1 / continuation requirements (real weights).
Outcome check(const LlamaModel& model, const ModelText& text, const std::vector<int32_t>& prompt, int64_t n_gen,
           int64_t n_steps, double tol, bool strict) {
    const ModelConfig& cfg = model.config();
    const int64_t V = cfg.vocab_size;
    const int64_t T = int64_t(prompt.size());
    auto t0 = clock_type::now();

    // CPU reference: every position's logits (fp32 weights, no quantized decode)
    t0 = clock_type::now();
    ForwardOptions fp32;
    fp32.quantized_decode = false;
    KVCache cpu_cache(model, T + n_gen + 1);
    const Tensor cpu_logits = compute_logits(model, forward_hidden(model, prompt, cpu_cache, fp32));
    const double cpu_s = seconds_since(t0);

    // GPU
    t0 = clock_type::now();
    gpu::GpuTrainModel gm(model, false);
    const double upload_s = seconds_since(t0);
    gpu::GpuForward fwd(gm);
    gpu::GpuCache cache(gm, T + n_gen + 1);
    std::vector<float> gpu_logits = fwd.forward_all_logits(cache, prompt);  // warm-up (workspaces, cuBLAS)
    cache.reset(fwd.stream());
    t0 = clock_type::now();
    gpu_logits = fwd.forward_all_logits(cache, prompt);
    const double gpu_prefill_s = seconds_since(t0);
    fmt::print("device: {}; weights {:.1f} MiB uploaded in {:.2f} s; cache {:.1f} MiB KV + {:.2f} MiB state\n",
               gpu::require_cuda_device(), double(gm.device_bytes()) / 1048576.0, upload_s,
               double(cache.kv_bytes()) / 1048576.0, double(cache.state_bytes()) / 1048576.0);

    bool ok = true;
    const double last_rel = rel_rms(gpu_logits.data() + (T - 1) * V, cpu_logits.f32() + (T - 1) * V, V);
    double worst = 0;
    int64_t agree = 0;
    for (int64_t t = 0; t < T; ++t) {
        worst = std::max(worst, rel_rms(gpu_logits.data() + t * V, cpu_logits.f32() + t * V, V));
        agree += argmax_row(gpu_logits.data() + t * V, V) == argmax_row(cpu_logits.f32() + t * V, V);
    }
    fmt::print("prefill {} tokens: CPU {:.2f} s, GPU {:.4f} s ({:.0f} tok/s)\n", T, cpu_s, gpu_prefill_s,
               double(T) / gpu_prefill_s);
    fmt::print("logits rel RMS: last {:.3e}, worst position {:.3e}; top-1 agreement {}/{} ({:.1f}%)\n", last_rel,
               worst, agree, T, 100.0 * double(agree) / double(T));
    if (!(last_rel < tol)) {
        fmt::print("FAIL: last logits rel RMS {:.3e} >= {:.1e}\n", last_rel, tol);
        ok = false;
    }

    // greedy continuations (no stop at EOS: compare the raw argmax streams)
    ModelText nostop = text;
    nostop.stop_ids.clear();
    cpu_cache.reset();
    const GreedyResult cg = greedy_decode(
        nostop, prompt, n_gen, T + n_gen,
        [&](std::span<const int32_t> tk) {
            const Tensor lg = forward_last_logits(model, tk, cpu_cache, fp32);
            return argmax_row(lg.f32(), V);
        },
        {});
    cache.reset(fwd.stream());
    const GreedyResult gg = greedy_decode(
        nostop, prompt, n_gen, T + n_gen, [&](std::span<const int32_t> tk) { return fwd.forward_argmax(cache, tk); },
        {});
    int64_t same = 0;
    while (same < int64_t(std::min(cg.tokens.size(), gg.tokens.size())) && cg.tokens[size_t(same)] == gg.tokens[size_t(same)])
        ++same;
    const bool cont_ok = cg.tokens == gg.tokens && int64_t(gg.tokens.size()) == n_gen;
    fmt::print("greedy {} tokens: {} (first {} equal); GPU prefill {:.4f} s, decode {:.2f} ms/token\n", n_gen,
               cont_ok ? "identical" : "DIFFERENT", same, gg.prefill_seconds,
               1000.0 * gg.decode_seconds / double(std::max<size_t>(1, gg.tokens.size() - 1)));
    fmt::print("  CPU: {:?}\n  GPU: {:?}\n", cg.text, gg.text);
    if (!cont_ok && strict) ok = false;

    // decode vs prefill on the GPU
    const int64_t k = std::min<int64_t>(n_steps, T - 1);
    cache.reset(fwd.stream());
    (void)fwd.forward_last_logits(cache, std::span<const int32_t>(prompt.data(), size_t(T - k)));
    double dp_worst = 0;
    int64_t dp_agree = 0;
    for (int64_t t = T - k; t < T; ++t) {
        const std::vector<float> lg = fwd.forward_last_logits(cache, std::span<const int32_t>(&prompt[size_t(t)], 1));
        dp_worst = std::max(dp_worst, rel_rms(lg.data(), gpu_logits.data() + t * V, V));
        dp_agree += argmax_row(lg.data(), V) == argmax_row(gpu_logits.data() + t * V, V);
    }
    fmt::print("GPU decode vs prefill, last {} positions: worst rel RMS {:.3e}, top-1 equal {}/{}\n", k, dp_worst,
               dp_agree, k);
    // diagnostic: the whole prompt as single-token steps (decode kernels only: decode attention, the
    // fp32-state GDN step) against the CPU, to tell prefill-kernel error from the rest
    {
        cache.reset(fwd.stream());
        double sw_worst = 0, sw_last = 0;
        int64_t sw_agree = 0;
        for (int64_t t = 0; t < T; ++t) {
            const std::vector<float> lg = fwd.forward_last_logits(cache, std::span<const int32_t>(&prompt[size_t(t)], 1));
            const double r = rel_rms(lg.data(), cpu_logits.f32() + t * V, V);
            sw_worst = std::max(sw_worst, r);
            if (t == T - 1) sw_last = r;
            sw_agree += argmax_row(lg.data(), V) == argmax_row(cpu_logits.f32() + t * V, V);
        }
        fmt::print("diagnostic, GPU single-token steps vs CPU: last rel RMS {:.3e}, worst {:.3e}, top-1 {}/{}\n",
                   sw_last, sw_worst, sw_agree, T);
    }
    if (!(dp_worst < tol) || (strict && dp_agree != k)) ok = false;
    fmt::print("{}\n", ok ? "PASS" : "FAIL");
    Outcome out;
    out.cpu_ok = ok;
    out.graph_ok = graph_parity(fwd, prompt, n_gen);
    return out;
}

Outcome check_model(const std::string& path, const std::string& text_file, int64_t n_tokens, int64_t n_gen,
                    int64_t n_steps, double tol) {
    fmt::print("== {}\n", path);
    auto t0 = clock_type::now();
    LoadedModel m = load_model(path);
    const LlamaModel& model = *m.model;
    const ModelConfig& cfg = model.config();
    ModelText text = model_text_for(path, m.vocab, cfg.eos_token_ids);
    fmt::print("model: {} layers, plan {}, loaded in {:.1f} s\n", cfg.num_layers, model.plan().ratio_summary(),
               seconds_since(t0));
    // prompt: BOS + prose from 20 kB into the book (past the front matter)
    const std::string prose = read_file(text_file);
    std::vector<int32_t> prompt;
    if (text.bos_id >= 0) prompt.push_back(text.bos_id);
    const std::vector<int32_t> body = text.encoder->encode(prose.substr(std::min<size_t>(20000, prose.size() / 2),
                                                                        size_t(n_tokens) * 16));
    for (int32_t id : body) {
        if (int64_t(prompt.size()) >= n_tokens) break;
        prompt.push_back(id);
    }
    HYDRA_CHECK(int64_t(prompt.size()) == n_tokens, "{}: only {} prompt tokens", text_file, prompt.size());
    return check(model, text, prompt, n_gen, n_steps, tol, true);
}

// Random weights: matrices N(0, 0.5/sqrt(in)) so activations keep their scale, norms and fusion
// scales near 1, GDN gates in fla's init ranges.
void randomise(LlamaModel& model, uint64_t seed) {
    Rng rng(seed);
    for (const ArenaEntry& e : model.params().entries()) {
        Tensor t = model.params().get(e.name);
        float* p = t.f32();
        const int64_t n = t.numel();
        const std::string& nm = e.name;
        auto ends = [&](const char* suf) { return nm.size() >= std::strlen(suf) && nm.compare(nm.size() - std::strlen(suf), std::strlen(suf), suf) == 0; };
        if (ends("norm.weight") || ends("layernorm.weight") || ends("scale") || ends("o_norm.weight")) {
            for (int64_t i = 0; i < n; ++i) p[i] = float(1.0 + 0.1 * rng.normal());
        } else if (ends("A_log")) {
            for (int64_t i = 0; i < n; ++i) p[i] = float(std::log(1.0 + 15.0 * rng.uniform()));
        } else if (ends("dt_bias")) {
            for (int64_t i = 0; i < n; ++i) p[i] = float(-2.0 + rng.normal());
        } else if (ends("conv1d.weight")) {
            for (int64_t i = 0; i < n; ++i) p[i] = float(0.5 * rng.normal());
        } else if (ends(".bias")) {
            for (int64_t i = 0; i < n; ++i) p[i] = float(0.1 * rng.normal());
        } else {
            const double sd = e.shape.size() == 2 ? 0.5 / std::sqrt(double(e.shape[1])) : 0.02;
            for (int64_t i = 0; i < n; ++i) p[i] = float(sd * rng.normal());
        }
    }
}

int run_synthetic(int64_t n_tokens, int64_t n_gen, int64_t n_steps, double tol) {
    ModelConfig c;
    c.name = "synthetic";
    c.vocab_size = 260, c.hidden_size = 576, c.intermediate_size = 1536, c.num_layers = 4;
    c.num_heads = 9, c.num_kv_heads = 3, c.head_dim = 64, c.rope_dim = 64, c.max_position_embeddings = 8192;
    c.rope_theta = 100000.f, c.tie_word_embeddings = true;
    c.eos_token_ids = {256};  // the byte tokenizer's vocabulary (its decode checks ids)
    struct Case {
        std::string name;
        bool qwen;
        std::optional<PlanRequest> plan;
    };
    auto req = [](const std::string& gran, FusionKind fusion, const std::string& ratio) {
        PlanRequest r;
        r.select = "random";
        r.ratio = parse_ratio(ratio, "synthetic");
        r.granularity = gran;
        r.fusion = fusion;
        r.seed = 7;
        return r;
    };
    std::vector<Case> cases = {
        {"teacher", false, std::nullopt},
        {"hybrid kv 1:1 scale-norm", false, req("kv", FusionKind::ScaleNorm, "1:1")},
        {"hybrid kv 2:1 hymba", false, req("kv", FusionKind::Hymba, "2:1")},
        {"hybrid kv 1:2 la-only", false, req("kv", FusionKind::LaOnly, "1:2")},
        {"hybrid head 7:1 scale-norm", false, req("head", FusionKind::ScaleNorm, "7:1")},
        {"hybrid head 1:1 none", false, req("head", FusionKind::None, "1:1")},
        {"qwen-style teacher (bias, qk norm)", true, std::nullopt},
    };
    ModelText text = byte_model_text();
    text.stop_ids.clear();
    int failed = 0, graph_failed = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        ModelConfig cc = c;
        if (cases[i].qwen) cc.attention_bias = true, cc.qk_norm = true;
        std::optional<HybridPlan> plan;
        if (cases[i].plan) {
            PlanRequest r = *cases[i].plan;
            r.gdn.norm_eps = cc.rms_norm_eps;
            plan = build_plan(cc, r);
        }
        LlamaModel model(cc, plan ? &*plan : nullptr);
        randomise(model, 1000 + i);
        fmt::print("== synthetic {}: plan {}\n", cases[i].name, model.plan().ratio_summary());
        Rng rng(42 + i);
        std::vector<int32_t> prompt(static_cast<size_t>(n_tokens));
        for (int32_t& t : prompt) t = int32_t(rng.uniform() * double(cc.vocab_size - 1));
        const Outcome o = check(model, text, prompt, n_gen, n_steps, tol, false);
        failed += o.cpu_ok ? 0 : 1;
        graph_failed += o.graph_ok ? 0 : 1;
    }
    fmt::print("{} of {} synthetic models passed\n", int(cases.size()) - failed, cases.size());
    fmt::print("CUDA graphs vs eager: {} of {} synthetic models passed\n", int(cases.size()) - graph_failed,
               cases.size());
    return failed + graph_failed;
}

// --decode-timing: for each model (each MODEL and, for teachers, its 7:1 conversion with random kv groups;
// without MODEL random weights at SmolLM2-135M's shape) the graph check on a random prompt, then decode
// ms/token eager vs graphs at `lengths`. Returns the number of failures (graph check, greedy streams that
// part, graphs that did not run).
int run_decode_timing(const std::vector<std::string>& paths, const std::vector<int64_t>& lengths, int64_t steps,
                      int64_t warmup, int64_t n_tokens, int64_t n_gen) {
    std::vector<std::pair<std::string, std::unique_ptr<LlamaModel>>> models;
    auto add_hybrid = [&](const LlamaModel& teacher, const std::string& name, bool random_weights) {
        const ModelConfig& c = teacher.config();
        const HybridPlan plan = build_plan(c, bench::plan_request(c, "7:1", "kv", FusionKind::ScaleNorm, 1));
        std::unique_ptr<LlamaModel> h;
        if (random_weights) {
            h = std::make_unique<LlamaModel>(c, &plan);
            bench::randomise(*h, 22);
        } else {
            h = convert_to_hybrid(teacher, plan, ConversionOptions{});
        }
        models.emplace_back(fmt::format("{} 7:1 hybrid ({})", name, plan.ratio_summary()), std::move(h));
    };
    if (paths.empty()) {
        auto teacher = std::make_unique<LlamaModel>(bench::smollm2_135m_config());
        bench::randomise(*teacher, 21);
        const std::string name = "SmolLM2-135M shape (random weights)";
        add_hybrid(*teacher, name, true);
        models.emplace(models.begin(), name + " teacher", std::move(teacher));
    } else {
        for (const std::string& p : paths) {
            LoadedModel m = load_model(p);
            const std::string name = std::filesystem::path(p).filename().string();
            if (m.model->plan().is_all_fa()) add_hybrid(*m.model, name, false);
            models.emplace(models.end() - (m.model->plan().is_all_fa() ? 1 : 0), name, std::move(m.model));
        }
    }
    int failed = 0;
    std::vector<bench::DecodeTimingRow> rows;
    for (const auto& [name, model] : models) {
        fmt::print("== decode timing: {} (plan {})\n", name, model->plan().ratio_summary());
        {
            gpu::GpuTrainModel gm(*model, false);
            gpu::GpuForward fwd(gm);
            Rng rng(7);
            std::vector<int32_t> prompt(static_cast<size_t>(n_tokens));
            for (int32_t& t : prompt) t = int32_t(rng.uniform() * double(model->config().vocab_size - 1));
            failed += graph_parity(fwd, prompt, n_gen) ? 0 : 1;
        }
        for (const bench::DecodeTimingRow& r : bench::time_decode(*model, name, lengths, steps, warmup)) {
            if (r.equal != r.compared || !(r.graph_ms > 0)) {
                fmt::print("FAIL: {} at {} positions: greedy {}/{} equal, graph {:.3f} ms/token\n", r.model,
                           r.positions, r.equal, r.compared, r.graph_ms);
                ++failed;
            }
            rows.push_back(r);
        }
    }
    bench::print_decode_table(rows, steps);
    return failed;
}

}  // namespace

int main(int argc, char** argv) {
    int64_t n_tokens = 300, n_gen = 32, n_steps = 16, timing_steps = 200, timing_warmup = 10;
    double tol = 2e-2;
    std::string text_file = default_prose_dir() + "/austen_emma.txt", timing;
    std::vector<std::string> models;
    bool synthetic = false, parity = true;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fmt::print(stderr, "{} needs a value\n", a);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--tokens") n_tokens = std::stoll(next());
        else if (a == "--gen") n_gen = std::stoll(next());
        else if (a == "--steps") n_steps = std::stoll(next());
        else if (a == "--tol") tol = std::stod(next());
        else if (a == "--text") text_file = next();
        else if (a == "--synthetic") synthetic = true;
        else if (a == "--decode-timing") timing = next();
        else if (a == "--timing-steps") timing_steps = std::stoll(next());
        else if (a == "--timing-warmup") timing_warmup = std::stoll(next());
        else if (a == "--no-parity") parity = false;
        else models.push_back(a);
    }
    if (!synthetic && timing.empty() && (models.empty() || !parity)) {
        fmt::print(stderr,
                   "usage: gpu_forward_parity [--tokens N] [--gen N] [--steps N] [--tol X] [--text FILE] MODEL...\n"
                   "       gpu_forward_parity --synthetic [--tokens N]\n"
                   "       gpu_forward_parity [--no-parity] --decode-timing 1024,8192,32768 [--timing-steps 200] "
                   "[--timing-warmup 10] [MODEL...]\n");
        return 2;
    }
    int failed = 0;
    try {
        if (synthetic && parity) {
            failed += run_synthetic(n_tokens, n_gen, n_steps, tol);
        } else if (parity && !models.empty()) {
            int cpu_failed = 0, graph_failed = 0;
            for (const std::string& m : models) {
                const Outcome o = check_model(m, text_file, n_tokens, n_gen, n_steps, tol);
                cpu_failed += o.cpu_ok ? 0 : 1;
                graph_failed += o.graph_ok ? 0 : 1;
            }
            fmt::print("{} of {} models passed\n", int(models.size()) - cpu_failed, models.size());
            fmt::print("CUDA graphs vs eager: {} of {} models passed\n", int(models.size()) - graph_failed,
                       models.size());
            failed += cpu_failed + graph_failed;
        }
        if (!timing.empty())
            failed += run_decode_timing(models, parse_lengths(timing), timing_steps, timing_warmup, n_tokens, n_gen);  // "1k,8k,32k"
    } catch (const std::exception& e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
    return failed == 0 ? 0 : 1;
}
