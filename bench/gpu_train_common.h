// Random models shared by the GPU benchmarks (gpu_train_bench, gpu_decode_bench) and the GPU tests
// (tests/gpu): the SmolLM2-135M shape, random weights in sane ranges, plan requests, the relative RMS error.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/hybrid_plan.h"
#include "model/llama_model.h"
#include "model/plan_builders.h"

namespace hydra::bench {

// SmolLM2-135M's hyper-parameters (HF config.json of HuggingFaceTB/SmolLM2-135M).
inline ModelConfig smollm2_135m_config() {
    ModelConfig c;
    c.name = "SmolLM2-135M shape";
    c.vocab_size = 49152, c.hidden_size = 576, c.intermediate_size = 1536, c.num_layers = 30;
    c.num_heads = 9, c.num_kv_heads = 3, c.head_dim = 64, c.rope_dim = 64, c.max_position_embeddings = 8192;
    c.rope_theta = 100000.f, c.rms_norm_eps = 1e-5f, c.tie_word_embeddings = true;
    c.eos_token_ids = {0};
    return c;
}

// SmolLM2's head shape (576 wide, 9 query / 3 KV heads of 64) in 4 layers with the byte tokenizer's
// 260-token vocabulary: the GPU tests' small synthetic model.
inline ModelConfig smollm2_heads_synthetic_config() {
    ModelConfig c;
    c.name = "synthetic";
    c.vocab_size = 260, c.hidden_size = 576, c.intermediate_size = 1536, c.num_layers = 4;
    c.num_heads = 9, c.num_kv_heads = 3, c.head_dim = 64, c.rope_dim = 64, c.max_position_embeddings = 8192;
    c.rope_theta = 100000.f, c.tie_word_embeddings = true;
    c.eos_token_ids = {256};  // the byte tokenizer's vocabulary (its decode checks ids)
    return c;
}

// Random weights: matrices N(0, 0.5/sqrt(in)) so activations keep their scale, the embedding / LM head
// N(0, 1/C) (logits of unit scale; unit_logits = false: N(0, 0.5/sqrt(C)) as every other matrix), norms and
// fusion scales near 1, GDN gates in fla's init ranges. fill_entry draws one entry's (or one block of an
// entry's) n values from rng by those rules.
inline void fill_entry(const ArenaEntry& e, float* p, int64_t n, Rng& rng, bool unit_logits) {
    const std::string& nm = e.name;
    auto ends = [&](const char* suf) {
        return nm.size() >= std::strlen(suf) &&
               nm.compare(nm.size() - std::strlen(suf), std::strlen(suf), suf) == 0;
    };
    if (ends("norm.weight") || ends("layernorm.weight") || ends("scale") || ends("o_norm.weight")) {
        for (int64_t i = 0; i < n; ++i) p[i] = float(1.0 + 0.1 * rng.normal());
    } else if (ends("A_log")) {
        for (int64_t i = 0; i < n; ++i) p[i] = float(std::log(1.0 + 15.0 * rng.uniform()));
    } else if (ends("dt_bias")) {
        for (int64_t i = 0; i < n; ++i) p[i] = float(-2.0 + rng.normal());
    } else if (ends("conv1d.weight")) {
        for (int64_t i = 0; i < n; ++i) p[i] = float(0.5 * rng.normal());
    } else if (ends(".bias")) {
        for (int64_t i = 0; i < n; ++i) p[i] = float(0.1 * rng.normal());
    } else if (unit_logits && (ends("embed_tokens.weight") || ends("lm_head.weight"))) {
        const double sd = 1.0 / std::sqrt(double(e.shape[1]));
        for (int64_t i = 0; i < n; ++i) p[i] = float(sd * rng.normal());
    } else {
        const double sd = e.shape.size() == 2 ? 0.5 / std::sqrt(double(e.shape[1])) : 0.02;
        for (int64_t i = 0; i < n; ++i) p[i] = float(sd * rng.normal());
    }
}

// One stream over the arena in entry order: the tests' weights (their tolerances were set on these draws).
inline void randomise(LlamaModel& model, uint64_t seed, bool unit_logits = true) {
    Rng rng(seed);
    for (const ArenaEntry& e : model.params().entries()) {
        Tensor t = model.params().get(e.name);
        fill_entry(e, t.f32(), t.numel(), rng, unit_logits);
    }
}

// The same distributions drawn in parallel, each block of 2^20 values of each entry from its own stream
// (seeded by seed, entry and block), so the result does not depend on the thread count. For the
// benchmarks' billion-parameter shapes, where one stream costs minutes of a timed device call (about
// 20 ns a value: 3.6B values of Qwen3-1.7B's teacher and hybrid take 75 s on one thread).
inline void randomise_parallel(LlamaModel& model, uint64_t seed, bool unit_logits = true) {
    constexpr int64_t kBlock = int64_t(1) << 20;
    struct Block {
        size_t entry;
        int64_t begin, n;
    };
    std::vector<Block> blocks;
    const auto& entries = model.params().entries();
    for (size_t i = 0; i < entries.size(); ++i) {
        const int64_t n = model.params().get(i).numel();
        for (int64_t b = 0; b < n; b += kBlock) blocks.push_back({i, b, std::min(kBlock, n - b)});
    }
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t k = 0; k < int64_t(blocks.size()); ++k) {
        const Block& b = blocks[size_t(k)];
        Rng rng(seed * 0x9E3779B97F4A7C15ull + uint64_t(b.entry) * 0xBF58476D1CE4E5B9ull +
                uint64_t(b.begin / kBlock));
        Tensor t = model.params().get(b.entry);
        fill_entry(entries[b.entry], t.f32() + b.begin, b.n, rng, unit_logits);
    }
}

inline PlanRequest plan_request(const ModelConfig& c, const std::string& ratio,
                                const std::string& granularity, FusionKind fusion, uint64_t seed) {
    PlanRequest r;
    r.select = "random";
    r.ratio = parse_ratio(ratio, "bench");
    r.granularity = granularity;
    r.fusion = fusion;
    r.seed = seed;
    r.gdn.norm_eps = c.rms_norm_eps;
    return r;
}

// sqrt(sum (a - r)^2) / sqrt(sum r^2); 0 when both are all zero, +inf when only the reference is.
inline double rel_rms(const float* a, const float* r, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = double(a[i]) - double(r[i]);
        num += d * d;
        den += double(r[i]) * double(r[i]);
    }
    if (!std::isfinite(num)) return INFINITY;
    if (den == 0) return num == 0 ? 0.0 : INFINITY;
    return std::sqrt(num / den);
}

}  // namespace hydra::bench
