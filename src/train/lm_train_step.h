// One training step's forward and backward through the full-attention llama-family model on the
// CPU: embedding -> L x (RMSNorm, GQA attention with RoPE, residual, RMSNorm, SwiGLU, residual)
// -> RMSNorm -> tied/untied LM head -> mean cross-entropy. Templated on float (training) and double
// (whole-model finite-difference checks). Parameters and gradients are flat buffers with the layout
// of a LlamaModel's ParamArena, so the optimizer and checkpoints see one buffer each.
#pragma once

#include <cstdint>

#include "core/param_arena.h"
#include "model/model_config.h"

namespace hydra {

struct TrainBatch {
    const int32_t* inputs = nullptr;   // (B, S) token ids
    const int32_t* targets = nullptr;  // (B, S) next-token ids; -1 = not scored
    int64_t batch = 0;                 // B
    int64_t seq_len = 0;               // S
};

struct TrainStepOptions {
    // Do not keep the (B, H, S, S) attention probabilities: the backward recomputes them row by
    // row (activation recomputation for long sequences, at the cost of a second softmax pass).
    bool recompute_attention = false;
};

struct TrainStepResult {
    double loss = 0;        // mean cross-entropy (nats) over scored targets
    int64_t scored = 0;     // number of scored targets
};

// Forward, loss, and (when grads != nullptr) backward: grads += d(mean loss)/d(params).
// params/grads: layout.numel() elements each, in `layout`'s offsets. Throws on bad token ids.
// Activations and scratch live in a workspace kept per calling thread and per T between calls (sized by
// the largest step so far), so a training loop does not allocate or fault in fresh pages every step.
// Without grads only one layer's buffers are used and no attention probabilities are stored.
// Deterministic for a given thread count: every loop of ours has a static schedule and fixed-order sums,
// and none of them changes its arithmetic with the thread count (only OpenBLAS's internal split could).
template <typename T>
TrainStepResult lm_train_step(const ModelConfig& config, const ParamArena& layout, const T* params, T* grads,
                              const TrainBatch& batch, const TrainStepOptions& options = {});

}  // namespace hydra
