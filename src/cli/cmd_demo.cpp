// `hydra demo [MODEL] [--out DIR] [--from STEP] [key=value ...]`: the HydraHead method on the default
// model (SmolLM2-135M) in a few minutes of a 2-core CPU (pipeline/demo_runner.h): head scores,
// the causal ablation check, the 7:1 conversion and its KV cache, a short recovery whose held-out KL
// falls, what a long context costs on this CPU, and a pointer to the full-budget GPU report; resumable step
// by step. The README's main command.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/gpu_generator.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "io/dir_kind.h"
#include "pipeline/demo_runner.h"
#ifdef HYDRA_WITH_CUDA
#include "gpu/gpu_train_engine.h"
#endif

namespace hydra::cli {

namespace {

struct DemoOptions {
    std::string model = default_model_path();
    std::vector<std::string> overrides;
    std::string out = "runs/demo";
    std::string from;
    int threads = 0;
    bool force = false;
};

}  // namespace

void register_demo(CLI::App& app) {
    auto* o = new DemoOptions;
    auto* cmd = app.add_subcommand(
        "demo",
        "The method on the default model in a few minutes of a 2-core CPU: score heads, ablate the "
        "top-scored "
        "eighth vs random ones, convert 7:1 (KV cache shrink), short recovery (held-out KL before/after)");
    cmd->add_option("MODEL", o->model, "the full-attention teacher: a .gguf file or a model directory")
        ->capture_default_str();
    cmd->add_option("--set", o->overrides,
                    "key=value settings (the keys of hydra pipeline, e.g. score.samples=4 "
                    "distill.run.steps=8; see demo_config.json of a run)");
    cmd->add_option("--out", o->out, "output directory")->capture_default_str();
    cmd->add_flag("--force", o->force, "write into --out even when it is not a hydra demo run (deletes it)");
    cmd->add_option("--from", o->from,
                    fmt::format("recompute this step and all later ones: {}", fmt::join(demo_steps(), ", ")));
    add_threads_option(*cmd, o->threads);
    cmd->callback([o] {
        apply_threads(o->threads);
        PipelineConfig config = demo_config(o->model);
        for (const std::string& kv : o->overrides) {
            HYDRA_CHECK(kv.find('=') != std::string::npos, "--set '{}': expected key=value", kv);
            config.apply_override(kv);
        }
        const std::filesystem::path out = normalize_dir_path(o->out, "--out");
        const DirLock lock = claim_run_dir(out, "demo_config.json", o->force);
        PipelineHooks hooks;
        std::unique_ptr<ProgressBar> bar;
        std::string current;
        const bool log_lines = !isatty(2);  // the bar is silent off a terminal: one line per item instead
        const auto t0 = std::chrono::steady_clock::now();
        hooks.progress = [&](const std::string& label, int64_t done, int64_t total,
                             const std::string& status) {
            if (log_lines) {
                fmt::print(stderr, "[{} {}/{} {:.0f} s] {}\n", label, done, total,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                           status);
                return;
            }
            if (label != current || !bar) {
                if (bar) bar->finish();
                bar = std::make_unique<ProgressBar>(label, total, "item");
                current = label;
            }
            bar->update(done, status);
            if (done == total) bar->finish(status), bar.reset();
        };
        hooks.synthetic_rows = [](const TrainConfig& c) { return synthetic_rows_for(c); };
#ifdef HYDRA_WITH_CUDA
        hooks.train_engine = gpu::make_gpu_train_engine;
        hooks.generator = [](const LlamaModel& m, const ModelText& t, int64_t capacity,
                             int64_t context_limit) { return gpu_generator(m, t, capacity, context_limit); };
#endif
        const DemoResult r = run_demo(config, out.string(), o->from, hooks);
        if (bar) bar->finish();
        fmt::print("\n{}\nreport: {} ({:.1f} min)\n", r.summary, r.report_path, r.seconds / 60.0);
    });
}

}  // namespace hydra::cli
