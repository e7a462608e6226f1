// Perplexity of a model on a token sequence: the sequence is cut into windows of `ctx` tokens, each
// evaluated from an empty cache; every token after the first of its window is predicted and scored.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/llama_model.h"

namespace hydra {

struct PerplexityResult {
    double nll_sum = 0;       // natural-log negative log-likelihood, summed
    int64_t predicted = 0;    // number of scored tokens
    int64_t windows = 0;
    double ppl() const;
};

// `progress(done_windows, total_windows, running_ppl)` is called after each window (may be empty).
PerplexityResult perplexity(const LlamaModel& model, std::span<const int32_t> tokens, int64_t ctx,
                            int64_t max_windows = 0,
                            const std::function<void(int64_t, int64_t, double)>& progress = {});

}  // namespace hydra
