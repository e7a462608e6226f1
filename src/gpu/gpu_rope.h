// The model's RoPE on the GPU: its frequencies (model/rope_scaling.h, computed on the host) as the
// kernels' by-value cuda::RopeFreqs, and whether the FA heads rotate at all (NoPE hybrids do not).
// Tables for T > 1 rows come from cuda::rope_table with these frequencies; dynamic NTK's length rule
// runs in the kernels themselves (L = pos0 + T), so a CUDA-graph decode step scales at its position.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "ops/cuda/rope.h"

namespace hydra::gpu {

// inv_freq and the attention scale at the original context; dynamic NTK's parameters when it is the type.
cuda::RopeFreqs gpu_rope_freqs(const ModelConfig& c);

// Whether the FA heads rotate q and k (rope_dim > 0 and not NoPE).
inline bool fa_rotates(const ModelConfig& c) {
    return c.rope_dim > 0 && !c.fa_nope;
}

}  // namespace hydra::gpu
