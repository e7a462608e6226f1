// `hydra ppl MODEL --text FILE [--ctx N]`: perplexity on a text file, in windows of N tokens.
// `hydra ppl MODEL --teacher T (--text FILE | --shards DIR)`: how close MODEL stays to the teacher it was
// converted from on held-out text: KL(teacher || model) per token, top-1 agreement, both perplexities and
// their ratio, with 95% bootstrap intervals over windows (eval/heldout_metrics.h, the numbers of the
// pipeline report's held-out columns), on the CPU or with --device cuda.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/gpu_generator.h"
#include "cli/model_load_report.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "eval/heldout_input.h"
#include "eval/heldout_metrics.h"
#include "eval/model_text_encoder.h"
#include "eval/perplexity.h"
#include "io/atomic_dir.h"
#include "pipeline/pipeline_steps.h"
#include "tokenizer/bpe_tokenizer.h"
#ifdef HYDRA_WITH_CUDA
#include "gpu/gpu_logits.h"
#endif

namespace hydra::cli {

namespace {
struct PplOptions {
    std::string model = default_model_path();
    std::string text;
    std::string teacher;
    std::string shards;
    std::string json_out;
    std::string device = "cpu";
    int64_t ctx = 512;
    int64_t max_windows = 0;
    int64_t tokens = 0;
    int64_t bootstrap = 1000;
    int threads = 0;
};

// Positions past a model's context are extrapolation (and memory): refused. RoPE scaling declares the
// scaled context in max_position_embeddings, except dynamic NTK, which scales past it by factor.
void check_context(const LlamaModel& model, const std::string& path, int64_t ctx) {
    const ModelConfig& mc = model.config();
    const int64_t trained = mc.rope_scaling.type == RopeType::Dynamic
                                ? int64_t(double(mc.max_position_embeddings) * mc.rope_scaling.factor)
                                : mc.max_position_embeddings;
    HYDRA_CHECK(trained <= 0 || ctx <= trained,
                "--ctx {}: above the model's context of {} tokens ({}); use --ctx {} or less", ctx, trained,
                path, trained);
}

std::string interval(const Interval& ci, int digits) {
    return fmt::format("[{:.{}f}, {:.{}f}]", ci.lo, digits, ci.hi, digits);
}

void run_perplexity(const PplOptions& o) {
    const std::string text = read_text_file(o.text, "the text to score");
    HYDRA_CHECK(!text.empty(), "{}: the text file is empty", o.text);
    LoadedModel m = load_model_reported(o.model);
    HYDRA_CHECK(m.vocab.has_value(), "{}: the model has no tokenizer", o.model);
    check_context(*m.model, o.model, o.ctx);
    Tokenizer tok(*m.vocab);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = tok.encode(text, false);
    fmt::print(stderr, "{}: {} bytes -> {} tokens\n", o.text, text.size(), ids.size());
    int64_t total = (int64_t(ids.size()) + o.ctx - 1) / o.ctx;
    if (o.max_windows > 0) total = std::min(total, o.max_windows);
    ProgressBar bar("ppl", total, "win");
    PerplexityResult r =
        perplexity(*m.model, ids, o.ctx, o.max_windows,
                   [&](int64_t done, int64_t, double p) { bar.update(done, fmt::format("ppl {:.3f}", p)); });
    bar.finish(fmt::format("ppl {:.3f}", r.ppl()));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print(
        "perplexity {:.4f} over {} predicted tokens in {} windows of {} (ctx {}), {:.1f} s, {:.0f} tok/s\n",
        r.ppl(), r.predicted, r.windows, o.ctx, o.ctx, s, double(r.predicted) / s);
}

void run_agreement(const PplOptions& o) {
    if (o.device == "cuda") require_cuda_build("--device cuda");  // before any model is loaded
    LoadedModel m = load_model_reported(o.model);
    LoadedModel t = load_model_reported(o.teacher);
    const ModelConfig &mc = m.model->config(), &tc = t.model->config();
    HYDRA_CHECK(
        mc.vocab_size == tc.vocab_size,
        "--teacher {}: its vocabulary has {} tokens, the model's ({}) {}: the KL needs the same vocabulary",
        o.teacher, tc.vocab_size, o.model, mc.vocab_size);
    if (m.vocab && t.vocab)
        HYDRA_CHECK(
            m.vocab->tokens == t.vocab->tokens,
            "--teacher {}: its tokenizer spells tokens differently from the model's ({}): the KL compares "
            "distributions over the same tokens",
            o.teacher, o.model);
    check_context(*m.model, o.model, o.ctx);
    check_context(*t.model, o.teacher, o.ctx);
    const ModelText text = model_text_for(o.model, m.vocab, mc.eos_token_ids);
    const HeldoutInput in =
        heldout_input_windows(o.text, o.shards, *text.encoder, o.ctx,
                              o.tokens > 0 ? o.tokens : std::numeric_limits<int64_t>::max() / 2);
    const std::vector<std::vector<int32_t>>& windows = in.windows;
    const std::string& source = in.source;
    HYDRA_CHECK(!windows.empty(), "{}: no window of at least 2 tokens", source);
    int64_t predicted = 0;
    for (const auto& w : windows) predicted += int64_t(w.size()) - 1;
    fmt::print(stderr, "{}: {} windows of up to {} tokens, {} predicted tokens\n", source, windows.size(),
               o.ctx, predicted);

    WindowStatsFn stats;
    if (o.device == "cuda") {
#ifdef HYDRA_WITH_CUDA
        stats = gpu::make_gpu_window_stats_fn(*t.model, m.model.get(), o.ctx);  // windows feed ctx tokens
#endif
    } else {
        stats = host_window_stats_fn(cpu_logits_fn(*t.model), cpu_logits_fn(*m.model), tc.vocab_size);
    }
    BootstrapOptions boot;
    boot.resamples = o.bootstrap;
    const auto t0 = std::chrono::steady_clock::now();
    ProgressBar bar("agreement", int64_t(windows.size()), "win");
    const HeldoutMetrics hm =
        heldout_metrics(stats, windows, boot, [&](int64_t done, int64_t) { bar.update(done, ""); });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bar.finish(fmt::format("{:.1f} s", s));
    fmt::print("KL(teacher || model) {:.4f} {} nats/token\n", hm.kl, interval(hm.kl_ci, 4));
    fmt::print("top-1 agreement      {:.4f} {}\n", hm.top1, interval(hm.top1_ci, 4));
    fmt::print("perplexity           {:.4f} {} (teacher {:.4f} {})\n", hm.ppl, interval(hm.ppl_ci, 4),
               hm.teacher_ppl, interval(hm.teacher_ppl_ci, 4));
    fmt::print("perplexity / teacher {:.4f} {}\n", hm.ppl_ratio, interval(hm.ppl_ratio_ci, 4));
    fmt::print(
        "{} predicted tokens in {} windows of up to {}, 95% bootstrap intervals over windows ({} resamples), "
        "{:.1f} s on the {}\n",
        hm.tokens, hm.windows, o.ctx, o.bootstrap, s, o.device == "cuda" ? "GPU" : "CPU");
    if (!o.json_out.empty()) {
        nlohmann::json j = heldout_metrics_json(hm);
        j["model"] = o.model;
        j["teacher"] = o.teacher;
        j["source"] = source;
        j["window"] = o.ctx;
        j["device"] = o.device;
        write_json(o.json_out, j);  // atomic: a temporary file renamed over the old one
        fmt::print(stderr, "wrote {}\n", o.json_out);
    }
}
}  // namespace

void register_ppl(CLI::App& app) {
    auto* o = new PplOptions;
    auto* cmd = app.add_subcommand(
        "ppl",
        "Perplexity of a model on a text file; with --teacher, its KL and top-1 agreement with that teacher");
    cmd->add_option("MODEL", o->model, "a .gguf file or a model directory")->capture_default_str();
    auto* text = cmd->add_option("--text", o->text, "UTF-8 text file to score");
    auto* shards =
        cmd->add_option("--shards", o->shards,
                        "with --teacher: a `hydra corpus` (or token shards) directory; its held-out split");
    text->excludes(shards);
    shards->excludes(text);
    cmd->add_option("--ctx", o->ctx, "window length in tokens")->capture_default_str()->check(CLI::Range(2, 1 << 20));
    auto* max_windows =
        cmd->add_option("--max-windows", o->max_windows, "score at most this many windows (0 = all)")
            ->check(at_least(0));
    auto* teacher =
        cmd->add_option("--teacher", o->teacher,
                        "the model MODEL was converted or distilled from: KL(teacher || MODEL), top-1 "
                        "agreement and both perplexities, with 95% intervals");
    auto* tokens =
        cmd->add_option("--tokens", o->tokens, "with --teacher: predicted tokens to score (0 = all)")
            ->check(at_least(0));
    auto* bootstrap = cmd->add_option("--bootstrap", o->bootstrap, "with --teacher: bootstrap resamples")
                          ->capture_default_str()
                          ->check(CLI::Range(int64_t(1), int64_t(1000000)));
    auto* json_out =
        cmd->add_option("--json", o->json_out, "with --teacher: also write the figures to this JSON file");
    auto* device =
        cmd->add_option("--device", o->device, "with --teacher: cpu | cuda (the GPU forward of src/gpu)")
            ->capture_default_str()
            ->check(CLI::IsMember({"cpu", "cuda"}));
    for (auto* opt : {shards, tokens, bootstrap, json_out, device}) opt->needs(teacher);
    max_windows->excludes(teacher);
    add_threads_option(*cmd, o->threads);
    cmd->callback([o] {
        apply_threads(o->threads);
        HYDRA_CHECK(!o->text.empty() || !o->shards.empty(), "ppl: give --text FILE{}",
                    o->teacher.empty() ? "" : " or --shards DIR");
        if (o->teacher.empty())
            run_perplexity(*o);
        else
            run_agreement(*o);
    });
}

}  // namespace hydra::cli
