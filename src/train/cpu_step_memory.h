// How much memory a CPU training step needs, before it runs: weights, gradients and AdamW state, the
// teacher's weights, and the activations the step saves for its backward pass (model/decoder_layer.h's
// LayerActs and the GDN blocks' saved tensors, per token). A batch that does not fit is otherwise
// killed by the kernel without a word from us; the trainer warns instead, naming what to lower.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/hybrid_plan.h"
#include "model/model_config.h"

namespace hydra {

struct CpuStepMemory {
    int64_t state_bytes = 0;       // student weights, gradients, AdamW m and v; the teacher's weights (fp32)
    int64_t activation_bytes = 0;  // saved activations and step buffers for batch x seq_len tokens
    int64_t total() const { return state_bytes + activation_bytes; }
};

// `teacher_params` = 0 without a teacher; `recompute_attention`: the FA heads' probabilities are not kept.
CpuStepMemory estimate_cpu_step_memory(const ModelConfig& config, const HybridPlan& plan, int64_t params,
                                       int64_t teacher_params, int64_t batch, int64_t seq_len,
                                       bool recompute_attention);

// Bytes the kernel can still hand out (/proc/meminfo MemAvailable, plus SwapFree); nullopt where that
// file is missing or unreadable.
std::optional<int64_t> available_memory_bytes(const std::string& meminfo = "/proc/meminfo");

// The warning for a step whose activations need more than is available once its weights, gradients and
// optimizer state are allocated (where the trainer asks), or "" when they fit (or nothing is known).
std::string cpu_step_memory_warning(const CpuStepMemory& need, std::optional<int64_t> available,
                                    int64_t batch, int64_t seq_len);

}  // namespace hydra
