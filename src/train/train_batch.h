// TrainBatch and TrainStepOptions: what every training step takes, on the CPU (train/model_step.h) and
// on the GPU (gpu/gpu_train_step.h), kept apart so that neither depends on the other's step.
#pragma once

#include <cstdint>

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

}  // namespace hydra
