// The GPU greedy generator of `hydra eval --device cuda` and `hydra pipeline` with device = cuda: the
// model uploaded once (src/gpu), one cache sized for the longest prompt plus its decoding budget, reset
// per sample; greedy_decode keeps the CPU path's stopping rules. In a build without CUDA it throws a
// clear error instead.
#pragma once

#include <cstdint>

#include "eval/eval_runner.h"
#include "eval/model_text_encoder.h"
#include "model/llama_model.h"

namespace hydra::cli {

// Throws the same clear error as gpu_generator when this hydra was built without CUDA (a no-op otherwise),
// so a command can refuse `--device cuda` before it loads anything.
void require_cuda_build(const char* what);

// max_positions: the cache capacity (positions); context_limit: as EvalSettings::context_limit.
GenerateFn gpu_generator(const LlamaModel& model, const ModelText& text, int64_t max_positions,
                         int64_t context_limit);

}  // namespace hydra::cli
