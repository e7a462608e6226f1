// Parameter layout of LlamaModel (see llama_model.h).
#include "model/llama_model.h"

#include <array>
#include <optional>

#include <fmt/format.h>

#include "core/parse_number.h"

namespace hydra {

std::string LlamaModel::layer_name(int64_t layer, const std::string& suffix) {
    return fmt::format("model.layers.{}.{}", layer, suffix);
}

LlamaModel::LlamaModel(const ModelConfig& config, const HybridPlan* plan)
    : config_(config), plan_(plan ? *plan : HybridPlan::all_fa(config)) {
    config_.validate(config_.name.empty() ? "model config" : config_.name);
    plan_.validate(config_, "hybrid plan");
    const int64_t C = config.hidden_size, F = config.intermediate_size, V = config.vocab_size;
    const int64_t Dq = config.q_dim(), Dh = config.head_dim, W = plan_.gdn.conv_size;
    params_.declare("model.embed_tokens.weight", {V, C});
    for (int64_t l = 0; l < config.num_layers; ++l) {
        const LayerPlan& lp = plan_.layers[size_t(l)];
        const int64_t fa = lp.num_fa(), la = lp.num_la();
        const int64_t fa_kv = int64_t(plan_.fa_kv_groups(config_, l).size());
        auto name = [&](const char* suffix) { return layer_name(l, suffix); };
        params_.declare(name("input_layernorm.weight"), {C});
        if (fa > 0) {
            params_.declare(name("self_attn.q_proj.weight"), {fa * Dh, C});
            params_.declare(name("self_attn.k_proj.weight"), {fa_kv * Dh, C});
            params_.declare(name("self_attn.v_proj.weight"), {fa_kv * Dh, C});
        }
        params_.declare(name("self_attn.o_proj.weight"), {C, Dq});
        if (fa > 0 && config.attention_bias) {
            params_.declare(name("self_attn.q_proj.bias"), {fa * Dh});
            params_.declare(name("self_attn.k_proj.bias"), {fa_kv * Dh});
            params_.declare(name("self_attn.v_proj.bias"), {fa_kv * Dh});
        }
        if (fa > 0 && config.qk_norm) {
            params_.declare(name("self_attn.q_norm.weight"), {Dh});
            params_.declare(name("self_attn.k_norm.weight"), {Dh});
        }
        if (la > 0) {
            for (const char* p : {"linear_attn.q_proj.weight", "linear_attn.k_proj.weight", "linear_attn.v_proj.weight"})
                params_.declare(name(p), {la * Dh, C});
            if (config.attention_bias)
                for (const char* p : {"linear_attn.q_proj.bias", "linear_attn.k_proj.bias", "linear_attn.v_proj.bias"})
                    params_.declare(name(p), {la * Dh});
            params_.declare(name("linear_attn.a_proj.weight"), {la, C});
            params_.declare(name("linear_attn.b_proj.weight"), {la, C});
            params_.declare(name("linear_attn.g_proj.weight"), {la * Dh, C});
            for (const char* p : {"linear_attn.q_conv1d.weight", "linear_attn.k_conv1d.weight", "linear_attn.v_conv1d.weight"})
                params_.declare(name(p), {la * Dh, W});
            params_.declare(name("linear_attn.A_log"), {la});
            params_.declare(name("linear_attn.dt_bias"), {la});
            params_.declare(name("linear_attn.o_norm.weight"), {la, Dh});
            switch (plan_.fusion) {
                case FusionKind::ScaleNorm: params_.declare(name("fusion.head_scale"), {fa + la, Dh}); break;
                case FusionKind::LaOnly: params_.declare(name("fusion.head_scale"), {la, Dh}); break;
                case FusionKind::Hymba:
                    if (fa > 0) params_.declare(name("fusion.fa_scale"), {fa * Dh});
                    params_.declare(name("fusion.la_scale"), {la * Dh});
                    break;
                case FusionKind::None: break;
            }
            if (plan_.la_bias) params_.declare(name("fusion.la_bias"), {la, Dh});
        }
        params_.declare(name("post_attention_layernorm.weight"), {C});
        params_.declare(name("mlp.gate_proj.weight"), {F, C});
        params_.declare(name("mlp.up_proj.weight"), {F, C});
        params_.declare(name("mlp.down_proj.weight"), {C, F});
    }
    params_.declare("model.norm.weight", {C});
    if (!config.tie_word_embeddings) params_.declare("lm_head.weight", {V, C});
    params_.allocate();

    embed_ = params_.get("model.embed_tokens.weight");
    lm_head_ = config.tie_word_embeddings ? embed_ : params_.get("lm_head.weight");
    final_norm_ = params_.get("model.norm.weight");
    auto opt = [&](const std::string& n) { return params_.has(n) ? params_.get(n) : Tensor(); };
    for (int64_t l = 0; l < config.num_layers; ++l) {
        auto get = [&](const char* suffix) { return opt(layer_name(l, suffix)); };
        LayerWeights w;
        const LayerPlan& lp = plan_.layers[size_t(l)];
        w.n_fa = lp.num_fa();
        w.n_la = lp.num_la();
        w.n_fa_kv = int64_t(plan_.fa_kv_groups(config_, l).size());
        w.fa_kv_index = plan_.fa_kv_index(config_, l);
        w.attn_norm = get("input_layernorm.weight");
        w.wq = get("self_attn.q_proj.weight");
        w.wk = get("self_attn.k_proj.weight");
        w.wv = get("self_attn.v_proj.weight");
        w.wo = get("self_attn.o_proj.weight");
        w.bq = get("self_attn.q_proj.bias");
        w.bk = get("self_attn.k_proj.bias");
        w.bv = get("self_attn.v_proj.bias");
        w.q_norm = get("self_attn.q_norm.weight");
        w.k_norm = get("self_attn.k_norm.weight");
        GdnWeights& g = w.la;
        g.wq = get("linear_attn.q_proj.weight");
        g.wk = get("linear_attn.k_proj.weight");
        g.wv = get("linear_attn.v_proj.weight");
        g.bq = get("linear_attn.q_proj.bias");
        g.bk = get("linear_attn.k_proj.bias");
        g.bv = get("linear_attn.v_proj.bias");
        g.wa = get("linear_attn.a_proj.weight");
        g.wb = get("linear_attn.b_proj.weight");
        g.wg = get("linear_attn.g_proj.weight");
        g.conv_q = get("linear_attn.q_conv1d.weight");
        g.conv_k = get("linear_attn.k_conv1d.weight");
        g.conv_v = get("linear_attn.v_conv1d.weight");
        g.A_log = get("linear_attn.A_log");
        g.dt_bias = get("linear_attn.dt_bias");
        g.o_norm = get("linear_attn.o_norm.weight");
        w.fusion_head_scale = get("fusion.head_scale");
        w.fusion_fa_scale = get("fusion.fa_scale");
        w.fusion_la_scale = get("fusion.la_scale");
        w.fusion_la_bias = get("fusion.la_bias");
        w.ffn_norm = get("post_attention_layernorm.weight");
        w.w_gate = get("mlp.gate_proj.weight");
        w.w_up = get("mlp.up_proj.weight");
        w.w_down = get("mlp.down_proj.weight");
        layers_.push_back(std::move(w));
    }
}

namespace {

// Layer l's linear weights with their quantized copies, by HF suffix.
struct LayerSlot {
    const char* suffix;
    const Tensor* f32;
    QuantizedWeight* copy;
};
std::array<LayerSlot, 13> layer_slots(LayerWeights& w) {
    GdnWeights& g = w.la;
    return {{{"self_attn.q_proj.weight", &w.wq, &w.qwq},
             {"self_attn.k_proj.weight", &w.wk, &w.qwk},
             {"self_attn.v_proj.weight", &w.wv, &w.qwv},
             {"self_attn.o_proj.weight", &w.wo, &w.qwo},
             {"mlp.gate_proj.weight", &w.w_gate, &w.qw_gate},
             {"mlp.up_proj.weight", &w.w_up, &w.qw_up},
             {"mlp.down_proj.weight", &w.w_down, &w.qw_down},
             {"linear_attn.q_proj.weight", &g.wq, &g.qwq},
             {"linear_attn.k_proj.weight", &g.wk, &g.qwk},
             {"linear_attn.v_proj.weight", &g.wv, &g.qwv},
             {"linear_attn.a_proj.weight", &g.wa, &g.qwa},
             {"linear_attn.b_proj.weight", &g.wb, &g.qwb},
             {"linear_attn.g_proj.weight", &g.wg, &g.qwg}}};
}

}  // namespace

std::vector<LlamaModel::LinearSlot> LlamaModel::linear_slots() {
    std::vector<LinearSlot> slots;
    slots.push_back({config_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", &lm_head_,
                     &q_lm_head_});
    for (int64_t l = 0; l < config_.num_layers; ++l)
        for (const LayerSlot& s : layer_slots(layers_[size_t(l)]))
            slots.push_back({layer_name(l, s.suffix), s.f32, s.copy});
    return slots;
}

bool LlamaModel::attach_quantized(const std::string& hf_name, QuantizedWeight weight) {
    // (rows, cols) of the f32 [out, in] weight; an empty copy clears (head ablation); a wrong shape, or a
    // weight this layer does not have, takes none
    auto attach = [&](const Tensor& f, QuantizedWeight& copy) {
        if (!weight.empty() &&
            (f.empty() || f.rank() != 2 || f.dim(0) != weight.rows || f.dim(1) != weight.cols))
            return false;
        copy = std::move(weight);
        return true;
    };
    if (hf_name == "lm_head.weight" ||
        (config_.tie_word_embeddings && hf_name == "model.embed_tokens.weight"))
        return attach(lm_head_, q_lm_head_);  // a tied model's LM head answers to both names
    const std::string prefix = "model.layers.";
    if (hf_name.rfind(prefix, 0) != 0) return false;
    const size_t dot = hf_name.find('.', prefix.size());
    const std::optional<int64_t> l = dot == std::string::npos
                                         ? std::nullopt
                                         : parse_int64(hf_name.substr(prefix.size(), dot - prefix.size()));
    if (!l || *l < 0 || *l >= config_.num_layers) return false;
    const std::string suffix = hf_name.substr(dot + 1);
    for (const LayerSlot& s : layer_slots(layers_[size_t(*l)]))
        if (suffix == s.suffix) return attach(*s.f32, *s.copy);
    return false;
}

}  // namespace hydra
