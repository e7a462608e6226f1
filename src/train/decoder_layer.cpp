// Training forward/backward of one teacher or hybrid decoder layer (see decoder_layer.h).
// Accumulate rules follow DESIGN.md §2: parameter gradients +=, activation gradients overwritten.
#include "train/decoder_layer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/fusion.h"
#include "model/llama_model.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

namespace hydra {

namespace {

template <typename T>
std::vector<T> zeros(int64_t n) {
    return std::vector<T>(static_cast<size_t>(n), T(0));
}

template <typename T>
void add_into(T* dst, const T* src, int64_t n) {
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

// Copies a (N, w) block into columns [c0, c0 + w) of an (N, row) matrix, and back.
template <typename T>
void put_cols(T* dst, int64_t row, int64_t c0, const T* src, int64_t w, int64_t N) {
    for (int64_t n = 0; n < N; ++n) std::memcpy(dst + n * row + c0, src + n * w, size_t(w) * sizeof(T));
}
template <typename T>
void get_cols(T* dst, const T* src, int64_t row, int64_t c0, int64_t w, int64_t N) {
    for (int64_t n = 0; n < N; ++n) std::memcpy(dst + n * w, src + n * row + c0, size_t(w) * sizeof(T));
}

template <typename T>
GdnConfig layer_gdn_config(const HybridPlan& plan, int64_t n_la, int64_t Dh) {
    GdnConfig c;
    c.H = c.HV = n_la;
    c.K = c.V = Dh;
    c.conv_width = plan.gdn.conv_size;
    c.allow_neg_eigval = plan.gdn.allow_neg_eigval;
    c.use_chunked = true;
    c.chunk_size = plan.gdn.chunk_size;
    c.norm_eps = plan.gdn.norm_eps;
    return c;
}

template <typename T>
FusionParams<T> fusion_params(const LayerParams<const T>& w) {
    return {w.fusion_head_scale, w.fusion_fa_scale, w.fusion_la_scale};
}

}  // namespace

template <typename P>
LayerParams<P> layer_params(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout, P* base,
                            int64_t l) {
    LayerParams<P> p;
    const LayerPlan& lp = plan.layers[size_t(l)];
    p.n_fa = lp.num_fa();
    p.n_la = lp.num_la();
    p.n_kv = int64_t(plan.fa_kv_groups(cfg, l).size());
    p.kv_index = plan.fa_kv_index(cfg, l);
    p.uniform_groups = p.n_kv == 0 || p.n_fa % p.n_kv == 0;
    for (int64_t h = 0; p.uniform_groups && h < p.n_fa; ++h)
        p.uniform_groups = p.kv_index[size_t(h)] == h / (p.n_fa / p.n_kv);
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
    p.ffn_norm = at("post_attention_layernorm.weight");
    p.w_gate = at("mlp.gate_proj.weight");
    p.w_up = at("mlp.up_proj.weight");
    p.w_down = at("mlp.down_proj.weight");
    return p;
}

template <typename P>
void drop_frozen(LayerParams<P>& p, const P* base, const std::unordered_set<int64_t>& frozen) {
    if (frozen.empty()) return;
    for (P** f : {&p.attn_norm, &p.wq,     &p.wk,      &p.wv,      &p.wo,      &p.bq,     &p.bk,
                  &p.bv,        &p.q_norm, &p.k_norm,  &p.la_wq,   &p.la_wk,   &p.la_wv,  &p.la_bq,
                  &p.la_bk,     &p.la_bv,  &p.la_wa,   &p.la_wb,   &p.la_wg,   &p.conv_q, &p.conv_k,
                  &p.conv_v,    &p.A_log,  &p.dt_bias, &p.o_norm,  &p.fusion_head_scale, &p.fusion_fa_scale,
                  &p.fusion_la_scale, &p.ffn_norm, &p.w_gate, &p.w_up, &p.w_down})
        if (*f && frozen.count(int64_t(*f - base))) *f = nullptr;
}

template <typename T>
void decoder_layer_forward(T* x_out, const T* x_in, const ModelConfig& cfg, const HybridPlan& plan,
                           const LayerParams<const T>& w, const LayerShape& shape, LayerActivations<T>* acts) {
    const int64_t B = shape.batch, S = shape.seq_len, N = B * S;
    const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, H = cfg.num_heads, Dh = cfg.head_dim;
    const int64_t n_fa = w.n_fa, n_la = w.n_la, n_kv = w.n_kv, Dq = H * Dh;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const double eps = cfg.rms_norm_eps, scale = 1.0 / std::sqrt(double(Dh));
    LayerActivations<T> local;
    LayerActivations<T>& a = acts ? *acts : local;

    a.x_in.assign(x_in, x_in + N * C);
    a.rstd1 = zeros<T>(N);
    std::vector<T> xn = zeros<T>(N * C);
    cpu::rmsnorm_forward(xn.data(), a.rstd1.data(), x_in, w.attn_norm, N, C, eps);
    a.heads = zeros<T>(N * Dq);

    if (n_fa > 0) {
        a.q = zeros<T>(N * Dfa);
        a.k = zeros<T>(N * Dkv);
        a.v = zeros<T>(N * Dkv);
        cpu::linear_forward(a.q.data(), xn.data(), w.wq, w.bq, N, C, Dfa);
        cpu::linear_forward(a.k.data(), xn.data(), w.wk, w.bk, N, C, Dkv);
        cpu::linear_forward(a.v.data(), xn.data(), w.wv, w.bv, N, C, Dkv);
        if (cfg.qk_norm) {
            a.q_pre = a.q;
            a.k_pre = a.k;
            a.rstd_q = zeros<T>(N * n_fa);
            a.rstd_k = zeros<T>(N * n_kv);
            cpu::rmsnorm_forward(a.q.data(), a.rstd_q.data(), a.q_pre.data(), w.q_norm, N * n_fa, Dh, eps);
            cpu::rmsnorm_forward(a.k.data(), a.rstd_k.data(), a.k_pre.data(), w.k_norm, N * n_kv, Dh, eps);
        }
        if (!shape.recompute_attention && acts) a.probs = zeros<T>(B * S * n_fa * S);
        std::vector<T> fa_out = n_la == 0 ? std::vector<T>() : zeros<T>(N * Dfa);
        T* out = n_la == 0 ? a.heads.data() : fa_out.data();
        const int32_t* map = w.uniform_groups ? nullptr : w.kv_index.data();
        for (int64_t b = 0; b < B; ++b) {
            T* qb = a.q.data() + b * S * Dfa;
            T* kb = a.k.data() + b * S * Dkv;
            cpu::rope_forward(qb, S, n_fa, Dh, cfg.rope_dim, 0, cfg.rope_theta);
            cpu::rope_forward(kb, S, n_kv, Dh, cfg.rope_dim, 0, cfg.rope_theta);
            cpu::causal_attention_forward(out + b * S * Dfa, a.probs.empty() ? (T*)nullptr : a.probs.data() + b * S * n_fa * S,
                                          qb, kb, a.v.data() + b * S * Dkv, S, int64_t(0), n_fa, n_kv, Dh, scale, map);
        }
        if (n_la > 0) put_cols(a.heads.data(), Dq, 0, fa_out.data(), Dfa, N);
    }
    if (n_la > 0) {
        a.la_q = zeros<T>(N * Dla);
        a.la_k = zeros<T>(N * Dla);
        a.la_v = zeros<T>(N * Dla);
        a.la_z = zeros<T>(N * Dla);
        a.la_a = zeros<T>(N * n_la);
        a.la_b = zeros<T>(N * n_la);
        cpu::linear_forward(a.la_q.data(), xn.data(), w.la_wq, w.la_bq, N, C, Dla);
        cpu::linear_forward(a.la_k.data(), xn.data(), w.la_wk, w.la_bk, N, C, Dla);
        cpu::linear_forward(a.la_v.data(), xn.data(), w.la_wv, w.la_bv, N, C, Dla);
        cpu::linear_forward(a.la_z.data(), xn.data(), w.la_wg, (const T*)nullptr, N, C, Dla);
        cpu::linear_forward(a.la_a.data(), xn.data(), w.la_wa, (const T*)nullptr, N, C, n_la);
        cpu::linear_forward(a.la_b.data(), xn.data(), w.la_wb, (const T*)nullptr, N, C, n_la);
        const GdnConfig gc = layer_gdn_config<T>(plan, n_la, Dh);
        const GdnParams<T> gp{w.conv_q, w.conv_k, w.conv_v, w.A_log, w.dt_bias, w.o_norm};
        a.gdn.assign(size_t(acts ? B : 0), GdnSaved<T>());
        std::vector<T> la_out = zeros<T>(N * Dla);
        for (int64_t b = 0; b < B; ++b) {
            const int64_t r = b * S;
            const GdnInputs<T> in{a.la_q.data() + r * Dla, a.la_k.data() + r * Dla, a.la_v.data() + r * Dla,
                                  a.la_a.data() + r * n_la, a.la_b.data() + r * n_la, a.la_z.data() + r * Dla};
            gdn_block_forward(la_out.data() + r * Dla, gc, gp, in, S, (const GdnStateView<T>*)nullptr,
                              (const GdnStateView<T>*)nullptr, acts ? &a.gdn[size_t(b)] : (GdnSaved<T>*)nullptr);
        }
        put_cols(a.heads.data(), Dq, Dfa, la_out.data(), Dla, N);
    }
    const T* mixed = a.heads.data();
    if (fusion_active(plan.fusion, n_la)) {
        a.fused = zeros<T>(N * Dq);
        fusion_forward(a.fused.data(), a.heads.data(), N, n_fa, n_la, Dh, plan.fusion, fusion_params(w), eps);
        mixed = a.fused.data();
    }
    std::vector<T> tmp = zeros<T>(N * C);
    cpu::linear_forward(tmp.data(), mixed, w.wo, (const T*)nullptr, N, Dq, C);
    a.x_mid.assign(x_in, x_in + N * C);
    add_into(a.x_mid.data(), tmp.data(), N * C);

    a.rstd2 = zeros<T>(N);
    cpu::rmsnorm_forward(xn.data(), a.rstd2.data(), a.x_mid.data(), w.ffn_norm, N, C, eps);
    a.gate = zeros<T>(N * F);
    a.up = zeros<T>(N * F);
    a.act = zeros<T>(N * F);
    cpu::linear_forward(a.gate.data(), xn.data(), w.w_gate, (const T*)nullptr, N, C, F);
    cpu::linear_forward(a.up.data(), xn.data(), w.w_up, (const T*)nullptr, N, C, F);
    cpu::swiglu_forward(a.act.data(), a.gate.data(), a.up.data(), N * F);
    cpu::linear_forward(tmp.data(), a.act.data(), w.w_down, (const T*)nullptr, N, F, C);
    for (int64_t i = 0; i < N * C; ++i) x_out[i] = a.x_mid[size_t(i)] + tmp[size_t(i)];
}

template <typename T>
void decoder_layer_backward(T* dx, const ModelConfig& cfg, const HybridPlan& plan, const LayerParams<const T>& w,
                            const LayerParams<T>& g, const LayerShape& shape, LayerActivations<T>& a) {
    const int64_t B = shape.batch, S = shape.seq_len, N = B * S;
    const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, H = cfg.num_heads, Dh = cfg.head_dim;
    const int64_t n_fa = w.n_fa, n_la = w.n_la, n_kv = w.n_kv, Dq = H * Dh;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const double eps = cfg.rms_norm_eps, scale = 1.0 / std::sqrt(double(Dh));
    std::vector<T> xn = zeros<T>(N * C), dxn = zeros<T>(N * C), dtmp = zeros<T>(N * C);

    // x_out = x_mid + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_mid)
    cpu::rmsnorm_forward(xn.data(), (T*)nullptr, a.x_mid.data(), w.ffn_norm, N, C, eps);  // recompute n2
    std::vector<T> dact = zeros<T>(N * F), dgate = zeros<T>(N * F), dup = zeros<T>(N * F);
    cpu::linear_backward(dact.data(), g.w_down, (T*)nullptr, dx, a.act.data(), w.w_down, N, F, C);
    cpu::swiglu_backward(dgate.data(), dup.data(), dact.data(), a.gate.data(), a.up.data(), N * F);
    cpu::linear_backward(dxn.data(), g.w_gate, (T*)nullptr, dgate.data(), xn.data(), w.w_gate, N, C, F);
    cpu::linear_backward(dtmp.data(), g.w_up, (T*)nullptr, dup.data(), xn.data(), w.w_up, N, C, F);
    add_into(dxn.data(), dtmp.data(), N * C);
    cpu::rmsnorm_backward(dtmp.data(), g.ffn_norm, dxn.data(), a.x_mid.data(), w.ffn_norm, a.rstd2.data(), N, C);
    add_into(dx, dtmp.data(), N * C);  // dx = d x_mid

    // x_mid = x_in + o_proj(fusion(heads))
    std::vector<T> dheads = zeros<T>(N * Dq);
    const bool fused = fusion_active(plan.fusion, n_la);
    cpu::linear_backward(dheads.data(), g.wo, (T*)nullptr, dx, fused ? a.fused.data() : a.heads.data(), w.wo, N, Dq,
                         C);
    if (fused) {
        FusionGrads<T> fg{g.fusion_head_scale, g.fusion_fa_scale, g.fusion_la_scale};
        fusion_backward(dheads.data(), fg, dheads.data(), a.heads.data(), N, n_fa, n_la, Dh, plan.fusion,
                        fusion_params(w), eps);
    }
    cpu::rmsnorm_forward(xn.data(), (T*)nullptr, a.x_in.data(), w.attn_norm, N, C, eps);  // recompute n1
    std::fill(dxn.begin(), dxn.end(), T(0));

    if (n_fa > 0) {
        std::vector<T> dfa = zeros<T>(N * Dfa), dq = zeros<T>(N * Dfa), dk = zeros<T>(N * Dkv),
                       dv = zeros<T>(N * Dkv);
        get_cols(dfa.data(), dheads.data(), Dq, 0, Dfa, N);
        const int32_t* map = w.uniform_groups ? nullptr : w.kv_index.data();
        for (int64_t b = 0; b < B; ++b) {
            const int64_t qo = b * S * Dfa, ko = b * S * Dkv;
            cpu::causal_attention_backward(dq.data() + qo, dk.data() + ko, dv.data() + ko, dfa.data() + qo,
                                           a.q.data() + qo, a.k.data() + ko, a.v.data() + ko,
                                           a.probs.empty() ? (const T*)nullptr : a.probs.data() + b * S * n_fa * S, S,
                                           n_fa, n_kv, Dh, scale, map);
            cpu::rope_backward(dq.data() + qo, S, n_fa, Dh, cfg.rope_dim, 0, cfg.rope_theta);
            cpu::rope_backward(dk.data() + ko, S, n_kv, Dh, cfg.rope_dim, 0, cfg.rope_theta);
        }
        if (cfg.qk_norm) {
            cpu::rmsnorm_backward(dq.data(), g.q_norm, dq.data(), a.q_pre.data(), w.q_norm, a.rstd_q.data(), N * n_fa,
                                  Dh);
            cpu::rmsnorm_backward(dk.data(), g.k_norm, dk.data(), a.k_pre.data(), w.k_norm, a.rstd_k.data(), N * n_kv,
                                  Dh);
        }
        cpu::linear_backward(dtmp.data(), g.wq, g.bq, dq.data(), xn.data(), w.wq, N, C, Dfa);
        add_into(dxn.data(), dtmp.data(), N * C);
        cpu::linear_backward(dtmp.data(), g.wk, g.bk, dk.data(), xn.data(), w.wk, N, C, Dkv);
        add_into(dxn.data(), dtmp.data(), N * C);
        cpu::linear_backward(dtmp.data(), g.wv, g.bv, dv.data(), xn.data(), w.wv, N, C, Dkv);
        add_into(dxn.data(), dtmp.data(), N * C);
    }
    if (n_la > 0) {
        std::vector<T> dla = zeros<T>(N * Dla);
        get_cols(dla.data(), dheads.data(), Dq, Dfa, Dla, N);
        std::vector<T> dq = zeros<T>(N * Dla), dk = zeros<T>(N * Dla), dv = zeros<T>(N * Dla), dz = zeros<T>(N * Dla),
                       da = zeros<T>(N * n_la), db = zeros<T>(N * n_la);
        const GdnConfig gc = layer_gdn_config<T>(plan, n_la, Dh);
        const GdnParams<T> gp{w.conv_q, w.conv_k, w.conv_v, w.A_log, w.dt_bias, w.o_norm};
        const GdnParamGrads<T> gg{g.conv_q, g.conv_k, g.conv_v, g.A_log, g.dt_bias, g.o_norm};
        for (int64_t b = 0; b < B; ++b) {
            const int64_t r = b * S;
            const GdnInputs<T> in{a.la_q.data() + r * Dla, a.la_k.data() + r * Dla, a.la_v.data() + r * Dla,
                                  a.la_a.data() + r * n_la, a.la_b.data() + r * n_la, a.la_z.data() + r * Dla};
            const GdnInputGrads<T> din{dq.data() + r * Dla, dk.data() + r * Dla, dv.data() + r * Dla,
                                       da.data() + r * n_la, db.data() + r * n_la, dz.data() + r * Dla};
            gdn_block_backward(din, gg, (const GdnStateView<T>*)nullptr, dla.data() + r * Dla,
                               (const GdnStateView<T>*)nullptr, gc, gp, in, S, a.gdn[size_t(b)]);
        }
        cpu::linear_backward(dtmp.data(), g.la_wq, g.la_bq, dq.data(), xn.data(), w.la_wq, N, C, Dla);
        add_into(dxn.data(), dtmp.data(), N * C);
        cpu::linear_backward(dtmp.data(), g.la_wk, g.la_bk, dk.data(), xn.data(), w.la_wk, N, C, Dla);
        add_into(dxn.data(), dtmp.data(), N * C);
        cpu::linear_backward(dtmp.data(), g.la_wv, g.la_bv, dv.data(), xn.data(), w.la_wv, N, C, Dla);
        add_into(dxn.data(), dtmp.data(), N * C);
        cpu::linear_backward(dtmp.data(), g.la_wg, (T*)nullptr, dz.data(), xn.data(), w.la_wg, N, C, Dla);
        add_into(dxn.data(), dtmp.data(), N * C);
        cpu::linear_backward(dtmp.data(), g.la_wa, (T*)nullptr, da.data(), xn.data(), w.la_wa, N, C, n_la);
        add_into(dxn.data(), dtmp.data(), N * C);
        cpu::linear_backward(dtmp.data(), g.la_wb, (T*)nullptr, db.data(), xn.data(), w.la_wb, N, C, n_la);
        add_into(dxn.data(), dtmp.data(), N * C);
    }
    cpu::rmsnorm_backward(dtmp.data(), g.attn_norm, dxn.data(), a.x_in.data(), w.attn_norm, a.rstd1.data(), N, C);
    add_into(dx, dtmp.data(), N * C);  // dx = d x_in
}

template LayerParams<float> layer_params(const ModelConfig&, const HybridPlan&, const ParamArena&, float*, int64_t);
template LayerParams<const float> layer_params(const ModelConfig&, const HybridPlan&, const ParamArena&, const float*,
                                               int64_t);
template LayerParams<double> layer_params(const ModelConfig&, const HybridPlan&, const ParamArena&, double*, int64_t);
template LayerParams<const double> layer_params(const ModelConfig&, const HybridPlan&, const ParamArena&,
                                                const double*, int64_t);
template void drop_frozen(LayerParams<float>&, const float*, const std::unordered_set<int64_t>&);
template void drop_frozen(LayerParams<double>&, const double*, const std::unordered_set<int64_t>&);
template void decoder_layer_forward<float>(float*, const float*, const ModelConfig&, const HybridPlan&,
                                           const LayerParams<const float>&, const LayerShape&,
                                           LayerActivations<float>*);
template void decoder_layer_forward<double>(double*, const double*, const ModelConfig&, const HybridPlan&,
                                            const LayerParams<const double>&, const LayerShape&,
                                            LayerActivations<double>*);
template void decoder_layer_backward<float>(float*, const ModelConfig&, const HybridPlan&,
                                            const LayerParams<const float>&, const LayerParams<float>&,
                                            const LayerShape&, LayerActivations<float>&);
template void decoder_layer_backward<double>(double*, const ModelConfig&, const HybridPlan&,
                                             const LayerParams<const double>&, const LayerParams<double>&,
                                             const LayerShape&, LayerActivations<double>&);

}  // namespace hydra
