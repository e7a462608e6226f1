// One sequence's prefill and decode cost on the CPU (see decode_cost.h).
#include "eval/decode_cost.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/rng.h"
#include "model/kv_cache.h"

namespace hydra {

DecodeCost measure_decode_cost(const LlamaModel& model, std::span<const int32_t> context,
                               int64_t decode_tokens, const ForwardOptions& options) {
    const int64_t V = model.config().vocab_size;
    HYDRA_CHECK(!context.empty() && decode_tokens > 0,
                "decode cost: needs a context of at least one token and at least one step, not {} and {}",
                context.size(), decode_tokens);
    for (const int32_t id : context)
        HYDRA_CHECK(id >= 0 && id < V, "decode cost: token id {} outside the vocabulary of {}", id, V);
    using clock = std::chrono::steady_clock;
    auto seconds_since = [](clock::time_point t0) {
        return std::chrono::duration<double>(clock::now() - t0).count();
    };
    KVCache cache(model, int64_t(context.size()) + decode_tokens);
    DecodeCost c;
    c.context = int64_t(context.size());
    c.decode_tokens = decode_tokens;
    auto t0 = clock::now();
    Tensor logits = forward_last_logits(model, context, cache, options);
    c.prefill_seconds = seconds_since(t0);
    auto greedy = [&] { return int32_t(std::max_element(logits.f32(), logits.f32() + V) - logits.f32()); };
    int32_t token = greedy();
    t0 = clock::now();
    for (int64_t i = 0; i < decode_tokens; ++i) {
        const int32_t one[1] = {token};
        logits = forward_last_logits(model, one, cache, options);
        token = greedy();
    }
    c.decode_tokens_per_second = double(decode_tokens) / seconds_since(t0);
    c.kv_bytes_per_token = cache.bytes_per_token();
    c.cache_bytes = cache.bytes_per_token() * size_t(cache.pos()) + cache.state_bytes();
    return c;
}

std::vector<int32_t> random_token_ids(int64_t n, int64_t vocab, uint64_t seed) {
    HYDRA_CHECK(n >= 0 && vocab > 0, "random token ids: {} ids from a vocabulary of {}", n, vocab);
    Rng rng(seed);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = int32_t(rng.next_u64() % uint64_t(vocab));
    return ids;
}

}  // namespace hydra
