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

// Marks the targets of positions t < position of every row (B, S) not scored (-1): the cross-entropy then
// counts only the later positions (loss.ce_from_position), on any backend, since both skip -1 targets.
inline void ignore_targets_before(int32_t* targets, int64_t rows, int64_t seq_len, int64_t position) {
    const int64_t end = position < seq_len ? position : seq_len;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t t = 0; t < end; ++t) targets[r * seq_len + t] = -1;
}

struct TrainStepOptions {
    // Do not keep the (B, H, S, S) attention probabilities: the backward recomputes them row by
    // row (activation recomputation for long sequences, at the cost of a second softmax pass).
    bool recompute_attention = false;
};

}  // namespace hydra
