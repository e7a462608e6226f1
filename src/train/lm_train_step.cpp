// Training forward/backward of the llama-family model (see lm_train_step.h).
// Accumulate rules follow DESIGN.md §2: parameter gradients +=, activation gradients overwritten,
// except the residual stream, where each block's input gradient is added to the running dx.
#include "train/lm_train_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "core/error.h"
#include "core/gemm.h"
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

// Activations one layer keeps for its backward pass (N = B * S tokens). The residual stream itself
// (layer input and x_mid) lives in Workspace::resid / mid.
template <typename T>
struct LayerActs {
    Buf<T> xn1, rstd1;        // (N, C) normed attention input, (N)
    Buf<T> q_pre, k_pre;      // (N, H*Dh), (N, Hkv*Dh) before q/k norm (qk_norm only)
    Buf<T> rstd_q, rstd_k;    // (N*H), (N*Hkv) (qk_norm only)
    Buf<T> q, k, v;           // after RoPE: (N, H, Dh), (N, Hkv, Dh), (N, Hkv, Dh)
    Buf<T> probs;             // (B, S, H, S) unless recomputed (or forward only)
    Buf<T> heads;             // (N, H, Dh) attention output before o_proj
    Buf<T> xn2, rstd2;        // (N, C) normed MLP input, (N)
    Buf<T> gate, up, act;     // (N, F)
};

// Every buffer of a step. Kept per calling thread between steps (see lm_train_step.h): only growing
// vectors, so a steady training loop neither allocates nor touches fresh pages.
template <typename T>
struct Workspace {
    std::vector<LayerActs<T>> acts;
    std::vector<Buf<T>> resid;  // resid[l]: input of layer l; resid[L]: input of the final norm
    std::vector<Buf<T>> mid;    // mid[l]: x_mid of layer l (after the attention residual)
    Buf<T> rope_cos, rope_sin;  // (S, rope_dim / 2)
    Buf<T> rstd_f, hidden, dh, dx, dxn, dact, dq, dk, dv, dheads, dpre_q, dpre_k;
};

// At least n elements; grow-only, so a smaller step (an evaluation batch) keeps the buffer. Every user
// overwrites the first n elements completely before reading them.
template <typename T>
T* sized(Buf<T>& b, int64_t n) {
    if (b.size() < size_t(n)) b.resize(size_t(n));
    return b.data();
}

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
    const bool train = grads != nullptr;
    // Without a backward pass nothing is kept per layer: one set of buffers and two residual rows serve all.
    const bool keep_probs = train && !options.recompute_attention;

    static thread_local Workspace<T> ws;
    // Grow only: an evaluation step between training steps must not free the per-layer buffers.
    ws.acts.resize(std::max(ws.acts.size(), size_t(train ? L : 1)));
    ws.resid.resize(std::max(ws.resid.size(), size_t(train ? L + 1 : 2)));
    ws.mid.resize(std::max(ws.mid.size(), size_t(train ? L : 1)));
    auto act_of = [&](int64_t l) -> LayerActs<T>& { return ws.acts[size_t(train ? l : 0)]; };
    auto resid = [&](int64_t l) -> T* { return sized(ws.resid[size_t(train ? l : l % 2)], N * C); };
    auto mid = [&](int64_t l) -> T* { return sized(ws.mid[size_t(train ? l : 0)], N * C); };
    const int64_t half = cfg.rope_dim / 2;
    T* rope_cos = sized(ws.rope_cos, S * half);
    T* rope_sin = sized(ws.rope_sin, S * half);
    cpu::rope_table(rope_cos, rope_sin, S, cfg.rope_dim, 0, cfg.rope_theta);
    const int threads = omp_get_max_threads();
    const bool over_batch = threads > 1 && B > 1 && (B % threads == 0 || B >= 4 * threads);

    // ---- forward -------------------------------------------------------------------------------
    cpu::embedding_forward(resid(0), batch.inputs, embed, N, C);
    for (int64_t l = 0; l < L; ++l) {
        const LayerPtrs<const T> w = layer_ptrs(cfg, layout, params, l);
        LayerActs<T>& a = act_of(l);
        const T* x_in = resid(l);
        T* xn1 = sized(a.xn1, N * C);
        cpu::rmsnorm_forward(xn1, sized(a.rstd1, N), x_in, w.attn_norm, N, C, eps);
        T* q = sized(a.q, N * Dq);
        T* k = sized(a.k, N * Dkv);
        T* v = sized(a.v, N * Dkv);
        if (cfg.qk_norm) {
            T* q_pre = sized(a.q_pre, N * Dq);
            T* k_pre = sized(a.k_pre, N * Dkv);
            cpu::linear_forward(q_pre, xn1, w.wq, w.bq, N, C, Dq);
            cpu::linear_forward(k_pre, xn1, w.wk, w.bk, N, C, Dkv);
            cpu::rmsnorm_forward(q, sized(a.rstd_q, N * H), q_pre, w.q_norm, N * H, Dh, eps);
            cpu::rmsnorm_forward(k, sized(a.rstd_k, N * Hkv), k_pre, w.k_norm, N * Hkv, Dh, eps);
        } else {
            cpu::linear_forward(q, xn1, w.wq, w.bq, N, C, Dq);
            cpu::linear_forward(k, xn1, w.wk, w.bk, N, C, Dkv);
        }
        cpu::linear_forward(v, xn1, w.wv, w.bv, N, C, Dkv);
        T* heads = sized(a.heads, N * Dq);
        T* probs = keep_probs ? sized(a.probs, B * S * H * S) : nullptr;
        // Sequences in parallel when they split evenly over the threads (each call then runs on one thread),
        // else one after another with the parallelism inside: the same arithmetic either way.
#pragma omp parallel for schedule(static) if (over_batch)
        for (int64_t b = 0; b < B; ++b) {
            T* qb = q + b * S * Dq;
            T* kb = k + b * S * Dkv;
            cpu::rope_forward(qb, S, H, Dh, cfg.rope_dim, (const T*)rope_cos, (const T*)rope_sin);
            cpu::rope_forward(kb, S, Hkv, Dh, cfg.rope_dim, (const T*)rope_cos, (const T*)rope_sin);
            cpu::causal_attention_forward(heads + b * S * Dq, probs ? probs + b * S * H * S : nullptr, qb, kb,
                                          v + b * S * Dkv, S, int64_t(0), H, Hkv, Dh, scale);
        }
        // x_mid = x_in + heads @ Wo^T: the GEMM adds onto a copy of the residual (beta = 1).
        T* x_mid = mid(l);
        std::memcpy(x_mid, x_in, sizeof(T) * size_t(N * C));
        gemm(false, true, N, C, Dq, T(1), heads, Dq, w.wo, Dq, T(1), x_mid, C);
        T* xn2 = sized(a.xn2, N * C);
        cpu::rmsnorm_forward(xn2, sized(a.rstd2, N), x_mid, w.ffn_norm, N, C, eps);
        T* gate = sized(a.gate, N * F);
        T* up = sized(a.up, N * F);
        T* act = sized(a.act, N * F);
        cpu::linear_forward(gate, xn2, w.w_gate, (const T*)nullptr, N, C, F);
        cpu::linear_forward(up, xn2, w.w_up, (const T*)nullptr, N, C, F);
        cpu::swiglu_forward(act, gate, up, N * F);
        T* x_out = resid(l + 1);
        std::memcpy(x_out, x_mid, sizeof(T) * size_t(N * C));
        gemm(false, true, N, C, F, T(1), act, F, w.w_down, F, T(1), x_out, C);
    }
    const T* x_last = resid(L);
    T* rstd_f = sized(ws.rstd_f, N);
    T* hidden = sized(ws.hidden, N * C);
    cpu::rmsnorm_forward(hidden, rstd_f, x_last, final_norm, N, C, eps);

    // ---- loss (+ LM head backward) ---------------------------------------------------------------
    T* dh = train ? sized(ws.dh, N * C) : nullptr;
    T* d_lm_head = nullptr;
    if (train)
        d_lm_head = grads + (cfg.tie_word_embeddings ? layout.entry("model.embed_tokens.weight").offset
                                                     : layout.entry("lm_head.weight").offset);
    const LossResult lr = lm_head_ce<T>(hidden, lm_head, batch.targets, N, C, V, dh, d_lm_head, scored);
    TrainStepResult result{scored ? lr.loss / double(scored) : 0.0, scored};
    if (!train) return result;

    // ---- backward ------------------------------------------------------------------------------
    // dx is the gradient of the residual stream at the current point, walking back through the layers.
    T* dx = sized(ws.dx, N * C);
    T* dxn = sized(ws.dxn, N * C);
    T* dact = sized(ws.dact, N * F);
    T* dq = sized(ws.dq, N * Dq);
    T* dk = sized(ws.dk, N * Dkv);
    T* dv = sized(ws.dv, N * Dkv);
    T* dheads = sized(ws.dheads, N * Dq);
    T* dpre_q = cfg.qk_norm ? sized(ws.dpre_q, N * Dq) : nullptr;
    T* dpre_k = cfg.qk_norm ? sized(ws.dpre_k, N * Dkv) : nullptr;
    cpu::rmsnorm_backward(dx, grads + layout.entry("model.norm.weight").offset, dh, x_last, final_norm, rstd_f, N, C);
    for (int64_t l = L - 1; l >= 0; --l) {
        const LayerPtrs<const T> w = layer_ptrs(cfg, layout, params, l);
        const LayerPtrs<T> g = layer_ptrs(cfg, layout, grads, l);
        LayerActs<T>& a = act_of(l);
        // x_out = x_mid + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_mid)
        cpu::linear_backward(dact, g.w_down, (T*)nullptr, dx, a.act.data(), w.w_down, N, F, C);
        // dgate overwrites dact, dup overwrites the saved `up` (both read elementwise before written).
        T* dgate = dact;
        T* dup = a.up.data();
        cpu::swiglu_backward(dgate, dup, dact, a.gate.data(), a.up.data(), N * F);
        cpu::linear_backward(dxn, g.w_gate, (T*)nullptr, dgate, a.xn2.data(), w.w_gate, N, C, F);
        cpu::linear_backward(dxn, g.w_up, (T*)nullptr, dup, a.xn2.data(), w.w_up, N, C, F, true);
        cpu::rmsnorm_backward(dx, g.ffn_norm, dxn, mid(l), w.ffn_norm, a.rstd2.data(), N, C, true);  // d x_mid
        // x_mid = x_in + o_proj(attention(rope(q), rope(k), v))
        cpu::linear_backward(dheads, g.wo, (T*)nullptr, dx, a.heads.data(), w.wo, N, Dq, C);
#pragma omp parallel for schedule(static) if (over_batch)
        for (int64_t b = 0; b < B; ++b) {
            const int64_t qo = b * S * Dq, ko = b * S * Dkv;
            cpu::causal_attention_backward(dq + qo, dk + ko, dv + ko, dheads + qo, a.q.data() + qo, a.k.data() + ko,
                                           a.v.data() + ko, keep_probs ? a.probs.data() + b * S * H * S : nullptr,
                                           S, H, Hkv, Dh, scale);
            cpu::rope_backward(dq + qo, S, H, Dh, cfg.rope_dim, (const T*)rope_cos, (const T*)rope_sin);
            cpu::rope_backward(dk + ko, S, Hkv, Dh, cfg.rope_dim, (const T*)rope_cos, (const T*)rope_sin);
        }
        const T* dq_in = dq;
        const T* dk_in = dk;
        if (cfg.qk_norm) {
            cpu::rmsnorm_backward(dpre_q, g.q_norm, dq, a.q_pre.data(), w.q_norm, a.rstd_q.data(), N * H, Dh);
            cpu::rmsnorm_backward(dpre_k, g.k_norm, dk, a.k_pre.data(), w.k_norm, a.rstd_k.data(), N * Hkv, Dh);
            dq_in = dpre_q;
            dk_in = dpre_k;
        }
        const T* xn1 = a.xn1.data();
        cpu::linear_backward(dxn, g.wq, g.bq, dq_in, xn1, w.wq, N, C, Dq);
        cpu::linear_backward(dxn, g.wk, g.bk, dk_in, xn1, w.wk, N, C, Dkv, true);
        cpu::linear_backward(dxn, g.wv, g.bv, dv, xn1, w.wv, N, C, Dkv, true);
        cpu::rmsnorm_backward(dx, g.attn_norm, dxn, resid(l), w.attn_norm, a.rstd1.data(), N, C, true);  // d x_in
    }
    cpu::embedding_backward(grads + layout.entry("model.embed_tokens.weight").offset, dx, batch.inputs, N, C);
    return result;
}

template TrainStepResult lm_train_step<float>(const ModelConfig&, const ParamArena&, const float*, float*,
                                              const TrainBatch&, const TrainStepOptions&);
template TrainStepResult lm_train_step<double>(const ModelConfig&, const ParamArena&, const double*, double*,
                                               const TrainBatch&, const TrainStepOptions&);

}  // namespace hydra
