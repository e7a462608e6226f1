// The CPU reference's own sensitivity to bf16 weights, for model-level GPU checks: the logits of every
// position with fp32 weights and with every matrix rounded to bf16 (what the GPU's GEMMs read), and how far
// apart they are. Per-head normalised fusions (scale-norm, la-only) on random weights amplify that rounding
// at some positions to tens of percent, so a fixed bf16 tolerance cannot judge them; a GPU result passes
// within max(tolerance, 2 x the floor) (parity.h's rule).
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_model.h"

namespace hydra::gputest {

struct LogitsFloor {
    std::vector<float> fp32;  // (T, V) the CPU reference
    std::vector<float> bf16;  // (T, V) the same with bf16-rounded matrices
    double last = 0;          // relative RMS of the last position
    double worst = 0;         // the largest over positions
    int64_t worst_at = 0;
};

// Every position's logits of `prompt` from an empty cache (fp32 weights, no quantized decode).
std::vector<float> cpu_all_logits(const LlamaModel& model, const std::vector<int32_t>& prompt);

LogitsFloor cpu_logits_floor(const LlamaModel& model, const std::vector<int32_t>& prompt);

}  // namespace hydra::gputest
