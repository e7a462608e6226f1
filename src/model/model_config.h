// ModelConfig: the hyper-parameters of a llama-family decoder (Llama, Qwen2, Qwen3, SmolLM2),
// filled from GGUF metadata or an HF config.json. Everything downstream reads sizes from here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/rope_scaling.h"

namespace hydra {

struct ModelConfig {
    std::string architecture = "llama";  // llama | qwen2 | qwen3 (HF model_type / GGUF general.architecture)
    std::string name;                    // human-readable (general.name or the directory)
    int64_t vocab_size = 0;              // V
    int64_t hidden_size = 0;             // C
    int64_t intermediate_size = 0;       // F (SwiGLU inner width)
    int64_t num_layers = 0;              // L
    int64_t num_heads = 0;               // H (query heads)
    int64_t num_kv_heads = 0;            // Hkv (GQA groups); H % Hkv == 0
    int64_t head_dim = 0;                // Dh (may differ from C / H, e.g. Qwen3)
    int64_t max_position_embeddings = 0; // trained context length
    float rms_norm_eps = 1e-5f;
    float rope_theta = 10000.0f;
    int64_t rope_dim = 0;                // rotated dims per head (== head_dim for all supported models)
    RopeScaling rope_scaling;            // HF rope_scaling of the FA heads (default: none)
    bool fa_nope = false;  // FA heads without positions (NoPE ablation of a hybrid); GDN carries order
    bool tie_word_embeddings = false;
    bool attention_bias = false;         // q/k/v biases (Qwen2 always)
    bool qk_norm = false;                // per-head RMSNorm on q and k before RoPE (Qwen3)
    std::vector<int32_t> bos_token_ids;  // may be empty
    std::vector<int32_t> eos_token_ids;  // generation stops on any of these

    int64_t q_dim() const { return num_heads * head_dim; }
    int64_t kv_dim() const { return num_kv_heads * head_dim; }
    int64_t group_size() const { return num_heads / num_kv_heads; }
    // Checks internal consistency; throws hydra::Error naming `source` and the bad field.
    void validate(const std::string& source) const;
};

}  // namespace hydra
