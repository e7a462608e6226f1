// Prefill + decode loop (see generator.h).
#include "serve/generator.h"

#include <algorithm>
#include <chrono>

#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "serve/utf8_stream.h"

namespace hydra {

GenerationResult generate(const LlamaModel& model, const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                          int64_t max_new_tokens, Sampler& sampler, const std::vector<int32_t>& stop_ids,
                          const std::function<void(std::string_view)>& on_text, int64_t context_limit) {
    using clock = std::chrono::steady_clock;
    HYDRA_CHECK(!prompt.empty(), "the prompt is empty: give some text with -p");
    HYDRA_CHECK(max_new_tokens >= 0, "-n must be >= 0 (got {})", max_new_tokens);
    const ModelConfig& cfg = model.config();
    int64_t limit = context_limit > 0 ? context_limit
                                      : (cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 8192);
    HYDRA_CHECK(int64_t(prompt.size()) < limit, "the prompt has {} tokens but the context holds {}", prompt.size(),
                limit);
    const int64_t capacity = std::min<int64_t>(limit, int64_t(prompt.size()) + max_new_tokens);
    KVCache cache(model, std::max<int64_t>(capacity, int64_t(prompt.size())));

    GenerationResult result;
    result.prompt_tokens = int64_t(prompt.size());
    result.stop_reason = "length";
    Utf8Stream stream;
    auto t0 = clock::now();
    Tensor logits = forward_last_logits(model, prompt, cache);
    auto t1 = clock::now();
    result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    for (int64_t i = 0; i < max_new_tokens; ++i) {
        const int32_t next = sampler.sample({logits.f32(), size_t(cfg.vocab_size)});
        if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) {
            result.stop_reason = "eos";
            break;
        }
        result.tokens.push_back(next);
        if (on_text) {
            std::string text = stream.push(tokenizer.token_bytes(next));
            if (!text.empty()) on_text(text);
        }
        if (i + 1 == max_new_tokens) break;
        if (cache.pos() >= cache.capacity()) {
            result.stop_reason = "context";
            break;
        }
        const int32_t one[1] = {next};
        logits = forward_last_logits(model, one, cache);
    }
    if (on_text) {
        std::string rest = stream.flush();
        if (!rest.empty()) on_text(rest);
    }
    result.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return result;
}

}  // namespace hydra
