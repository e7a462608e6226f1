// One training step of a teacher or HydraHead hybrid (any HybridPlan) on the CPU: embedding ->
// decoder layers (model/decoder_layer.h) -> final RMSNorm -> LM head, with the loss of a transfer
// stage: next-token cross-entropy (pretraining: the default objective), KL(teacher || student) on the
// logits (stage 2 and 3), or both, through train/losses.h. Parameters and gradients are flat buffers in
// the layout of the model's ParamArena (one buffer each for the optimizer and checkpoints); parameter
// groups are frozen by passing a gradient mask (frozen tensors get no gradient computed where the ops
// allow it, and are never written). Templated on float (training) and double (finite-difference checks).
#pragma once

#include <cstdint>
#include <vector>

#include "core/param_arena.h"
#include "model/hybrid_plan.h"
#include "model/model_config.h"
#include "train/train_batch.h"

namespace hydra {

struct StageObjective {
    double ce_weight = 1.0;  // mean next-token CE over scored targets
    double kl_weight = 0.0;  // mean KL(teacher || student) over positions (float only)
    float temperature = 1.0f;
    // The teacher's final hidden states (after its final norm) for the batch's inputs and its LM head:
    // the KL builds the teacher logits tile by tile from these (losses.h), never (N, V) at once.
    const float* teacher_hidden = nullptr;  // (N, Ct)
    const float* teacher_head = nullptr;    // (V, Ct)
    int64_t teacher_hidden_size = 0;        // Ct
    // Positions whose KL counts (N entries, 1 = count); null = all. Stage 3 limits the KL to where the
    // teacher is within its context window.
    const uint8_t* kl_mask = nullptr;
};

struct ModelStepResult {
    double loss = 0;  // ce_weight * CE + kl_weight * KL
    double ce = 0, kl = 0;
    int64_t scored = 0;  // number of scored targets
};

// Forward, loss and (grads != null) backward. grads += d loss / d params for tensors whose entry in
// `trainable` (one flag per arena entry, same order; empty = all) is set; others are untouched.
// Throws on bad token ids. Activations live in a workspace kept per calling thread between calls (grown
// to the largest step so far), so a training loop does not allocate or fault in fresh pages every step;
// without grads one layer's buffers serve all layers and no attention probabilities are stored.
// Deterministic for a given thread count: static schedules and fixed-order sums everywhere.
template <typename T>
ModelStepResult model_train_step(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout,
                                 const T* params, T* grads, const TrainBatch& batch,
                                 const StageObjective& objective = {},
                                 const std::vector<char>& trainable = {},
                                 const TrainStepOptions& options = {});

}  // namespace hydra
