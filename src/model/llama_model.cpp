// Parameter layout of LlamaModel (see llama_model.h).
#include "model/llama_model.h"

#include <fmt/format.h>

namespace hydra {

std::string LlamaModel::layer_name(int64_t layer, const std::string& suffix) {
    return fmt::format("model.layers.{}.{}", layer, suffix);
}

LlamaModel::LlamaModel(const ModelConfig& config) : config_(config) {
    config_.validate(config_.name.empty() ? "model config" : config_.name);
    const int64_t C = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
    const int64_t Dq = config.q_dim(), Dkv = config.kv_dim(), Dh = config.head_dim;
    params_.declare("model.embed_tokens.weight", {V, C});
    for (int64_t l = 0; l < config.num_layers; ++l) {
        params_.declare(layer_name(l, "input_layernorm.weight"), {C});
        params_.declare(layer_name(l, "self_attn.q_proj.weight"), {Dq, C});
        params_.declare(layer_name(l, "self_attn.k_proj.weight"), {Dkv, C});
        params_.declare(layer_name(l, "self_attn.v_proj.weight"), {Dkv, C});
        params_.declare(layer_name(l, "self_attn.o_proj.weight"), {C, Dq});
        if (config.attention_bias) {
            params_.declare(layer_name(l, "self_attn.q_proj.bias"), {Dq});
            params_.declare(layer_name(l, "self_attn.k_proj.bias"), {Dkv});
            params_.declare(layer_name(l, "self_attn.v_proj.bias"), {Dkv});
        }
        if (config.qk_norm) {
            params_.declare(layer_name(l, "self_attn.q_norm.weight"), {Dh});
            params_.declare(layer_name(l, "self_attn.k_norm.weight"), {Dh});
        }
        params_.declare(layer_name(l, "post_attention_layernorm.weight"), {C});
        params_.declare(layer_name(l, "mlp.gate_proj.weight"), {F, C});
        params_.declare(layer_name(l, "mlp.up_proj.weight"), {F, C});
        params_.declare(layer_name(l, "mlp.down_proj.weight"), {C, F});
    }
    params_.declare("model.norm.weight", {C});
    if (!config.tie_word_embeddings) params_.declare("lm_head.weight", {V, C});
    params_.allocate();

    embed_ = params_.get("model.embed_tokens.weight");
    lm_head_ = config.tie_word_embeddings ? embed_ : params_.get("lm_head.weight");
    final_norm_ = params_.get("model.norm.weight");
    for (int64_t l = 0; l < config.num_layers; ++l) {
        LayerWeights w;
        w.attn_norm = params_.get(layer_name(l, "input_layernorm.weight"));
        w.wq = params_.get(layer_name(l, "self_attn.q_proj.weight"));
        w.wk = params_.get(layer_name(l, "self_attn.k_proj.weight"));
        w.wv = params_.get(layer_name(l, "self_attn.v_proj.weight"));
        w.wo = params_.get(layer_name(l, "self_attn.o_proj.weight"));
        if (config.attention_bias) {
            w.bq = params_.get(layer_name(l, "self_attn.q_proj.bias"));
            w.bk = params_.get(layer_name(l, "self_attn.k_proj.bias"));
            w.bv = params_.get(layer_name(l, "self_attn.v_proj.bias"));
        }
        if (config.qk_norm) {
            w.q_norm = params_.get(layer_name(l, "self_attn.q_norm.weight"));
            w.k_norm = params_.get(layer_name(l, "self_attn.k_norm.weight"));
        }
        w.ffn_norm = params_.get(layer_name(l, "post_attention_layernorm.weight"));
        w.w_gate = params_.get(layer_name(l, "mlp.gate_proj.weight"));
        w.w_up = params_.get(layer_name(l, "mlp.up_proj.weight"));
        w.w_down = params_.get(layer_name(l, "mlp.down_proj.weight"));
        layers_.push_back(std::move(w));
    }
}

bool LlamaModel::attach_quantized(const std::string& hf_name, QuantizedWeight weight) {
    if (hf_name == "lm_head.weight" || (config_.tie_word_embeddings && hf_name == "model.embed_tokens.weight")) {
        q_lm_head_ = std::move(weight);
        return true;
    }
    const std::string prefix = "model.layers.";
    if (hf_name.rfind(prefix, 0) != 0) return false;
    const size_t dot = hf_name.find('.', prefix.size());
    if (dot == std::string::npos) return false;
    const int64_t l = std::stoll(hf_name.substr(prefix.size(), dot - prefix.size()));
    if (l < 0 || l >= config_.num_layers) return false;
    const std::string suffix = hf_name.substr(dot + 1);
    LayerWeights& w = layers_[size_t(l)];
    QuantizedWeight* slot = suffix == "self_attn.q_proj.weight"   ? &w.qwq
                            : suffix == "self_attn.k_proj.weight" ? &w.qwk
                            : suffix == "self_attn.v_proj.weight" ? &w.qwv
                            : suffix == "self_attn.o_proj.weight" ? &w.qwo
                            : suffix == "mlp.gate_proj.weight"    ? &w.qw_gate
                            : suffix == "mlp.up_proj.weight"      ? &w.qw_up
                            : suffix == "mlp.down_proj.weight"    ? &w.qw_down
                                                                  : nullptr;
    if (!slot) return false;
    *slot = std::move(weight);
    return true;
}

}  // namespace hydra
