// Text generation with a KV cache: prefill the prompt in one forward, then decode token by token,
// streaming decoded text through a callback and stopping at an end-of-sequence token.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/llama_model.h"
#include "serve/sampler.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra {

struct GenerationResult {
    std::vector<int32_t> tokens;  // generated ids (the stop token excluded)
    int64_t prompt_tokens = 0;
    double prefill_seconds = 0, decode_seconds = 0;
    std::string stop_reason;  // "eos" | "length" | "context"
};

// `on_text` receives complete UTF-8 text as it is produced (may be empty to disable streaming).
GenerationResult generate(const LlamaModel& model, const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                          int64_t max_new_tokens, Sampler& sampler, const std::vector<int32_t>& stop_ids,
                          const std::function<void(std::string_view)>& on_text, int64_t context_limit = 0);

}  // namespace hydra
