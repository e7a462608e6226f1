// Copy-paste retrieval score (see retrieval_score.h).
#include "interp/retrieval_score.h"

#include <algorithm>

#include "core/error.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/taps.h"

namespace hydra {

namespace {

// The engine's forward with the attn_probs tap: each decode step's top-1 attended position per head
// (the probs of the step's only query).
class CpuRetrievalDecoder final : public RetrievalDecoder {
  public:
    explicit CpuRetrievalDecoder(const LlamaModel& model) : model_(model) {
        const int64_t H = model.config().num_heads;
        taps_.on("blk.*.attn_probs", [this, H](std::string_view, int layer, Tensor& probs) {
            const int64_t heads = probs.dim(1), S = probs.dim(2);
            const float* p = probs.f32();
            for (int64_t h = 0; h < heads; ++h) {
                const float* row = p + h * S;
                (*top_)[size_t(layer * H + h)] = std::max_element(row, row + S) - row;
            }
        });
    }
    void start(std::span<const int32_t> prefix, int64_t capacity) override {
        cache_ = std::make_unique<KVCache>(model_, capacity);
        if (!prefix.empty()) forward_hidden(model_, prefix, *cache_);
    }
    int32_t step(int32_t token, std::vector<int64_t>& top) override {
        const ModelConfig& c = model_.config();
        top.assign(size_t(c.num_layers * c.num_heads), -1);
        top_ = &top;
        ForwardOptions opts;
        opts.taps = &taps_;
        Tensor logits = forward_last_logits(model_, std::span<const int32_t>(&token, 1), *cache_, opts);
        const float* lg = logits.f32();
        return int32_t(std::max_element(lg, lg + c.vocab_size) - lg);
    }

  private:
    const LlamaModel& model_;
    std::unique_ptr<KVCache> cache_;
    Taps taps_;
    std::vector<int64_t>* top_ = nullptr;
};

}  // namespace

std::unique_ptr<RetrievalDecoder> cpu_retrieval_decoder(const LlamaModel& model) {
    return std::make_unique<CpuRetrievalDecoder>(model);
}

RetrievalTrial retrieval_trial(const LlamaModel& model, std::span<const int32_t> prompt,
                               const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t max_new_tokens,
                               const std::vector<int32_t>& stop_tokens,
                               const std::function<bool(const std::vector<int32_t>&)>& done) {
    CpuRetrievalDecoder dec(model);
    return retrieval_trial(dec, model, prompt, spans, max_new_tokens, stop_tokens, done);
}

RetrievalTrial retrieval_trial(RetrievalDecoder& decoder, const LlamaModel& model,
                               std::span<const int32_t> prompt,
                               const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t max_new_tokens,
                               const std::vector<int32_t>& stop_tokens,
                               const std::function<bool(const std::vector<int32_t>&)>& done) {
    const ModelConfig& c = model.config();
    const int64_t T = int64_t(prompt.size()), L = c.num_layers, H = c.num_heads;
    HYDRA_CHECK(model.plan().is_all_fa(), "retrieval score: needs the all-FA teacher model, not a hybrid");
    HYDRA_CHECK(T > 0, "retrieval score: empty prompt");
    HYDRA_CHECK(max_new_tokens > 0, "retrieval score: max_new_tokens must be positive");
    for (const auto& [b, e] : spans)
        HYDRA_CHECK(0 <= b && b < e && e <= T,
                    "retrieval score: needle span [{}, {}) is outside the prompt of {} tokens", b, e, T);
    if (c.max_position_embeddings > 0) {
        HYDRA_CHECK(T < c.max_position_embeddings,
                    "retrieval score: the prompt has {} tokens but the model's context holds {}", T,
                    c.max_position_embeddings);
        max_new_tokens = std::min(max_new_tokens, c.max_position_embeddings - T);
    }

    // Per token position: the length of the counted span holding it (0 = not in a needle).
    std::vector<int64_t> span_len(size_t(T), 0);
    for (const auto& [b, e] : spans)
        for (int64_t j = b; j < e; ++j) span_len[size_t(j)] = e - b;

    RetrievalTrial trial;
    trial.scores.assign(size_t(L * H), 0.0);
    decoder.start(prompt.first(size_t(T - 1)), T + max_new_tokens);
    std::vector<int64_t> top;
    int32_t cur = prompt[size_t(T - 1)];
    for (int64_t step = 0; step < max_new_tokens; ++step) {
        const int32_t next = decoder.step(cur, top);
        if (std::find(stop_tokens.begin(), stop_tokens.end(), next) != stop_tokens.end()) break;
        for (int64_t i = 0; i < L * H; ++i) {
            const int64_t j = top[size_t(i)];
            if (j >= 0 && j < T && span_len[size_t(j)] > 0 && prompt[size_t(j)] == next)
                trial.scores[size_t(i)] += 1.0 / double(span_len[size_t(j)]);
        }
        trial.generated.push_back(next);
        cur = next;
        if (done && done(trial.generated)) break;
    }
    return trial;
}

}  // namespace hydra
