// The parameters as the GPU computes with them: a copy of a ParamArena's buffer with every GEMM weight
// (each 2-D entry: projections, the embedding, the LM head) rounded to bf16, the rest as is. The CPU step
// on it is the weight part of the GPU parity tests' bf16 floor (tests/gpu/test_train_step.cpp,
// bench/bf16_floor_bench).
#pragma once

#include <vector>

#include "core/param_arena.h"

namespace hydra {

// params: the arena's values (layout.data(), or another buffer of layout.numel() floats).
std::vector<float> bf16_gemm_weights(const ParamArena& layout, const float* params);

}  // namespace hydra
