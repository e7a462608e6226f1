// Stage 1 of the HydraHead transfer (methods.md §4): per-layer hidden-state alignment with teacher
// forcing. One teacher forward gives every layer's input and output hidden states; each student layer
// runs on the teacher's input and is trained to reproduce the teacher's output. All layers train in
// one pass (they are independent given the teacher's states), one layer's activations at a time.
//
// Loss per layer l: sum((y_l - t_{l+1})^2) / sum((t_{l+1} - t_l)^2), i.e. the student's error relative
// to how much the teacher's layer changes the residual stream. Plain MSE would be dominated by the few
// massive residual channels of models like SmolLM2 and by the deep layers; this normalisation gives
// every layer an equal say and reads as "fraction of the layer's update missed". Reported: the mean
// over layers.
#pragma once

#include <cstdint>
#include <vector>

#include "core/param_arena.h"
#include "model/hybrid_plan.h"
#include "model/model_config.h"

namespace hydra {

// The hidden states at every layer boundary of a model for B sequences of S tokens:
// (L + 1, N, C), entry 0 = embeddings, entry l + 1 = output of layer l (before the final norm).
std::vector<float> layer_boundary_states(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout,
                                         const float* params, const int32_t* tokens, int64_t batch, int64_t seq_len);

// The final hidden states (after the final RMSNorm), (N, C): what the LM head reads (KL targets).
std::vector<float> final_hidden_states(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout,
                                       const float* params, const int32_t* tokens, int64_t batch, int64_t seq_len);

struct AlignResult {
    double loss = 0;                  // mean over layers of the normalised error
    std::vector<double> layer_loss;   // per layer
};

// teacher_states: (L + 1, N, C) from layer_boundary_states on the teacher (same shapes). grads +=
// for trainable entries (mask as model_train_step; empty = all); grads may be null (evaluation).
AlignResult align_step(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout, const float* params,
                       float* grads, const std::vector<char>& trainable, const float* teacher_states, int64_t batch,
                       int64_t seq_len);

}  // namespace hydra
