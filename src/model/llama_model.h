// LlamaModel: the weights of a llama-family decoder (Llama, Qwen2, Qwen3, SmolLM2) in one
// ParamArena under Hugging Face tensor names, with typed per-layer views. All linear weights are
// PyTorch [out, in] row-major; q/k rows are in HF order (NEOX RoPE), whatever the source file.
#pragma once

#include <string>
#include <vector>

#include "core/param_arena.h"
#include "io/ggml_types.h"
#include "model/model_config.h"

namespace hydra {

// A weight matrix kept in its original ggml block format (rows in HF order) for decode-time GEMV:
// the same values as the f32 copy, at a quarter or less of the bytes to stream per token.
struct QuantizedWeight {
    GgmlType type = GgmlType::F32;
    int64_t rows = 0, cols = 0;      // (N, K) like the f32 [out, in] weight
    std::vector<uint8_t> bytes;      // rows * ggml_row_bytes(type, cols)
    bool empty() const { return bytes.empty(); }
};

struct LayerWeights {
    Tensor attn_norm;            // (C)
    Tensor wq, wk, wv, wo;       // (H*Dh, C), (Hkv*Dh, C), (Hkv*Dh, C), (C, H*Dh)
    Tensor bq, bk, bv;           // (H*Dh), (Hkv*Dh), (Hkv*Dh); empty unless attention_bias
    Tensor q_norm, k_norm;       // (Dh); empty unless qk_norm
    Tensor ffn_norm;             // (C)
    Tensor w_gate, w_up, w_down; // (F, C), (F, C), (C, F)
    // Optional quantized copies of the linear weights (empty unless loaded from a quantized GGUF).
    QuantizedWeight qwq, qwk, qwv, qwo, qw_gate, qw_up, qw_down;
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
    const QuantizedWeight& quantized_lm_head() const { return q_lm_head_; }

    // Attaches the quantized copy of a linear weight by HF name (rows already in HF order).
    // Returns false when `hf_name` is not a linear weight that can use one.
    bool attach_quantized(const std::string& hf_name, QuantizedWeight weight);

    // HF names of the parameters, e.g. layer_name(3, "self_attn.q_proj.weight").
    static std::string layer_name(int64_t layer, const std::string& suffix);

private:
    ModelConfig config_;
    ParamArena params_;
    Tensor embed_, lm_head_, final_norm_;
    std::vector<LayerWeights> layers_;
    QuantizedWeight q_lm_head_;
};

}  // namespace hydra
