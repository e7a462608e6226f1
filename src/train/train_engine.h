// TrainEngine: the seam between the `hydra train` loop (train/trainer.h) and a training step that runs
// somewhere other than the CPU reference (the CUDA step of src/gpu/gpu_train_engine.h). The loop keeps
// everything else -- data loader, LR schedule, non-finite skipping, JSONL log, held-out evaluation,
// checkpoints -- and hands the engine one batch and the scheduled LR per step. The engine owns its
// copy of the weights and the optimizer state; before a checkpoint the loop asks for them back into the
// host LlamaModel and AdamW, so checkpoints are the CPU ones, bit for bit in layout.
// This header has no CUDA in it: train/ sits below gpu/ in the layering and the engine is injected
// (a factory passed to run_training by the CLI when built with -DHYDRA_CUDA=ON).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/llama_model.h"
#include "train/adamw.h"
#include "train/collective.h"
#include "train/param_groups.h"
#include "train/train_batch.h"
#include "train/train_config.h"

namespace hydra {

// One step's outcome. When `finite` is false nothing was updated (the loop skips the step).
struct EngineStepResult {
    double loss = NAN;  // ce_weight * CE + kl_weight * KL (the stage objective)
    double ce = NAN, kl = NAN;
    double grad_norm = 0;  // global L2 norm of the trainable gradients, before clipping
    bool finite = false;   // loss and every trainable gradient finite
};

class TrainEngine {
  public:
    virtual ~TrainEngine() = default;
    // Forward + backward of the stage objective on `batch`; when finite, gradient clipping to `grad_clip`
    // (<= 0: none) and one AdamW step with learning rate `lr`.
    virtual EngineStepResult step(const TrainBatch& batch, float lr, double grad_clip) = 0;
    // The student's next-token cross-entropy summed over the scored targets of `batch`, and their number
    // (held-out evaluation; no gradients, weights untouched).
    virtual std::pair<double, int64_t> eval_ce(const TrainBatch& batch) = 0;
    // Copies the engine's weights into `model`'s arena and the optimizer state (m, v, step) into `optimizer`.
    virtual void sync_to_host(LlamaModel& model, AdamW& optimizer) = 0;
    // One line for the end of the run (device, peak memory).
    virtual std::string summary() const = 0;
};

// What a factory gets: the run's settings, the student (weights as loaded / resumed), the teacher (null
// unless the stage uses one), the optimizer spans and the CPU optimizer whose state (m, v, step) the
// engine starts from.
struct TrainEngineSetup {
    const TrainConfig* config = nullptr;
    const LlamaModel* model = nullptr;
    const LlamaModel* teacher = nullptr;
    const std::vector<ParamSpan>* spans = nullptr;
    const AdamW* optimizer = nullptr;
    // Data parallel (null: one process): the group this rank trains in. The batch the loop hands step() is
    // then this rank's share of the global batch; the engine averages the gradients over the ranks, shards
    // the optimizer state (ZeRO-1), and returns the same loss, norm and finite flag on every rank;
    // sync_to_host is collective and fills the model and optimizer of rank 0 only.
    Collective* dist = nullptr;
};

using TrainEngineFactory = std::function<std::unique_ptr<TrainEngine>(const TrainEngineSetup&)>;

}  // namespace hydra
