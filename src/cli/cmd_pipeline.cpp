// `hydra pipeline [CONFIG] [--preset NAME] [--out DIR] [--from STEP] [key=value ...]`: the whole
// HydraHead job (teacher, head scores, conversion of every variant, the three transfer stages,
// evaluation, report) from one config, resumable step by step (see pipeline/pipeline_runner.h).
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/gpu_generator.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/dir_kind.h"
#include "io/dir_lock.h"
#include "pipeline/pipeline_runner.h"
#include "train/train_config.h"
#include "train/worker_launcher.h"
#ifdef HYDRA_WITH_CUDA
#include "gpu/gpu_logits.h"
#include "gpu/gpu_train_engine.h"
#endif

namespace hydra::cli {

namespace {

struct PipelineOptions {
    std::vector<std::string> positional;
    std::string preset = "tiny-cpu";
    std::string out;
    std::string from;
    std::string device;  // empty: the config's
    int threads = 0;
    int gpus = 0;  // >= 1: every training stage runs as `hydra train ... --gpus N` in its own process
    bool force = false;
};

}  // namespace

DirLock claim_run_dir(const std::filesystem::path& out, const std::string& marker, bool force) {
    DirLock lock = DirLock::acquire(out);
    std::error_code ec;
    const bool exists = std::filesystem::exists(std::filesystem::symlink_status(out, ec));
    const bool ours = std::filesystem::is_directory(out, ec) &&
                      (std::filesystem::is_empty(out, ec) || std::filesystem::exists(out / marker, ec));
    if (exists && !ours) {
        HYDRA_CHECK(
            force,
            "--out: {} exists and is not a hydra {} run (no {}); refusing to write into files hydra did "
            "not write (choose another --out, or pass --force to delete it)",
            out.string(), marker == "pipeline_config.json" ? "pipeline" : "demo", marker);
        std::filesystem::remove_all(out, ec);
        HYDRA_CHECK(!ec, "--out --force: cannot delete {}: {}", out.string(), ec.message());
        fmt::print(stderr, "hydra: --force: deleted {}\n", out.string());
    }
    return lock;
}

namespace {

// The command line of one training stage under --gpus N (argv[0] is hydra's name; run_self runs this
// executable): a fresh stage reads its config file and writes DIR, a resumed one continues DIR's run.
std::vector<std::string> stage_process_command(const std::string& config_file, const std::string& dir,
                                               bool resume, const std::string& device, int gpus,
                                               int64_t steps) {
    std::vector<std::string> argv = {"hydra", "train"};
    if (resume) {
        // the run keeps the config saved with it, but for its step count (the pipeline's may have grown)
        argv.insert(argv.end(), {"--resume", dir, "--steps", std::to_string(steps)});
    } else {
        argv.insert(argv.end(), {config_file, "--out", dir});
    }
    argv.insert(argv.end(), {"--device", device, "--gpus", std::to_string(gpus)});
    return argv;
}

// `--gpus N`: the stage's config beside its directory (DIR.train_config.json, kept as the record of what
// ran), then `hydra train` over N GPUs in a process of its own, which the pipeline waits for.
void run_stage_process(const TrainConfig& tc, const std::string& dir, bool resume, int gpus) {
    const std::string config_file = dir + ".train_config.json";
    if (!resume) write_text_file(config_file, tc.to_json().dump(2) + "\n");
    const std::vector<std::string> argv =
        stage_process_command(config_file, dir, resume, tc.device, gpus, tc.steps);
    fmt::print(stderr, "== {}\n", fmt::join(argv, " "));
    const int code = run_self(argv);
    HYDRA_CHECK(code == 0, "{}: `{}` exited with status {}", dir, fmt::join(argv, " "), code);
}

void run(const PipelineConfig& config, const std::string& out_arg, const std::string& from, bool force,
         int gpus) {
    const std::filesystem::path out = normalize_dir_path(out_arg, "--out");
    const DirLock lock = claim_run_dir(out, "pipeline_config.json", force);
    PipelineHooks hooks;
    std::unique_ptr<ProgressBar> bar;
    std::string current;
    hooks.progress = [&](const std::string& label, int64_t done, int64_t total, const std::string& status) {
        if (label != current || !bar) {
            if (bar) bar->finish();
            bar =
                std::make_unique<ProgressBar>(label, total, label.rfind("eval", 0) == 0 ? "sample" : "step");
            current = label;
        }
        bar->update(done, status);
        if (done == total) {
            bar->finish(status);
            bar.reset();
        }
    };
    hooks.synthetic_rows = [](const TrainConfig& c) { return synthetic_rows_for(c); };
#ifdef HYDRA_WITH_CUDA
    // device = cuda: the CUDA training step and GPU decoding (the runner refuses cuda without them)
    hooks.train_engine = gpu::make_gpu_train_engine;
    hooks.generator = [](const LlamaModel& m, const ModelText& t, int64_t capacity, int64_t context_limit) {
        return gpu_generator(m, t, capacity, context_limit);
    };
    hooks.window_stats = [](const LlamaModel& teacher, const LlamaModel* student, int64_t max_positions) {
        return gpu::make_gpu_window_stats_fn(teacher, student, max_positions);
    };
#endif
    if (gpus >= 1) {
        HYDRA_CHECK(gpus == 1 || config.device == "cuda",
                    "--gpus {} trains on the GPUs: give --device cuda (or device = \"cuda\" in the config)",
                    gpus);
        hooks.run_stage = [gpus](const TrainConfig& tc, const std::string& dir, bool resume) {
            run_stage_process(tc, dir, resume, gpus);
        };
    }
    const PipelineResult r = run_pipeline(config, out.string(), from, hooks);
    if (bar) bar->finish();
    fmt::print("\n{}\nreport: {} ({:.1f} min)\n", r.table, r.report_path, r.seconds / 60.0);
}

}  // namespace

void register_pipeline(CLI::App& app) {
    auto* o = new PipelineOptions;
    auto* cmd = app.add_subcommand("pipeline",
                                   "Teacher -> head scores -> convert -> align -> distill -> long "
                                   "context -> evaluate -> report, for every variant of a config");
    cmd->add_option("args", o->positional,
                    "an optional CONFIG file (.json or .toml), then key=value overrides");
    std::string presets;
    for (const auto& n : PipelineConfig::preset_names()) presets += (presets.empty() ? "" : ", ") + n;
    cmd->add_option("--preset", o->preset, "start from a preset: " + presets)->capture_default_str();
    cmd->add_option("--out", o->out, "output directory (default: runs/<preset>)");
    cmd->add_flag("--force", o->force,
                  "write into --out even when it is not a hydra pipeline run (deletes it)");
    cmd->add_option("--from", o->from,
                    "recompute this step and all later ones: teacher, score, convert, align, "
                    "distill, longctx, eval, report");
    cmd->add_option("--device", o->device,
                    "cpu | cuda: where training and evaluation run (default: the config's "
                    "device; smollm2-gpu: cuda)");
    add_threads_option(*cmd, o->threads);
    cmd->add_option(
           "--gpus", o->gpus,
           "run every training stage as `hydra train --gpus N` in a process of its own (data parallel "
           "over N GPUs of this host; 1: one process per stage on one device)")
        ->check(CLI::Range(1, 1024));
    cmd->callback([o] {
        apply_threads(o->threads);
        PipelineConfig config = PipelineConfig::preset(o->preset);
        for (size_t i = 0; i < o->positional.size(); ++i) {
            const std::string& arg = o->positional[i];
            if (arg.find('=') != std::string::npos) {
                config.apply_override(arg);
            } else {
                HYDRA_CHECK(i == 0,
                            "'{}': only the first argument may be a config file; overrides are key=value",
                            arg);
                config.apply(load_config_file(arg), arg);
            }
        }
        if (!o->device.empty()) config.device = o->device;
        run(config, o->out.empty() ? "runs/" + o->preset : o->out, o->from, o->force, o->gpus);
    });
}

}  // namespace hydra::cli
