// The `hydra train` loop: data shards -> batches -> forward/backward -> clip -> AdamW, with a JSONL
// log, periodic held-out evaluation, atomic checkpoints, exact resume, non-finite-step skipping,
// and a clean save on SIGINT/SIGTERM.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "train/data_loader.h"
#include "train/train_config.h"
#include "train/train_engine.h"

namespace hydra {

struct StepLog {
    int64_t step = 0;          // steps completed after this one
    int64_t total_steps = 0;
    double loss = 0;           // training loss of the step (NaN when skipped)
    double lr = 0;
    double grad_norm = 0;
    double tokens_per_second = 0;
    bool skipped = false;
    std::optional<double> heldout_loss;
};

struct TrainRunResult {
    int64_t final_step = 0;
    double final_loss = 0;
    std::optional<double> final_heldout_loss;
    bool interrupted = false;  // stopped by a signal (after saving)
    std::string out_dir;
    std::string engine_summary;  // the engine's closing line (device, peak memory); empty on the CPU
};

// The prose files data.sources names (globs in data.prose_dir, else the prose cache: $HYDRA_CACHE/prose
// or the source tree's .cache/prose); an error names a pattern that matches nothing.
std::vector<std::string> training_source_files(const TrainConfig& config);

// The token shards `config` trains from, as run_training opens them: data.shard_dir, else the cache's
// directory for data.tokenizer, built from data.sources first when missing or stale. Training reads only
// the train split; the held-out split is what evaluation may use.
TokenShards open_training_shards(const TrainConfig& config);

// Trains per `config` into `out_dir` (a checkpoint directory, also holding log.jsonl and
// loss_curve.png). With `resume_dir`, continues from that checkpoint: the model, optimizer, RNG,
// data cursor and the checkpoint's own config (only run.steps may be raised by `steps_override`).
// `on_step` (may be empty) sees every step, e.g. to draw a progress bar.
// `synthetic`: the row generator for data.synthetic_fraction > 0 (synthetic retrieval tasks live in
// eval/, above this layer: see eval/synthetic_mixer.h); required then, ignored otherwise.
// `engine`: when set, every step (and the held-out evaluation) runs through the engine it makes
// (train/train_engine.h, e.g. the CUDA step); the loop, schedule, log and checkpoints stay the same.
// `dist`: data parallel (null: one process): this process is one rank of the group; run.batch_size is the
// global batch (a multiple of the world size), each rank trains on its rows (DataLoader::next_batch_shard),
// the engine averages the gradients, and rank 0 alone writes the output directory (log, checkpoints, plot);
// the run's batches, schedule and checkpoints are the one-process run's. Needs an engine factory.
TrainRunResult run_training(TrainConfig config, const std::string& out_dir,
                            const std::optional<std::string>& resume_dir,
                            std::optional<int64_t> steps_override,
                            const std::function<void(const StepLog&)>& on_step,
                            const DataLoader::Generator& synthetic = {},
                            const TrainEngineFactory& engine = {}, Collective* dist = nullptr);

}  // namespace hydra
