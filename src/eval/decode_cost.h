// What serving one sequence at a context length costs on the CPU: one prefill pass over the context, then
// greedy single-token steps from its end, and the cache that holds them (the FA heads' K / V rows and the
// LA heads' constant state). The cost of a token does not depend on its text, so callers may pass any ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/llama_forward.h"
#include "model/llama_model.h"

namespace hydra {

struct DecodeCost {
    int64_t context = 0, decode_tokens = 0;
    double prefill_seconds = 0;           // the context in one forward pass
    double decode_tokens_per_second = 0;  // the steps after it, one token each
    size_t kv_bytes_per_token = 0;        // the cache's (fp32) K / V bytes a position
    size_t cache_bytes = 0;               // after the last step: K / V of every position + the GDN state
};

// context (>= 1 ids, each in the vocabulary) prefilled, then decode_tokens (>= 1) greedy steps.
DecodeCost measure_decode_cost(const LlamaModel& model, std::span<const int32_t> context,
                               int64_t decode_tokens, const ForwardOptions& options = {});

// n ids drawn uniformly from [0, vocab) by a seeded generator: a context whose cost stands for any text's.
std::vector<int32_t> random_token_ids(int64_t n, int64_t vocab, uint64_t seed);

}  // namespace hydra
