// Layer parameter pointers (see layer_params.h).
#include "model/layer_params.h"

#include <string>

namespace hydra {

namespace {

// Head counts and the KV map: the same for parameters and gradients.
template <typename P>
void fill_heads(LayerParams<P>& p, int64_t n_fa, int64_t n_la, int64_t n_kv, std::vector<int32_t> kv_index) {
    p.n_fa = n_fa;
    p.n_la = n_la;
    p.n_kv = n_kv;
    p.kv_index = std::move(kv_index);
    p.uniform_groups = p.n_kv == 0 || p.n_fa % p.n_kv == 0;
    for (int64_t h = 0; p.uniform_groups && h < p.n_fa; ++h)
        p.uniform_groups = p.kv_index[size_t(h)] == h / (p.n_fa / p.n_kv);
}

// The FA heads' sliding windows (none unless the plan has some).
template <typename P>
void fill_windows(LayerParams<P>& p, const HybridPlan& plan, int64_t l) {
    if (!plan.has_windows()) return;
    p.fa_window = plan.fa_windows(l);
    p.window_sinks = plan.window_sinks;
}

}  // namespace

template <typename P>
LayerParams<P> layer_params(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout, P* base,
                            int64_t l) {
    LayerParams<P> p;
    const LayerPlan& lp = plan.layers[size_t(l)];
    fill_heads(p, lp.num_fa(), lp.num_la(), int64_t(plan.fa_kv_groups(cfg, l).size()),
               plan.fa_kv_index(cfg, l));
    fill_windows(p, plan, l);
    if (!base) return p;
    auto at = [&](const char* suffix) -> P* {
        const std::string name = LlamaModel::layer_name(l, suffix);
        return layout.has(name) ? base + layout.entry(name).offset : nullptr;
    };
    p.attn_norm = at("input_layernorm.weight");
    p.wq = at("self_attn.q_proj.weight");
    p.wk = at("self_attn.k_proj.weight");
    p.wv = at("self_attn.v_proj.weight");
    p.wo = at("self_attn.o_proj.weight");
    p.bq = at("self_attn.q_proj.bias");
    p.bk = at("self_attn.k_proj.bias");
    p.bv = at("self_attn.v_proj.bias");
    p.q_norm = at("self_attn.q_norm.weight");
    p.k_norm = at("self_attn.k_norm.weight");
    p.la_wq = at("linear_attn.q_proj.weight");
    p.la_wk = at("linear_attn.k_proj.weight");
    p.la_wv = at("linear_attn.v_proj.weight");
    p.la_bq = at("linear_attn.q_proj.bias");
    p.la_bk = at("linear_attn.k_proj.bias");
    p.la_bv = at("linear_attn.v_proj.bias");
    p.la_wa = at("linear_attn.a_proj.weight");
    p.la_wb = at("linear_attn.b_proj.weight");
    p.la_wg = at("linear_attn.g_proj.weight");
    p.conv_q = at("linear_attn.q_conv1d.weight");
    p.conv_k = at("linear_attn.k_conv1d.weight");
    p.conv_v = at("linear_attn.v_conv1d.weight");
    p.A_log = at("linear_attn.A_log");
    p.dt_bias = at("linear_attn.dt_bias");
    p.o_norm = at("linear_attn.o_norm.weight");
    p.fusion_head_scale = at("fusion.head_scale");
    p.fusion_fa_scale = at("fusion.fa_scale");
    p.fusion_la_scale = at("fusion.la_scale");
    p.fusion_la_bias = at("fusion.la_bias");
    p.ffn_norm = at("post_attention_layernorm.weight");
    p.w_gate = at("mlp.gate_proj.weight");
    p.w_up = at("mlp.up_proj.weight");
    p.w_down = at("mlp.down_proj.weight");
    return p;
}

LayerParams<const float> layer_params(const LlamaModel& model, int64_t l) {
    const LayerWeights& w = model.layer(l);
    LayerParams<const float> p;
    fill_heads(p, w.n_fa, w.n_la, w.n_fa_kv, w.fa_kv_index);
    fill_windows(p, model.plan(), l);
    auto at = [](const Tensor& t) { return t.empty() ? (const float*)nullptr : t.f32(); };
    p.attn_norm = at(w.attn_norm);
    p.wq = at(w.wq);
    p.wk = at(w.wk);
    p.wv = at(w.wv);
    p.wo = at(w.wo);
    p.bq = at(w.bq);
    p.bk = at(w.bk);
    p.bv = at(w.bv);
    p.q_norm = at(w.q_norm);
    p.k_norm = at(w.k_norm);
    const GdnWeights& g = w.la;
    p.la_wq = at(g.wq);
    p.la_wk = at(g.wk);
    p.la_wv = at(g.wv);
    p.la_bq = at(g.bq);
    p.la_bk = at(g.bk);
    p.la_bv = at(g.bv);
    p.la_wa = at(g.wa);
    p.la_wb = at(g.wb);
    p.la_wg = at(g.wg);
    p.conv_q = at(g.conv_q);
    p.conv_k = at(g.conv_k);
    p.conv_v = at(g.conv_v);
    p.A_log = at(g.A_log);
    p.dt_bias = at(g.dt_bias);
    p.o_norm = at(g.o_norm);
    p.fusion_head_scale = at(w.fusion_head_scale);
    p.fusion_fa_scale = at(w.fusion_fa_scale);
    p.fusion_la_scale = at(w.fusion_la_scale);
    p.fusion_la_bias = at(w.fusion_la_bias);
    p.ffn_norm = at(w.ffn_norm);
    p.w_gate = at(w.w_gate);
    p.w_up = at(w.w_up);
    p.w_down = at(w.w_down);
    return p;
}

LayerQuantized layer_quantized(const LlamaModel& model, int64_t l) {
    const LayerWeights& w = model.layer(l);
    auto at = [](const QuantizedWeight& q) { return q.empty() ? nullptr : &q; };
    const GdnWeights& g = w.la;
    return {at(w.qwq), at(w.qwk), at(w.qwv), at(w.qwo), at(w.qw_gate), at(w.qw_up), at(w.qw_down),
            at(g.qwq), at(g.qwk), at(g.qwv), at(g.qwa), at(g.qwb),     at(g.qwg)};
}

template <typename P>
void drop_frozen(LayerParams<P>& p, const P* base, const std::unordered_set<int64_t>& frozen) {
    if (frozen.empty()) return;
    for (P** f : {&p.attn_norm,
                  &p.wq,
                  &p.wk,
                  &p.wv,
                  &p.wo,
                  &p.bq,
                  &p.bk,
                  &p.bv,
                  &p.q_norm,
                  &p.k_norm,
                  &p.la_wq,
                  &p.la_wk,
                  &p.la_wv,
                  &p.la_bq,
                  &p.la_bk,
                  &p.la_bv,
                  &p.la_wa,
                  &p.la_wb,
                  &p.la_wg,
                  &p.conv_q,
                  &p.conv_k,
                  &p.conv_v,
                  &p.A_log,
                  &p.dt_bias,
                  &p.o_norm,
                  &p.fusion_head_scale,
                  &p.fusion_fa_scale,
                  &p.fusion_la_scale,
                  &p.fusion_la_bias,
                  &p.ffn_norm,
                  &p.w_gate,
                  &p.w_up,
                  &p.w_down})
        if (*f && frozen.count(int64_t(*f - base))) *f = nullptr;
}

template LayerParams<float> layer_params(const ModelConfig&, const HybridPlan&, const ParamArena&, float*,
                                         int64_t);
template LayerParams<const float> layer_params(const ModelConfig&, const HybridPlan&, const ParamArena&,
                                               const float*, int64_t);
template LayerParams<double> layer_params(const ModelConfig&, const HybridPlan&, const ParamArena&, double*,
                                          int64_t);
template LayerParams<const double> layer_params(const ModelConfig&, const HybridPlan&, const ParamArena&,
                                                const double*, int64_t);
template void drop_frozen(LayerParams<float>&, const float*, const std::unordered_set<int64_t>&);
template void drop_frozen(LayerParams<double>&, const double*, const std::unordered_set<int64_t>&);

}  // namespace hydra
