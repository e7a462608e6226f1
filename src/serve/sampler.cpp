// Sampling (see sampler.h). Candidates are sorted only as far as top-k/top-p need.
#include "serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace hydra {

int32_t argmax(std::span<const float> logits) {
    HYDRA_ASSERT(!logits.empty(), "argmax of nothing");
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sampler::Sampler(const SamplerConfig& config) : config_(config), rng_(config.seed) {
    HYDRA_CHECK(std::isfinite(config.temperature) && config.temperature >= 0,
                "--temp must be >= 0 (got {}); 0 means greedy", config.temperature);
    HYDRA_CHECK(config.top_k >= 0, "--top-k must be >= 0 (got {}); 0 disables it", config.top_k);
    HYDRA_CHECK(config.top_p > 0 && config.top_p <= 1, "--top-p must be in (0, 1] (got {})", config.top_p);
}

int32_t Sampler::sample(std::span<const float> logits) {
    if (config_.temperature == 0) return argmax(logits);
    const int64_t V = int64_t(logits.size());
    std::vector<int32_t> idx(static_cast<size_t>(V));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = config_.top_k > 0 ? std::min<int64_t>(config_.top_k, V) : V;
    auto by_logit = [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b); };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), by_logit);
    idx.resize(size_t(k));
    std::vector<double> p(static_cast<size_t>(k));
    const double max_logit = logits[size_t(idx[0])];
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) {
        p[size_t(i)] = std::exp((double(logits[size_t(idx[size_t(i)])]) - max_logit) / config_.temperature);
        sum += p[size_t(i)];
    }
    int64_t keep = k;
    if (config_.top_p < 1) {
        double cum = 0;
        for (int64_t i = 0; i < k; ++i) {
            cum += p[size_t(i)] / sum;
            if (cum >= config_.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double total = 0;
    for (int64_t i = 0; i < keep; ++i) total += p[size_t(i)];
    double r = rng_.uniform() * total;
    for (int64_t i = 0; i < keep; ++i) {
        r -= p[size_t(i)];
        if (r < 0) return idx[size_t(i)];
    }
    return idx[size_t(keep - 1)];
}

}  // namespace hydra
