// Log-softmax in double for the reported logprobs (see token_logprobs.h).
#include "serve/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace hydra::serve {

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top) {
    const size_t V = logits.size();
    HYDRA_ASSERT(V > 0 && token >= 0 && size_t(token) < V, "logprob of token {} over {} logits", token, V);
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float x : logits) sum += std::exp(double(x) - mx);
    const double lse = mx + std::log(sum);
    TokenLogprob r;
    r.token = token;
    r.logprob = float(double(logits[size_t(token)]) - lse);
    const size_t k = std::min(V, size_t(std::max(top, 0)));
    if (k > 0) {
        std::vector<int32_t> idx(V);
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + ptrdiff_t(k), idx.end(), [&](int32_t a, int32_t b) {
            return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
        });
        for (size_t i = 0; i < k; ++i)
            r.top.emplace_back(idx[i], float(double(logits[size_t(idx[i])]) - lse));
    }
    return r;
}

}  // namespace hydra::serve
