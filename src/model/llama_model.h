// LlamaModel: the weights of a llama-family decoder (Llama, Qwen2, Qwen3, SmolLM2) in one
// ParamArena under Hugging Face tensor names, with typed per-layer views. All linear weights are
// PyTorch [out, in] row-major; q/k rows are in HF order (NEOX RoPE), whatever the source file.
#pragma once

#include <string>
#include <vector>

#include "core/param_arena.h"
#include "model/model_config.h"

namespace hydra {

struct LayerWeights {
    Tensor attn_norm;            // (C)
    Tensor wq, wk, wv, wo;       // (H*Dh, C), (Hkv*Dh, C), (Hkv*Dh, C), (C, H*Dh)
    Tensor bq, bk, bv;           // (H*Dh), (Hkv*Dh), (Hkv*Dh); empty unless attention_bias
    Tensor q_norm, k_norm;       // (Dh); empty unless qk_norm
    Tensor ffn_norm;             // (C)
    Tensor w_gate, w_up, w_down; // (F, C), (F, C), (C, F)
};

class LlamaModel {
public:
    // Declares and allocates zeroed parameters for `config`.
    explicit LlamaModel(const ModelConfig& config);

    const ModelConfig& config() const { return config_; }
    ParamArena& params() { return params_; }
    const ParamArena& params() const { return params_; }

    const Tensor& embedding() const { return embed_; }  // (V, C)
    const Tensor& lm_head() const { return lm_head_; }  // (V, C); the embedding when tied
    const Tensor& final_norm() const { return final_norm_; }
    const LayerWeights& layer(int64_t i) const { return layers_[size_t(i)]; }

    // HF names of the parameters, e.g. layer_name(3, "self_attn.q_proj.weight").
    static std::string layer_name(int64_t layer, const std::string& suffix);

private:
    ModelConfig config_;
    ParamArena params_;
    Tensor embed_, lm_head_, final_norm_;
    std::vector<LayerWeights> layers_;
};

}  // namespace hydra
