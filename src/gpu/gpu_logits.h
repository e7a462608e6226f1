// The GPU LogitsFn (eval/heldout_metrics.h) of `hydra pipeline` with device = cuda: the model uploaded
// once (weights only), one cache of max_positions reset per window, every position's logits copied back
// to the host, where the held-out statistics are computed exactly as for the CPU forward (so the two
// paths differ only by the forward's own rounding: bf16 GEMM operands against fp32).
#pragma once

#include <cstdint>

#include "eval/heldout_metrics.h"
#include "model/llama_model.h"

namespace hydra::gpu {

// Throws hydra::Error when no CUDA device is usable.
LogitsFn make_gpu_logits_fn(const LlamaModel& model, int64_t max_positions);

}  // namespace hydra::gpu
