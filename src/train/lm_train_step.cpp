// Training forward/backward of the llama-family model (see lm_train_step.h).
// Accumulate rules follow DESIGN.md §2: parameter gradients +=, activation gradients overwritten,
// except the residual stream, where each block's input gradient is added to the running dx.
#include "train/lm_train_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/llama_model.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"
#include "train/losses.h"

namespace hydra {

namespace {

template <typename T>
using Buf = std::vector<T>;

template <typename T>
Buf<T> zeros(int64_t n) {
    return Buf<T>(static_cast<size_t>(n), T(0));
}

// Pointers to one layer's parameters (or gradients) inside a flat buffer.
template <typename P>
struct LayerPtrs {
    P *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv, *q_norm, *k_norm, *ffn_norm, *w_gate, *w_up, *w_down;
};

template <typename P>
LayerPtrs<P> layer_ptrs(const ModelConfig& cfg, const ParamArena& layout, P* base, int64_t l) {
    auto at = [&](const std::string& suffix) -> P* {
        const std::string name = LlamaModel::layer_name(l, suffix);
        return layout.has(name) ? base + layout.entry(name).offset : nullptr;
    };
    LayerPtrs<P> p{};
    p.attn_norm = at("input_layernorm.weight");
    p.wq = at("self_attn.q_proj.weight");
    p.wk = at("self_attn.k_proj.weight");
    p.wv = at("self_attn.v_proj.weight");
    p.wo = at("self_attn.o_proj.weight");
    p.bq = cfg.attention_bias ? at("self_attn.q_proj.bias") : nullptr;
    p.bk = cfg.attention_bias ? at("self_attn.k_proj.bias") : nullptr;
    p.bv = cfg.attention_bias ? at("self_attn.v_proj.bias") : nullptr;
    p.q_norm = cfg.qk_norm ? at("self_attn.q_norm.weight") : nullptr;
    p.k_norm = cfg.qk_norm ? at("self_attn.k_norm.weight") : nullptr;
    p.ffn_norm = at("post_attention_layernorm.weight");
    p.w_gate = at("mlp.gate_proj.weight");
    p.w_up = at("mlp.up_proj.weight");
    p.w_down = at("mlp.down_proj.weight");
    return p;
}

// Activations one layer saves for its backward pass. N = B * S tokens.
template <typename T>
struct LayerActs {
    Buf<T> x_in;              // (N, C) layer input (residual stream)
    Buf<T> rstd1;             // (N)
    Buf<T> q_pre, k_pre;      // (N, H*Dh), (N, Hkv*Dh) before q/k norm (qk_norm only)
    Buf<T> rstd_q, rstd_k;    // (N*H), (N*Hkv) (qk_norm only)
    Buf<T> q, k, v;           // after RoPE: (N, H, Dh), (N, Hkv, Dh), (N, Hkv, Dh)
    Buf<T> probs;             // (B, S, H, S) unless recomputed
    Buf<T> heads;             // (N, H, Dh) attention output before o_proj
    Buf<T> x_mid;             // (N, C) after the attention residual
    Buf<T> rstd2;             // (N)
    Buf<T> gate, up, act;     // (N, F)
};

// Mean cross-entropy through the LM head. float uses the vocabulary-chunked loss; double (tiny
// gradient checks only) a direct row loop.
template <typename T>
LossResult lm_head_ce(const T* h, const T* W, const int32_t* targets, int64_t N, int64_t C, int64_t V, T* dh, T* dW,
                      int64_t scored);

template <>
LossResult lm_head_ce<float>(const float* h, const float* W, const int32_t* targets, int64_t N, int64_t C, int64_t V,
                             float* dh, float* dW, int64_t scored) {
    return cross_entropy_lm_head(h, W, targets, N, C, V, dh, dW, scored ? 1.0f / float(scored) : 0.0f);
}

template <>
LossResult lm_head_ce<double>(const double* h, const double* W, const int32_t* targets, int64_t N, int64_t C,
                              int64_t V, double* dh, double* dW, int64_t scored) {
    LossResult r{0, 0};
    std::vector<double> logits(static_cast<size_t>(V));
    const double scale = scored ? 1.0 / double(scored) : 0.0;
    for (int64_t n = 0; n < N; ++n) {
        if (dh) std::fill(dh + n * C, dh + (n + 1) * C, 0.0);
        if (targets[n] < 0) continue;
        double m = -INFINITY;
        for (int64_t v = 0; v < V; ++v) {
            double s = 0;
            for (int64_t c = 0; c < C; ++c) s += h[n * C + c] * W[v * C + c];
            logits[size_t(v)] = s;
            m = std::max(m, s);
        }
        double z = 0;
        for (int64_t v = 0; v < V; ++v) z += std::exp(logits[size_t(v)] - m);
        r.loss += std::log(z) + m - logits[size_t(targets[n])];
        r.count++;
        if (!dh) continue;
        for (int64_t v = 0; v < V; ++v) {
            const double g = (std::exp(logits[size_t(v)] - m) / z - (v == targets[n] ? 1.0 : 0.0)) * scale;
            for (int64_t c = 0; c < C; ++c) {
                dh[n * C + c] += g * W[v * C + c];
                dW[v * C + c] += g * h[n * C + c];
            }
        }
    }
    return r;
}

}  // namespace

template <typename T>
TrainStepResult lm_train_step(const ModelConfig& cfg, const ParamArena& layout, const T* params, T* grads,
                              const TrainBatch& batch, const TrainStepOptions& options) {
    const int64_t B = batch.batch, S = batch.seq_len, N = B * S;
    const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, V = cfg.vocab_size;
    const int64_t H = cfg.num_heads, Hkv = cfg.num_kv_heads, Dh = cfg.head_dim;
    const int64_t Dq = cfg.q_dim(), Dkv = cfg.kv_dim(), L = cfg.num_layers;
    const double eps = cfg.rms_norm_eps, scale = 1.0 / std::sqrt(double(Dh));
    HYDRA_CHECK(B > 0 && S > 0, "train step: empty batch ({} x {})", B, S);
    int64_t scored = 0;
    for (int64_t i = 0; i < N; ++i) {
        HYDRA_CHECK(batch.inputs[i] >= 0 && batch.inputs[i] < V, "train step: input token {} at {} outside 0..{}",
                    batch.inputs[i], i, V - 1);
        HYDRA_CHECK(batch.targets[i] >= -1 && batch.targets[i] < V, "train step: target {} at {} outside -1..{}",
                    batch.targets[i], i, V - 1);
        scored += batch.targets[i] >= 0;
    }
    const T* embed = params + layout.entry("model.embed_tokens.weight").offset;
    const T* final_norm = params + layout.entry("model.norm.weight").offset;
    const T* lm_head = cfg.tie_word_embeddings ? embed : params + layout.entry("lm_head.weight").offset;

    // ---- forward -------------------------------------------------------------------------------
    std::vector<LayerActs<T>> acts(static_cast<size_t>(L));
    Buf<T> x = zeros<T>(N * C), xn = zeros<T>(N * C), tmp = zeros<T>(N * C);
    cpu::embedding_forward(x.data(), batch.inputs, embed, N, C);
    for (int64_t l = 0; l < L; ++l) {
        const LayerPtrs<const T> w = layer_ptrs(cfg, layout, params, l);
        LayerActs<T>& a = acts[size_t(l)];
        a.x_in = x;
        a.rstd1 = zeros<T>(N);
        cpu::rmsnorm_forward(xn.data(), a.rstd1.data(), x.data(), w.attn_norm, N, C, eps);
        a.q = zeros<T>(N * Dq);
        a.k = zeros<T>(N * Dkv);
        a.v = zeros<T>(N * Dkv);
        cpu::linear_forward(a.q.data(), xn.data(), w.wq, w.bq, N, C, Dq);
        cpu::linear_forward(a.k.data(), xn.data(), w.wk, w.bk, N, C, Dkv);
        cpu::linear_forward(a.v.data(), xn.data(), w.wv, w.bv, N, C, Dkv);
        if (cfg.qk_norm) {
            a.q_pre = a.q;
            a.k_pre = a.k;
            a.rstd_q = zeros<T>(N * H);
            a.rstd_k = zeros<T>(N * Hkv);
            cpu::rmsnorm_forward(a.q.data(), a.rstd_q.data(), a.q_pre.data(), w.q_norm, N * H, Dh, eps);
            cpu::rmsnorm_forward(a.k.data(), a.rstd_k.data(), a.k_pre.data(), w.k_norm, N * Hkv, Dh, eps);
        }
        a.heads = zeros<T>(N * Dq);
        if (!options.recompute_attention) a.probs = zeros<T>(B * S * H * S);
        for (int64_t b = 0; b < B; ++b) {
            T* qb = a.q.data() + b * S * Dq;
            T* kb = a.k.data() + b * S * Dkv;
            cpu::rope_forward(qb, S, H, Dh, cfg.rope_dim, 0, cfg.rope_theta);
            cpu::rope_forward(kb, S, Hkv, Dh, cfg.rope_dim, 0, cfg.rope_theta);
            cpu::causal_attention_forward(a.heads.data() + b * S * Dq,
                                          a.probs.empty() ? (T*)nullptr : a.probs.data() + b * S * H * S, qb, kb,
                                          a.v.data() + b * S * Dkv, S, int64_t(0), H, Hkv, Dh, scale);
        }
        cpu::linear_forward(tmp.data(), a.heads.data(), w.wo, (const T*)nullptr, N, Dq, C);
        for (int64_t i = 0; i < N * C; ++i) x[size_t(i)] += tmp[size_t(i)];
        a.x_mid = x;
        a.rstd2 = zeros<T>(N);
        cpu::rmsnorm_forward(xn.data(), a.rstd2.data(), x.data(), w.ffn_norm, N, C, eps);
        a.gate = zeros<T>(N * F);
        a.up = zeros<T>(N * F);
        a.act = zeros<T>(N * F);
        cpu::linear_forward(a.gate.data(), xn.data(), w.w_gate, (const T*)nullptr, N, C, F);
        cpu::linear_forward(a.up.data(), xn.data(), w.w_up, (const T*)nullptr, N, C, F);
        cpu::swiglu_forward(a.act.data(), a.gate.data(), a.up.data(), N * F);
        cpu::linear_forward(tmp.data(), a.act.data(), w.w_down, (const T*)nullptr, N, F, C);
        for (int64_t i = 0; i < N * C; ++i) x[size_t(i)] += tmp[size_t(i)];
    }
    Buf<T> rstd_f = zeros<T>(N), hidden = zeros<T>(N * C);
    cpu::rmsnorm_forward(hidden.data(), rstd_f.data(), x.data(), final_norm, N, C, eps);

    // ---- loss (+ LM head backward) ---------------------------------------------------------------
    Buf<T> dh = grads ? zeros<T>(N * C) : Buf<T>();
    T* d_lm_head = nullptr;
    if (grads)
        d_lm_head = grads + (cfg.tie_word_embeddings ? layout.entry("model.embed_tokens.weight").offset
                                                     : layout.entry("lm_head.weight").offset);
    const LossResult lr = lm_head_ce<T>(hidden.data(), lm_head, batch.targets, N, C, V,
                                        grads ? dh.data() : nullptr, d_lm_head, scored);
    TrainStepResult result{scored ? lr.loss / double(scored) : 0.0, scored};
    if (!grads) return result;

    // ---- backward ------------------------------------------------------------------------------
    Buf<T> dx = zeros<T>(N * C), dxn = zeros<T>(N * C), dtmp = zeros<T>(N * C);
    cpu::rmsnorm_backward(dx.data(), grads + layout.entry("model.norm.weight").offset, dh.data(), x.data(),
                          final_norm, rstd_f.data(), N, C);
    Buf<T> dact = zeros<T>(N * F), dgate = zeros<T>(N * F), dup = zeros<T>(N * F);
    Buf<T> dq = zeros<T>(N * Dq), dk = zeros<T>(N * Dkv), dv = zeros<T>(N * Dkv), dheads = zeros<T>(N * Dq);
    Buf<T> dpre_q, dpre_k;
    for (int64_t l = L - 1; l >= 0; --l) {
        const LayerPtrs<const T> w = layer_ptrs(cfg, layout, params, l);
        const LayerPtrs<T> g = layer_ptrs(cfg, layout, grads, l);
        LayerActs<T>& a = acts[size_t(l)];
        // x_out = x_mid + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_mid)
        cpu::rmsnorm_forward(xn.data(), (T*)nullptr, a.x_mid.data(), w.ffn_norm, N, C, eps);  // recompute n2
        cpu::linear_backward(dact.data(), g.w_down, (T*)nullptr, dx.data(), a.act.data(), w.w_down, N, F, C);
        cpu::swiglu_backward(dgate.data(), dup.data(), dact.data(), a.gate.data(), a.up.data(), N * F);
        cpu::linear_backward(dxn.data(), g.w_gate, (T*)nullptr, dgate.data(), xn.data(), w.w_gate, N, C, F);
        cpu::linear_backward(dtmp.data(), g.w_up, (T*)nullptr, dup.data(), xn.data(), w.w_up, N, C, F);
        for (int64_t i = 0; i < N * C; ++i) dxn[size_t(i)] += dtmp[size_t(i)];
        cpu::rmsnorm_backward(dtmp.data(), g.ffn_norm, dxn.data(), a.x_mid.data(), w.ffn_norm, a.rstd2.data(), N, C);
        for (int64_t i = 0; i < N * C; ++i) dx[size_t(i)] += dtmp[size_t(i)];  // dx = d x_mid
        // x_mid = x_in + o_proj(attention(rope(q), rope(k), v))
        cpu::linear_backward(dheads.data(), g.wo, (T*)nullptr, dx.data(), a.heads.data(), w.wo, N, Dq, C);
        for (int64_t b = 0; b < B; ++b) {
            const int64_t qo = b * S * Dq, ko = b * S * Dkv;
            cpu::causal_attention_backward(dq.data() + qo, dk.data() + ko, dv.data() + ko, dheads.data() + qo,
                                           a.q.data() + qo, a.k.data() + ko, a.v.data() + ko,
                                           a.probs.empty() ? (const T*)nullptr : a.probs.data() + b * S * H * S, S, H,
                                           Hkv, Dh, scale);
            cpu::rope_backward(dq.data() + qo, S, H, Dh, cfg.rope_dim, 0, cfg.rope_theta);
            cpu::rope_backward(dk.data() + ko, S, Hkv, Dh, cfg.rope_dim, 0, cfg.rope_theta);
        }
        if (cfg.qk_norm) {
            dpre_q = zeros<T>(N * Dq);
            dpre_k = zeros<T>(N * Dkv);
            cpu::rmsnorm_backward(dpre_q.data(), g.q_norm, dq.data(), a.q_pre.data(), w.q_norm, a.rstd_q.data(), N * H,
                                  Dh);
            cpu::rmsnorm_backward(dpre_k.data(), g.k_norm, dk.data(), a.k_pre.data(), w.k_norm, a.rstd_k.data(),
                                  N * Hkv, Dh);
            dq.swap(dpre_q);
            dk.swap(dpre_k);
        }
        cpu::rmsnorm_forward(xn.data(), (T*)nullptr, a.x_in.data(), w.attn_norm, N, C, eps);  // recompute n1
        cpu::linear_backward(dxn.data(), g.wq, g.bq, dq.data(), xn.data(), w.wq, N, C, Dq);
        cpu::linear_backward(dtmp.data(), g.wk, g.bk, dk.data(), xn.data(), w.wk, N, C, Dkv);
        for (int64_t i = 0; i < N * C; ++i) dxn[size_t(i)] += dtmp[size_t(i)];
        cpu::linear_backward(dtmp.data(), g.wv, g.bv, dv.data(), xn.data(), w.wv, N, C, Dkv);
        for (int64_t i = 0; i < N * C; ++i) dxn[size_t(i)] += dtmp[size_t(i)];
        cpu::rmsnorm_backward(dtmp.data(), g.attn_norm, dxn.data(), a.x_in.data(), w.attn_norm, a.rstd1.data(), N, C);
        for (int64_t i = 0; i < N * C; ++i) dx[size_t(i)] += dtmp[size_t(i)];  // dx = d x_in
        if (cfg.qk_norm) {
            dq.swap(dpre_q);
            dk.swap(dpre_k);
        }
        a = LayerActs<T>();  // free this layer's activations early
    }
    cpu::embedding_backward(grads + layout.entry("model.embed_tokens.weight").offset, dx.data(), batch.inputs, N, C);
    return result;
}

template TrainStepResult lm_train_step<float>(const ModelConfig&, const ParamArena&, const float*, float*,
                                              const TrainBatch&, const TrainStepOptions&);
template TrainStepResult lm_train_step<double>(const ModelConfig&, const ParamArena&, const double*, double*,
                                               const TrainBatch&, const TrainStepOptions&);

}  // namespace hydra
