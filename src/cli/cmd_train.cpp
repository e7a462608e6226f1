// `hydra train [CONFIG] [--preset NAME] [--steps N] [--out DIR] [--resume DIR] [key=value ...]`:
// trains a llama-family model from scratch on the prose cache, or runs one HydraHead transfer stage
// (stage.kind = align | distill | longctx); `hydra distill CONFIG` is the same command for stages
// only (see train/trainer.h).
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/data_parallel.h"
#include "cli/gpu_generator.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "eval/synthetic_mixer.h"
#include "eval/task_registry.h"
#include "io/atomic_dir.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#ifdef HYDRA_WITH_CUDA
#include "gpu/gpu_train_engine.h"
#endif

namespace hydra::cli {

namespace {
struct TrainOptions {
    std::vector<std::string> positional;  // [CONFIG] then key=value overrides
    std::string preset;
    int64_t steps = 0;
    std::string out;
    std::string resume;
    std::string device;  // empty: run.device of the (effective) config
    bool list_keys = false;
    bool force = false;
    int gpus = 0;  // --gpus (0: one process unless RANK / WORLD_SIZE are set)
};
}  // namespace

DataLoader::Generator synthetic_rows_for(const TrainConfig& c) {
    if (c.synthetic_fraction <= 0) return {};
    const ModelText text = c.tokenizer == "byte" ? byte_model_text() : model_text_for(c.tokenizer);
    for (const std::string& t : c.synthetic_tasks)
        if (t != "repeat") parse_task_list(t);  // clear error for unknown names ("repeat": training-only copying rows)
    return synthetic_task_mixer(text, training_task_options(text), c.synthetic_tasks, c.seq_len);
}

namespace {

void register_train_like(CLI::App& app, bool stages_only) {
    auto* o = new TrainOptions;
    auto* cmd = stages_only ? app.add_subcommand("distill", "Run one HydraHead transfer stage (stage.kind = align, "
                                                            "distill or longctx) from a CONFIG file")
                            : app.add_subcommand("train", "Train a model from scratch or run a transfer stage (or "
                                                          "resume a run)");
    cmd->add_option("args", o->positional, "an optional CONFIG file (.json or .toml), then key=value overrides");
    cmd->add_option("--preset", o->preset, "start from a preset: tiny-cpu, test-micro");
    cmd->add_option("--steps", o->steps, "stop after this many optimizer steps (run.steps)")
        ->check(at_least(1));
    cmd->add_option("--out", o->out, "checkpoint directory (default: runs/train, or the --resume directory)");
    cmd->add_option("--resume", o->resume, "continue the run saved in this checkpoint directory");
    cmd->add_option("--device", o->device, "cpu | cuda: where the training step runs (default: run.device)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_flag("--force", o->force,
                  "replace --out even when it is not a hydra checkpoint (deletes what it holds)");
    cmd->add_flag("--list-keys", o->list_keys, "print every config key and its default, then exit");
    add_gpus_option(*cmd, o->gpus);
    cmd->callback([o, stages_only] {
        if (o->list_keys) {
            fmt::print("{}\n", TrainConfig().to_json().dump(2));
            return;
        }
        TrainConfig config = o->preset.empty() ? TrainConfig() : TrainConfig::preset(o->preset);
        for (size_t i = 0; i < o->positional.size(); ++i) {
            const std::string& arg = o->positional[i];
            if (arg.find('=') != std::string::npos) {
                HYDRA_CHECK(o->resume.empty(), "override '{}': a resumed run keeps its saved config (only --steps may change)",
                            arg);
                config.apply_override(arg);
            } else {
                HYDRA_CHECK(i == 0, "'{}': only the first argument may be a config file; overrides are key=value", arg);
                config.apply(load_config_file(arg), arg);
            }
        }
        if (o->steps > 0 && o->resume.empty()) config.steps = o->steps;
        TrainConfig effective = config;  // what the run will use (a resumed run keeps its saved config)
        if (!o->resume.empty()) {
            // A save of it that a crash cut is finished first, so its config can be read.
            o->resume = settle_directory_for_reading(o->resume);
            effective = TrainConfig();
            effective.apply(read_checkpoint_config(o->resume).value("hydra", nlohmann::json::object())
                                .value("train_config", nlohmann::json::object()),
                            o->resume + "/config.json");
        }
        HYDRA_CHECK(!stages_only || effective.stage != "pretrain",
                    "hydra distill runs a transfer stage: set stage.kind to align, distill or longctx (and stage.init, "
                    "stage.teacher); use `hydra train` to pretrain");
        // The device is not part of the run's math: --device may change it on a resumed run too.
        const std::string device = o->device.empty() ? effective.device : o->device;
        if (!o->device.empty() && o->resume.empty()) config.device = o->device;
        TrainEngineFactory engine;
        if (device == "cuda") {
#ifdef HYDRA_WITH_CUDA
            engine = gpu::make_gpu_train_engine;
#else
            require_cuda_build("--device cuda");  // throws: this build has no CUDA
#endif
        }
        // --gpus N: this process starts the workers and exits with their status; a worker (or a rank of a
        // cluster launcher) joins the NCCL group here
        const std::unique_ptr<Collective> dist = join_data_parallel(o->gpus, device);
        const bool root = !dist || dist->rank() == 0;
        std::string out = o->out;
        if (out.empty()) out = o->resume.empty() ? "runs/train" : o->resume;
        // --force: the output is cleared here, under its lock, which run_training then shares.
        std::optional<ClaimedDir> forced;
        if (o->force && root) {
            forced = claim_output_dir(out, checkpoint_dir_kind(), true);
            for (const std::string& note : forced->notes) fmt::print(stderr, "hydra: {}\n", note);
        }
        ProgressBar bar("train", o->steps > 0 ? o->steps : config.steps, "step");
        TrainRunResult r = run_training(
            config, out, o->resume.empty() ? std::nullopt : std::optional(o->resume),
            o->steps > 0 ? std::optional(o->steps) : std::nullopt,
            [&](const StepLog& s) {
                if (root)
                    bar.update(s.step, fmt::format("loss {:.4f} lr {:.2e} {:.0f} tok/s", s.loss, s.lr,
                                                   s.tokens_per_second));
            },
            synthetic_rows_for(effective), engine, dist.get());
        if (!root) return;  // rank 0 reports for the group
        bar.finish(fmt::format("loss {:.4f}", r.final_loss));
        if (!r.engine_summary.empty()) fmt::print("{}\n", r.engine_summary);
        fmt::print("{} at step {}: train loss {:.4f}{}; checkpoint {}\n", r.interrupted ? "interrupted" : "finished",
                   r.final_step, r.final_loss,
                   r.final_heldout_loss ? fmt::format(", held-out loss {:.4f}", *r.final_heldout_loss) : "", r.out_dir);
    });
}

}  // namespace

void register_train(CLI::App& app) { register_train_like(app, false); }
void register_distill(CLI::App& app) { register_train_like(app, true); }

}  // namespace hydra::cli
