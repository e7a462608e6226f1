// Token sampler: greedy (temperature 0) or temperature + top-k + top-p (nucleus) sampling.
#pragma once

#include <cstdint>
#include <span>

#include "core/rng.h"

namespace hydra {

struct SamplerConfig {
    float temperature = 0.8f;  // 0 = greedy (argmax)
    int top_k = 40;            // 0 = no top-k cut
    float top_p = 0.95f;       // 1 = no nucleus cut
    uint64_t seed = 0;
};

class Sampler {
public:
    explicit Sampler(const SamplerConfig& config);  // validates ranges; throws naming the bad option
    int32_t sample(std::span<const float> logits);
    const SamplerConfig& config() const { return config_; }

private:
    SamplerConfig config_;
    Rng rng_;
};

// Index of the largest logit (lowest index on ties).
int32_t argmax(std::span<const float> logits);

}  // namespace hydra
