// Tiny llama-family models for tests: the config fields every test sets (RoPE over the whole head,
// theta 1e4, eps 1e-5, tied embeddings) from the shape alone, and Normal(0, stddev) weights from a seed.
// Shared so that the tests differ only where their shapes do.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "model/llama_model.h"
#include "model/model_config.h"

namespace hydra::test {

struct TinyShape {
    int64_t vocab = 61, hidden = 32, intermediate = 48, layers = 3, heads = 6, kv_heads = 2, head_dim = 8;
};

inline ModelConfig tiny_llama_config(const TinyShape& s, const std::string& name = "tiny") {
    ModelConfig c;
    c.name = name;
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.intermediate_size = s.intermediate;
    c.num_layers = s.layers;
    c.num_heads = s.heads;
    c.num_kv_heads = s.kv_heads;
    c.head_dim = s.head_dim;
    c.rope_dim = s.head_dim;
    c.rope_theta = 10000;
    c.rms_norm_eps = 1e-5f;
    c.tie_word_embeddings = true;
    return c;
}

// The small model the checkpoint and safe-output tests save, corrupt and load (64 positions).
inline ModelConfig tiny_checkpoint_config() {
    ModelConfig c = tiny_llama_config({.vocab = 64,
                                       .hidden = 32,
                                       .intermediate = 48,
                                       .layers = 2,
                                       .heads = 4,
                                       .kv_heads = 2,
                                       .head_dim = 8},
                                      "ck");
    c.max_position_embeddings = 64;
    return c;
}

// Every parameter ~ Normal(0, stddev), reproducible from `seed`.
inline void randomize_params(LlamaModel& m, uint64_t seed, float stddev = 0.3f) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> dist(0.0f, stddev);
    float* p = m.params().data();
    for (int64_t i = 0; i < m.params().numel(); ++i) p[i] = dist(gen);
}

}  // namespace hydra::test
