// The GPU side of the held-out metrics (eval/heldout_metrics.h) of `hydra pipeline` with device = cuda:
//  - make_gpu_logits_fn: a LogitsFn, the model uploaded once (weights only), one cache of max_positions
//    reset per window, every position's logits copied back to the host, where the statistics are
//    computed as for the CPU forward (the paths then differ only by the forward's own rounding);
//  - make_gpu_window_stats_fn: teacher and student both resident, the per-position statistics computed
//    on the device (gpu/window_stats.h), 32 bytes per position copied back instead of 2 x 4V.
#pragma once

#include <cstdint>

#include "eval/heldout_metrics.h"
#include "model/llama_model.h"

namespace hydra::gpu {

// Throws hydra::Error when no CUDA device is usable.
LogitsFn make_gpu_logits_fn(const LlamaModel& model, int64_t max_positions);

// student null: the teacher against itself (one forward per window). The models must outlive the function.
WindowStatsFn make_gpu_window_stats_fn(const LlamaModel& teacher, const LlamaModel* student,
                                       int64_t max_positions);

}  // namespace hydra::gpu
