// `hydra score-heads MODEL --out scores.json [--method ...] [--tasks ...] [--lengths ...] [--samples N]
// [--heatmap heads.png] [--device cpu|cuda]`: scores every query head of the teacher by activation /
// attribution / path patching and the copy-paste retrieval score on RULER task pairs
// (interp/score_heads.h), on the CPU or the GPU (a scoring backend: interp/scoring_backend.h,
// cli/gpu_scoring_backend.h), and writes the scores.json that `hydra convert --select scores --scores
// FILE` reads. Prints the wall time and where it went (per stage, and the GPU's pass counts).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/gpu_generator.h"
#include "cli/model_load_report.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "eval/eval_runner.h"
#include "eval/task_common.h"
#include "eval/task_registry.h"
#include "interp/score_heads.h"

#ifdef HYDRA_WITH_CUDA
#include "cli/gpu_scoring_backend.h"
#endif

namespace hydra::cli {

namespace {

struct ScoreHeadsCliOptions {
    std::string model = default_model_path();
    std::string out;
    std::string method = "activation,attribution";
    std::string tasks = "niah_single_2,niah_multikey_1";
    std::string lengths = "1k";
    int64_t samples = 4;
    uint64_t seed = 1;
    int64_t receivers = 8;
    std::string attribution_positions = "answer";
    int64_t batch = 0;  // 0: 96 on the CPU, 1024 on the GPU
    std::string device = "cpu";
    int64_t retrieval_max_new = 64;
    double lambda = 0.5;
    double min_gap = 0.5;
    std::string format = "auto";
    std::string heatmap;
    int threads = 0;
};

// GPU batches are wide: a patched row costs little beside a layer call's fixed cost, and all 2 x 270
// copies of a SmolLM2-135M pair fit one batch.
constexpr int64_t kCpuBatch = 96, kGpuBatch = 1024;

void print_summary(const ScoreReport& r, int64_t H, double wall) {
    const ScoreSet& s = r.scores;
    double staged = 0;
    std::string stages;
    for (const auto& [stage, sec] : r.seconds) {
        staged += sec;
        stages += fmt::format(" {} {:.1f} s ({:.0f}%),", stage, sec, 100.0 * sec / std::max(wall, 1e-9));
    }
    fmt::print("time: {:.1f} s wall:{} other {:.1f} s\n", wall, stages, std::max(0.0, wall - staged));
    int64_t used = 0;
    for (const PairRecord& p : r.pairs) used += p.used ? 1 : 0;
    if (!r.pairs.empty()) {
        fmt::print("pairs: {} used of {}\n", used, r.pairs.size());
        for (const char* stage : {"forward", "activation", "attribution", "path"})
            if (r.seconds.count(stage)) {
                const double n = std::string(stage) == "forward" ? double(r.pairs.size())
                                                                 : double(std::max<int64_t>(used, 1));
                fmt::print("  {:<12} {:8.2f} s per pair (CPU {:.2f} s)\n", stage, r.seconds.at(stage) / n,
                           r.cpu_seconds.at(stage) / n);
            }
    }
    if (!r.trials.empty()) {
        int64_t ok = 0;
        for (const TrialRecord& t : r.trials) ok += t.correct ? 1 : 0;
        fmt::print("retrieval: {} of {} trials correct, {:.2f} s per trial (CPU {:.2f} s)\n", ok,
                   r.trials.size(), r.seconds.at("retrieval") / double(r.trials.size()),
                   r.cpu_seconds.at("retrieval") / double(r.trials.size()));
    }
    if (s.methods.count("activation") && s.methods.count("attribution")) {
        const double rho = spearman(s.methods.at("activation").heads, s.methods.at("attribution").heads);
        fmt::print("Spearman(activation, attribution) over {} heads: {:.3f}\n", s.layers * s.heads, rho);
    }
    std::string top;
    for (const auto& [l, h] : top_heads(s.aggregate, H, 12))
        top += fmt::format(" L{}.H{}={:.2f}", l, h, s.aggregate[size_t(l * H + h)]);
    fmt::print("top heads:{}\n", top);
}

}  // namespace

void register_score_heads(CLI::App& app) {
    auto* o = new ScoreHeadsCliOptions;
    auto* cmd = app.add_subcommand("score-heads",
                                   "Score attention heads for retrieval (patching, attribution, "
                                   "copy-paste) and write scores.json for hydra convert");
    cmd->add_option("MODEL", o->model, "the all-FA teacher: a .gguf file or a model directory")
        ->capture_default_str();
    cmd->add_option("--out", o->out, "scores.json to write")->required();
    cmd->add_option("--method", o->method, "activation|attribution|path|retrieval|all, comma-separated")
        ->capture_default_str();
    cmd->add_option("--tasks", o->tasks,
                    "tasks, each TASK or TASK:CORRUPTION (value-swap|needle-removed|key-swap)")
        ->capture_default_str();
    cmd->add_option("--lengths", o->lengths, "prompt lengths in tokens, e.g. 1k,2k")->capture_default_str();
    cmd->add_option("--samples", o->samples, "pairs (and retrieval samples) per task and length")
        ->capture_default_str();
    cmd->add_option("--seed", o->seed, "task seed")->capture_default_str();
    cmd->add_option("--receivers", o->receivers, "path patching: receiver heads (top by activation patching)")
        ->capture_default_str();
    cmd->add_option("--attribution-positions", o->attribution_positions,
                    "answer (the patched position, like activation patching) or all positions")
        ->capture_default_str();
    cmd->add_option("--batch", o->batch, "patched copies per batch (0: 96 on the CPU, 1024 on the GPU)")
        ->capture_default_str();
    cmd->add_option("--device", o->device, "cpu | cuda (the GPU layer, cli/gpu_scoring_backend.h)")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_option("--retrieval-max-new", o->retrieval_max_new, "retrieval: decode at most this many tokens")
        ->capture_default_str();
    cmd->add_option("--lambda", o->lambda, "max-aware mean over tasks: lambda max + (1 - lambda) mean")
        ->capture_default_str();
    cmd->add_option("--min-gap", o->min_gap,
                    "skip pairs whose clean - corrupted logit difference is below this")
        ->capture_default_str();
    cmd->add_option("--format", o->format, "task prompt format: auto|raw|chatml")->capture_default_str();
    cmd->add_option("--heatmap", o->heatmap, "write a layers x heads PNG of the aggregate scores");
    add_threads_option(*cmd, o->threads);
    cmd->callback([o] {
        apply_threads(o->threads);
        ScoreHeadsOptions so;
        so.methods = parse_methods(o->method);
        so.lengths = parse_lengths(o->lengths);
        so.samples = o->samples;
        so.seed = o->seed;
        so.receivers = o->receivers;
        HYDRA_CHECK(o->attribution_positions == "answer" || o->attribution_positions == "all",
                    "--attribution-positions: '{}' is not answer or all", o->attribution_positions);
        so.attribution_positions =
            o->attribution_positions == "all" ? AttributionPositions::All : AttributionPositions::Answer;
        HYDRA_CHECK(o->batch >= 0, "--batch must be at least 1, or 0 for the device's default (got {})",
                    o->batch);
        so.max_batch = o->batch > 0 ? o->batch : (o->device == "cuda" ? kGpuBatch : kCpuBatch);
        if (o->device == "cuda") require_cuda_build("--device cuda");  // before any model is loaded
        so.retrieval_max_new_tokens = o->retrieval_max_new;
        so.config.lambda = o->lambda;
        so.config.min_gap = o->min_gap;
        const std::vector<TaskSpec> specs = parse_task_specs(o->tasks);
        std::string names;
        for (const TaskSpec& t : specs) names += (names.empty() ? "" : ",") + t.task;
        parse_task_list(names);  // unknown task names fail here, listing the known ones
        TaskOptions topt;
        topt.format = parse_prompt_format(o->format);

        LoadedModel m = load_model_reported(o->model);
        check_score_options(m.model->config(), so);  // before any work: bad lengths fail fast
        auto ctx = std::make_shared<TaskContext>();
        ctx->text = model_text_for(o->model, m.vocab, m.model->config().eos_token_ids);
        ctx->options = topt;
        std::vector<std::unique_ptr<TaskGenerator>> gens;
        std::vector<ScoreTask> tasks;
        for (const TaskSpec& t : specs) {
            gens.push_back(make_task(t.task, ctx));
            ScoreTask st{gens.back().get(), t.corruption};
            const std::vector<std::string> c = gens.back()->corruptions();
            if (st.corruption.empty() && !c.empty()) st.corruption = c[0];
            if (!st.corruption.empty())
                HYDRA_CHECK(std::find(c.begin(), c.end(), st.corruption) != c.end(),
                            "--tasks: task '{}' has no '{}' pairs (it has: {})", t.task, st.corruption,
                            c.empty() ? std::string("none") : fmt::format("{}", fmt::join(c, ", ")));
            tasks.push_back(st);
        }

        const auto t0 = std::chrono::steady_clock::now();
        std::unique_ptr<ScoringBackend> backend;
#ifdef HYDRA_WITH_CUDA
        if (o->device == "cuda") backend = std::make_unique<gpu::GpuScoringBackend>(*m.model);
#endif
        if (!backend) backend = std::make_unique<CpuScoringBackend>(*m.model);
        const double setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        // HYDRA_SCORE_PROFILE=1: GPU time per layer section (events around every op: a little slower)
        std::map<std::string, double> gpu_ms;
        std::function<void()> collect_profile = [] {};
#ifdef HYDRA_WITH_CUDA
        const char* prof_env = std::getenv("HYDRA_SCORE_PROFILE");
        if (auto* g = dynamic_cast<gpu::GpuScoringBackend*>(backend.get());
            g && prof_env && std::string(prof_env) != "0") {
            g->enable_profile();
            collect_profile = [g, &gpu_ms] {
                for (const auto& [k, v] : g->collect_profile()) gpu_ms[k] += v;
            };
        }
#endif
        fmt::print("scoring on {} (batch {}; setup {:.1f} s)\n", backend->device(), so.max_batch, setup);
        ProgressBar bar("score", 1, "item");
        bool started = false;
        const bool log_lines = !isatty(2);  // the bar is silent off a terminal: log one line per item instead
        ScoreReport report = score_heads(
            *backend, ctx->text, tasks, so, [&](int64_t done, int64_t total, const std::string& s) {
                collect_profile();
                if (!started) bar = ProgressBar("score", total, "item"), started = true;
                bar.update(done, s);
                if (log_lines)
                    fmt::print(stderr, "[{}/{} {:.0f} s] {}\n", done, total,
                               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                               s);
            });
        report.model_source = o->model;
        bar.finish("done");
        write_scores_json(o->out, m.model->config(), report);
        const ModelConfig& c = m.model->config();
        if (!o->heatmap.empty())
            write_scores_heatmap(o->heatmap, report.scores.aggregate, c.num_layers, c.num_heads,
                                 fmt::format("head scores: {} ({})", c.name, o->method), "combined score",
                                 (c.num_layers * c.num_heads + 7) / 8);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        print_summary(report, c.num_heads, wall);
#ifdef HYDRA_WITH_CUDA
        if (const auto* g = dynamic_cast<const gpu::GpuScoringBackend*>(backend.get())) {
            const auto& n = g->counters();
            fmt::print(
                "GPU passes: {} prompt tokens forward, {} backward, {} patched single-token layer rows, {} "
                "decode steps\n",
                n.prompt_tokens, n.backward_tokens, n.patched_rows, n.decode_steps);
        }
#endif
        fmt::print("wrote {}{} in {:.1f} s\n", o->out, o->heatmap.empty() ? "" : " and " + o->heatmap, wall);
    });
}

}  // namespace hydra::cli
