// Windowed perplexity (see perplexity.h). Logits are computed in row blocks so a (ctx, V) matrix is
// never materialised at once.
#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"

namespace hydra {

double PerplexityResult::ppl() const { return predicted ? std::exp(nll_sum / double(predicted)) : NAN; }

PerplexityResult perplexity(const LlamaModel& model, std::span<const int32_t> tokens, int64_t ctx,
                            int64_t max_windows, const std::function<void(int64_t, int64_t, double)>& progress) {
    HYDRA_CHECK(ctx >= 2, "--ctx must be at least 2 (got {})", ctx);
    HYDRA_CHECK(int64_t(tokens.size()) >= 2, "the text has {} tokens: need at least 2 to measure perplexity",
                tokens.size());
    const int64_t V = model.config().vocab_size;
    int64_t windows = (int64_t(tokens.size()) + ctx - 1) / ctx;
    if (max_windows > 0) windows = std::min(windows, max_windows);
    PerplexityResult r;
    KVCache cache(model, ctx);
    constexpr int64_t kRowBlock = 128;
    for (int64_t w = 0; w < windows; ++w) {
        const int64_t begin = w * ctx;
        const int64_t len = std::min<int64_t>(ctx, int64_t(tokens.size()) - begin);
        if (len < 2) break;
        cache.reset();
        Tensor hidden = forward_hidden(model, tokens.subspan(size_t(begin), size_t(len)), cache);
        for (int64_t row = 0; row + 1 < len; row += kRowBlock) {
            const int64_t rows = std::min<int64_t>(kRowBlock, len - 1 - row);
            Tensor logits = compute_logits(model, hidden.rows(row, row + rows));
            for (int64_t i = 0; i < rows; ++i) {
                const float* l = logits.f32() + i * V;
                const float m = *std::max_element(l, l + V);
                double sum = 0;
                for (int64_t v = 0; v < V; ++v) sum += std::exp(double(l[v] - m));
                const int32_t target = tokens[size_t(begin + row + i + 1)];
                r.nll_sum += std::log(sum) + double(m) - double(l[target]);
                r.predicted++;
            }
        }
        r.windows++;
        if (progress) progress(r.windows, windows, r.ppl());
    }
    return r;
}

}  // namespace hydra
