// The one CPU decoder layer, forward and backward (see decoder_layer.h). Accumulate rules follow
// DESIGN.md §2: parameter gradients +=, activation gradients overwritten, except where a block's input
// gradient is added to the running residual gradient (accumulate_dx of the ops).
#include "model/decoder_layer.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <span>

#include <omp.h>

#include "core/error.h"
#include "model/fusion.h"
#include "model/prefix_attention.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/quant_gemv.h"
#include "ops/cpu/quant_gemv_q8.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

namespace hydra {

namespace {

template <typename T>
T* buf(std::vector<T>& b, int64_t n) {
    return layer_buffer(b, n);
}

// out (N, M) = x (N, K) @ W^T (+ bias), from the quantized copy for a single row when one is given.
template <typename T>
void linear(T* out, const T* x, const T* W, const T* bias, int64_t N, int64_t K, int64_t M,
            const QuantizedWeight* qw) {
    if constexpr (std::is_same_v<T, float>) {
        if (qw && N == 1) {
            cpu::quant_gemv(out, qw->type, qw->bytes.data(), x, M, K);
            if (bias)
                for (int64_t m = 0; m < M; ++m) out[m] += bias[m];
            return;
        }
    }
    cpu::linear_forward(out, x, W, bias, N, K, M);
}

// One projection of a group that reads the same single row: out (M) = W (M, K) @ x (+ bias).
template <typename T>
struct RowProj {
    T* out;
    const T* W;
    const T* bias;
    int64_t M;
    const QuantizedWeight* qw;  // null: no quantized copy
};

// The projections of one input row x (K). With 8-bit activations (float only) the row is quantized once
// and every projection with a quantized copy runs in one parallel region; the others (and the
// f32-activation path) go through linear() one by one.
template <typename T>
void row_projections(const T* x, int64_t K, std::initializer_list<RowProj<T>> projs, bool q8) {
    if constexpr (std::is_same_v<T, float>) {
        if (q8) {
            static thread_local cpu::Q8Activations xq;
            cpu::Q8GemvTask tasks[6];
            HYDRA_ASSERT(projs.size() <= std::size(tasks), "row_projections: {} projections", projs.size());
            size_t n = 0;
            for (const RowProj<T>& p : projs)
                if (p.qw)
                    tasks[n++] = {p.out, p.qw->type, p.qw->bytes.data(), p.M, p.bias};
                else
                    linear(p.out, x, p.W, p.bias, int64_t(1), K, p.M, p.qw);
            if (n > 0) {
                cpu::quantize_activations_q8(xq, x, K);
                cpu::quant_gemv_q8(std::span<const cpu::Q8GemvTask>(tasks, n), xq);
            }
            return;
        }
    }
    for (const RowProj<T>& p : projs) linear(p.out, x, p.W, p.bias, int64_t(1), K, p.M, p.qw);
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
void fire(const LayerRun<T>& run, std::string_view point, T* data, Shape shape) {
    if (run.taps) run.taps->fire(point, data, shape);
}

// RoPE factors of positions pos0 .. pos0+S-1, kept per thread and reused while the key is the same (all
// layers of a step or a decode token, forward and backward). rope_forward with the table is
// bit-identical to the one computing its angles itself. The frequencies come from model/rope_scaling
// for a call reaching length pos0 + S (dynamic NTK reads it; see rope_scaling.h for the cache).
template <typename T>
struct RopeTable {
    int64_t S = -1, pos0 = -1, dim = -1, max_pos = -1;
    double theta = 0;
    RopeScaling scaling;
    std::vector<T> cos, sin;
};
template <typename T>
const RopeTable<T>& rope_table_for(int64_t S, int64_t pos0, const ModelConfig& cfg) {
    static thread_local RopeTable<T> t;
    if (t.S != S || t.pos0 != pos0 || t.dim != cfg.rope_dim || t.theta != cfg.rope_theta ||
        t.max_pos != cfg.max_position_embeddings || !(t.scaling == cfg.rope_scaling)) {
        t.cos.resize(size_t(S * (cfg.rope_dim / 2)));
        t.sin.resize(size_t(S * (cfg.rope_dim / 2)));
        const RopeFrequencies f = rope_frequencies(cfg, pos0 + S);
        cpu::rope_table(t.cos.data(), t.sin.data(), S, cfg.rope_dim, pos0, f.inv_freq.data(),
                        f.attention_scale);
        t.S = S, t.pos0 = pos0, t.dim = cfg.rope_dim, t.theta = cfg.rope_theta;
        t.max_pos = cfg.max_position_embeddings, t.scaling = cfg.rope_scaling;
    }
    return t;
}

// Sequences in parallel when they split evenly over the threads (each call then runs on one thread),
// else one after another with the parallelism inside: the same arithmetic either way.
bool parallel_over_batch(int64_t B) {
    const int threads = omp_get_max_threads();
    return threads > 1 && B > 1 && (B % threads == 0 || B >= 4 * threads);
}

template <typename T>
FusionParams<T> fusion_params(const LayerParams<const T>& w) {
    return {w.fusion_head_scale, w.fusion_fa_scale, w.fusion_la_scale, w.fusion_la_bias};
}

template <typename T>
GdnParams<T> gdn_params(const LayerParams<const T>& w) {
    return {w.conv_q, w.conv_k, w.conv_v, w.A_log, w.dt_bias, w.o_norm};
}

}  // namespace

int64_t layer_saved_values_per_token(const ModelConfig& cfg, const HybridPlan& plan, int64_t layer,
                                     int64_t seq_len, bool recompute_attention) {
    const LayerPlan& lp = plan.layers[size_t(layer)];
    const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, H = cfg.num_heads, Dh = cfg.head_dim;
    const int64_t fa = int64_t(lp.fa_heads.size()), la = int64_t(lp.la_heads.size());
    const int64_t fa_kv = int64_t(plan.fa_kv_groups(cfg, layer).size());
    // x_in, xn1, proj, x_mid, xn2 (C each), rstd1, rstd2; gate, up, act (F each); heads, fused (H Dh each)
    int64_t n = 5 * C + 2 + 3 * F + 2 * H * Dh;
    // FA: q and its output (Dh per head), k and v (Dh per KV group), q / k before their norm (qk_norm), and
    // the attention probabilities (seq_len per head) unless the backward recomputes them
    n += fa * 2 * Dh + fa_kv * 2 * Dh;
    if (cfg.qk_norm) n += (fa + fa_kv) * (Dh + 1);
    if (!recompute_attention) n += fa * seq_len;
    // LA: the q, k, v, z projections and output (Dh per head) and a, b; GdnSaved's q, k, v, o (Dh), its five
    // per-head scalars, and one Dh x Dh state per chunk
    const int64_t chunk = plan.gdn.chunk_size > 0 ? plan.gdn.chunk_size : 64;
    n += la * (5 * Dh + 2) + la * (4 * Dh + 5) + la * Dh * Dh / chunk;
    return n;
}

GdnConfig gdn_config(const GdnSettings& s, int64_t n_la, int64_t head_dim) {
    GdnConfig c;
    c.H = c.HV = n_la;
    c.K = c.V = head_dim;
    c.conv_width = s.conv_size;
    c.allow_neg_eigval = s.allow_neg_eigval;
    c.use_chunked = true;
    c.chunk_size = s.chunk_size;
    c.norm_eps = s.norm_eps;
    return c;
}

template <typename T>
void decoder_layer_mixer(const T* x_in, const ModelConfig& cfg, const HybridPlan& plan,
                         const LayerParams<const T>& w, const LayerRun<T>& run, LayerActs<T>& a) {
    const int64_t B = run.batch, S = run.seq_len, N = B * S, pos0 = run.pos0;
    const int64_t C = cfg.hidden_size, H = cfg.num_heads, Dh = cfg.head_dim, Dq = H * Dh;
    const int64_t n_fa = w.n_fa, n_la = w.n_la, n_kv = w.n_kv;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const double eps = cfg.rms_norm_eps, scale = 1.0 / std::sqrt(double(Dh));
    const bool prefix = run.prefix_k != nullptr;
    const bool rope = !cfg.fa_nope;  // NoPE hybrids: FA heads without positions
    const LayerQuantized* qz = run.quantized;
    HYDRA_ASSERT(N > 0, "decoder layer: no rows");
    HYDRA_ASSERT(!run.cache || B == 1, "decoder layer: a cache holds one sequence, not {}", B);
    HYDRA_ASSERT(run.cache || prefix || pos0 == 0,
                 "decoder layer at pos0 = {} needs the earlier positions' cache", pos0);
    HYDRA_ASSERT(!prefix || (S == 1 && n_la == 0 && w.uniform_groups && !run.cache),
                 "shared-prefix rows: single tokens of a uniform-GQA FA layer without a cache");

    if (run.save) {
        buf(a.x_in, N * C);
        std::memcpy(a.x_in.data(), x_in, size_t(N * C) * sizeof(T));
    }
    T* xn = buf(a.xn1, N * C);
    cpu::rmsnorm_forward(xn, buf(a.rstd1, N), x_in, w.attn_norm, N, C, eps);
    fire(run, "attn_norm", xn, {N, C});
    T* heads = buf(a.heads, N * Dq);

    // FA heads (all heads for the teacher): GQA softmax attention.
    if (n_fa > 0) {
        T* q = buf(a.q, N * Dfa);
        T* k = buf(a.k, N * Dkv);
        T* v = buf(a.v, N * Dkv);
        T* q_out = cfg.qk_norm ? buf(a.q_pre, N * Dfa) : q;
        T* k_out = cfg.qk_norm ? buf(a.k_pre, N * Dkv) : k;
        if (qz && N == 1) {
            row_projections<T>(xn, C,
                               {{q_out, w.wq, w.bq, Dfa, qz->wq},
                                {k_out, w.wk, w.bk, Dkv, qz->wk},
                                {v, w.wv, w.bv, Dkv, qz->wv}},
                               run.q8_activations);
        } else {
            linear(q_out, xn, w.wq, w.bq, N, C, Dfa, qz ? qz->wq : nullptr);
            linear(k_out, xn, w.wk, w.bk, N, C, Dkv, qz ? qz->wk : nullptr);
            linear(v, xn, w.wv, w.bv, N, C, Dkv, qz ? qz->wv : nullptr);
        }
        if (cfg.qk_norm) {
            cpu::rmsnorm_forward(q, buf(a.rstd_q, N * n_fa), q_out, w.q_norm, N * n_fa, Dh, eps);
            cpu::rmsnorm_forward(k, buf(a.rstd_k, N * n_kv), k_out, w.k_norm, N * n_kv, Dh, eps);
        }
        T* out = n_la == 0 ? heads : buf(a.fa_out, N * Dfa);
        if (prefix) {
            HYDRA_CHECK(
                w.fa_window.empty(),
                "the shared-prefix mode (head scoring) runs full-attention layers, not sliding-window heads");
            // Every row sits at position pos0: rotate them as one token with N*n_fa (N*n_kv) heads.
            const RopeTable<T>& rt = rope_table_for<T>(1, pos0, cfg);
            if (rope) {
                cpu::rope_forward(q, 1, N * n_fa, Dh, cfg.rope_dim, rt.cos.data(), rt.sin.data());
                cpu::rope_forward(k, 1, N * n_kv, Dh, cfg.rope_dim, rt.cos.data(), rt.sin.data());
            }
            fire(run, "q", q, {N, n_fa, Dh});
            fire(run, "k", k, {N, n_kv, Dh});
            fire(run, "v", v, {N, n_kv, Dh});
            prefix_attention_forward(out, buf(a.probs, n_kv * N * (n_fa / n_kv) * (pos0 + 1)), q, k, v,
                                     run.prefix_k, run.prefix_v, N, pos0, n_fa, n_kv, Dh, scale);
        } else {
            const RopeTable<T>& rt = rope_table_for<T>(S, pos0, cfg);
            const bool tapped_probs = run.taps && run.taps->wants("attn_probs");
            const int64_t W = pos0 + S;  // keys a row can see
            T* probs = (run.save && !run.recompute_attention) || tapped_probs ? buf(a.probs, B * S * n_fa * W)
                                                                              : nullptr;
            const int32_t* map = w.uniform_groups ? nullptr : w.kv_index.data();
            const int32_t* win = w.fa_window.empty() ? nullptr : w.fa_window.data();
            if (run.cache) {
                if (rope) {
                    cpu::rope_forward(q, S, n_fa, Dh, cfg.rope_dim, rt.cos.data(), rt.sin.data());
                    cpu::rope_forward(k, S, n_kv, Dh, cfg.rope_dim, rt.cos.data(), rt.sin.data());
                }
                fire(run, "q", q, {S, n_fa, Dh});
                fire(run, "k", k, {S, n_kv, Dh});
                fire(run, "v", v, {S, n_kv, Dh});
                std::memcpy(run.cache->k + pos0 * Dkv, k, size_t(S * Dkv) * sizeof(T));
                std::memcpy(run.cache->v + pos0 * Dkv, v, size_t(S * Dkv) * sizeof(T));
                cpu::causal_attention_forward(out, probs, q, (const T*)run.cache->k, (const T*)run.cache->v,
                                              S, pos0, n_fa, n_kv, Dh, scale, map, win, w.window_sinks);
            } else {
                const bool over_batch = parallel_over_batch(B);
#pragma omp parallel for schedule(static) if (over_batch)
                for (int64_t b = 0; b < B; ++b) {
                    if (rope) {
                        cpu::rope_forward(q + b * S * Dfa, S, n_fa, Dh, cfg.rope_dim, rt.cos.data(),
                                          rt.sin.data());
                        cpu::rope_forward(k + b * S * Dkv, S, n_kv, Dh, cfg.rope_dim, rt.cos.data(),
                                          rt.sin.data());
                    }
                }
                fire(run, "q", q, {N, n_fa, Dh});
                fire(run, "k", k, {N, n_kv, Dh});
                fire(run, "v", v, {N, n_kv, Dh});
#pragma omp parallel for schedule(static) if (over_batch)
                for (int64_t b = 0; b < B; ++b)
                    cpu::causal_attention_forward(out + b * S * Dfa,
                                                  probs ? probs + b * S * n_fa * S : nullptr, q + b * S * Dfa,
                                                  k + b * S * Dkv, v + b * S * Dkv, S, int64_t(0), n_fa, n_kv,
                                                  Dh, scale, map, win, w.window_sinks);
            }
            if (tapped_probs) fire(run, "attn_probs", probs, {N, n_fa, W});
        }
        if (n_la > 0) put_cols(heads, Dq, 0, out, Dfa, N);
    }
    // LA heads: Gated DeltaNet, per sequence, continuing the cached state when there is one.
    if (n_la > 0) {
        T* lq = buf(a.la_q, N * Dla);
        T* lk = buf(a.la_k, N * Dla);
        T* lv = buf(a.la_v, N * Dla);
        T* lz = buf(a.la_z, N * Dla);
        T* la = buf(a.la_a, N * n_la);
        T* lb = buf(a.la_b, N * n_la);
        if (qz && N == 1) {  // decode: from the quantized copies where there are some
            row_projections<T>(xn, C,
                               {{lq, w.la_wq, w.la_bq, Dla, qz->la_wq},
                                {lk, w.la_wk, w.la_bk, Dla, qz->la_wk},
                                {lv, w.la_wv, w.la_bv, Dla, qz->la_wv},
                                {lz, w.la_wg, (const T*)nullptr, Dla, qz->la_wg},
                                {la, w.la_wa, (const T*)nullptr, n_la, qz->la_wa},
                                {lb, w.la_wb, (const T*)nullptr, n_la, qz->la_wb}},
                               run.q8_activations);
        } else {
            cpu::linear_forward(lq, xn, w.la_wq, w.la_bq, N, C, Dla);
            cpu::linear_forward(lk, xn, w.la_wk, w.la_bk, N, C, Dla);
            cpu::linear_forward(lv, xn, w.la_wv, w.la_bv, N, C, Dla);
            cpu::linear_forward(lz, xn, w.la_wg, (const T*)nullptr, N, C, Dla);
            cpu::linear_forward(la, xn, w.la_wa, (const T*)nullptr, N, C, n_la);
            cpu::linear_forward(lb, xn, w.la_wb, (const T*)nullptr, N, C, n_la);
        }
        const GdnConfig gc = gdn_config(plan.gdn, n_la, Dh);
        const GdnParams<T> gp = gdn_params(w);
        const GdnStateView<T>* state = run.cache ? &run.cache->gdn : nullptr;
        if (run.save) a.gdn.assign(size_t(B), GdnSaved<T>());
        T* la_out = buf(a.la_out, N * Dla);
        for (int64_t b = 0; b < B; ++b) {
            const int64_t r = b * S;
            const GdnInputs<T> in{lq + r * Dla,  lk + r * Dla,  lv + r * Dla,
                                  la + r * n_la, lb + r * n_la, lz + r * Dla};
            gdn_block_forward(la_out + r * Dla, gc, gp, in, S, state, state,
                              run.save ? &a.gdn[size_t(b)] : (GdnSaved<T>*)nullptr);
        }
        put_cols(heads, Dq, Dfa, la_out, Dla, N);
    }
    fire(run, "head_out", heads, {N, H, Dh});
}

template <typename T>
void decoder_layer_block(T* x_out, const T* x_in, const ModelConfig& cfg, const HybridPlan& plan,
                         const LayerParams<const T>& w, const LayerRun<T>& run, LayerActs<T>& a) {
    const int64_t N = run.batch * run.seq_len;
    const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, H = cfg.num_heads, Dh = cfg.head_dim,
                  Dq = H * Dh;
    const double eps = cfg.rms_norm_eps;
    const LayerQuantized* qz = run.quantized;
    const T* mixed = buf(a.heads, N * Dq);
    if (fusion_active(plan.fusion, w.n_la)) {
        T* fused = buf(a.fused, N * Dq);
        fusion_forward(fused, mixed, N, w.n_fa, w.n_la, Dh, plan.fusion, fusion_params(w), eps);
        fire(run, "fused_out", fused, {N, H, Dh});
        mixed = fused;
    }
    T* proj = buf(a.proj, N * C);
    const bool q8 = qz && N == 1 && run.q8_activations;
    if (q8)
        row_projections<T>(mixed, Dq, {{proj, w.wo, (const T*)nullptr, C, qz->wo}}, true);
    else
        linear(proj, mixed, w.wo, (const T*)nullptr, N, Dq, C, qz ? qz->wo : nullptr);
    fire(run, "attn_out", proj, {N, C});
    T* x_mid = buf(a.x_mid, N * C);
    for (int64_t i = 0; i < N * C; ++i) x_mid[i] = x_in[i] + proj[i];
    fire(run, "resid_mid", x_mid, {N, C});

    T* xn = buf(a.xn2, N * C);
    cpu::rmsnorm_forward(xn, buf(a.rstd2, N), x_mid, w.ffn_norm, N, C, eps);
    fire(run, "ffn_norm", xn, {N, C});
    T* gate = buf(a.gate, N * F);
    T* up = buf(a.up, N * F);
    T* act = buf(a.act, N * F);
    if (q8) {
        row_projections<T>(xn, C,
                           {{gate, w.w_gate, (const T*)nullptr, F, qz->w_gate},
                            {up, w.w_up, (const T*)nullptr, F, qz->w_up}},
                           true);
    } else {
        linear(gate, xn, w.w_gate, (const T*)nullptr, N, C, F, qz ? qz->w_gate : nullptr);
        linear(up, xn, w.w_up, (const T*)nullptr, N, C, F, qz ? qz->w_up : nullptr);
    }
    cpu::swiglu_forward(act, gate, up, N * F);
    if (q8)
        row_projections<T>(act, F, {{proj, w.w_down, (const T*)nullptr, C, qz->w_down}}, true);
    else
        linear(proj, act, w.w_down, (const T*)nullptr, N, F, C, qz ? qz->w_down : nullptr);
    fire(run, "ffn_out", proj, {N, C});
    for (int64_t i = 0; i < N * C; ++i) x_out[i] = x_mid[i] + proj[i];
    fire(run, "resid_out", x_out, {N, C});
}

template <typename T>
void decoder_layer_forward(T* x_out, const T* x_in, const ModelConfig& cfg, const HybridPlan& plan,
                           const LayerParams<const T>& w, const LayerRun<T>& run, LayerActs<T>& a) {
    decoder_layer_mixer(x_in, cfg, plan, w, run, a);
    decoder_layer_block(x_out, x_in, cfg, plan, w, run, a);
}

template <typename T>
void decoder_layer_backward(T* dx, const ModelConfig& cfg, const HybridPlan& plan,
                            const LayerParams<const T>& w, const LayerParams<T>& g, const LayerRun<T>& run,
                            LayerActs<T>& a, T* d_heads) {
    const int64_t B = run.batch, S = run.seq_len, N = B * S, pos0 = run.pos0;
    const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, H = cfg.num_heads, Dh = cfg.head_dim,
                  Dq = H * Dh;
    const int64_t n_fa = w.n_fa, n_la = w.n_la, n_kv = w.n_kv;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const double eps = cfg.rms_norm_eps, scale = 1.0 / std::sqrt(double(Dh));
    const bool prefix = run.prefix_k != nullptr;
    const bool rope = !cfg.fa_nope;  // NoPE hybrids: FA heads without positions
    HYDRA_ASSERT(!run.cache, "decoder layer backward: not through a cache");
    HYDRA_ASSERT(int64_t(a.x_in.size()) >= N * C, "decoder layer backward without a saving forward");
    struct Scratch {
        std::vector<T> dxn, dact, dheads, dq, dk, dv, dla, lq, lk, lv, lz, la, lb;
    };
    static thread_local Scratch s;
    T* dxn = buf(s.dxn, N * C);

    // x_out = x_mid + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_mid)
    // dgate overwrites d act, dup overwrites the saved `up` (both read elementwise before written).
    T* d_act = buf(s.dact, N * F);
    cpu::linear_backward(d_act, g.w_down, (T*)nullptr, dx, a.act.data(), w.w_down, N, F, C);
    T* dgate = d_act;
    T* dup = a.up.data();
    cpu::swiglu_backward(dgate, dup, d_act, a.gate.data(), a.up.data(), N * F);
    cpu::linear_backward(dxn, g.w_gate, (T*)nullptr, dgate, a.xn2.data(), w.w_gate, N, C, F);
    cpu::linear_backward(dxn, g.w_up, (T*)nullptr, dup, a.xn2.data(), w.w_up, N, C, F, true);
    cpu::rmsnorm_backward(dx, g.ffn_norm, dxn, a.x_mid.data(), w.ffn_norm, a.rstd2.data(), N, C,
                          true);  // d x_mid

    // x_mid = x_in + o_proj(fusion(heads))
    T* dheads = d_heads ? d_heads : buf(s.dheads, N * Dq);
    const bool fused = fusion_active(plan.fusion, n_la);
    cpu::linear_backward(dheads, g.wo, (T*)nullptr, dx, fused ? a.fused.data() : a.heads.data(), w.wo, N, Dq,
                         C);
    if (fused) {
        const FusionGrads<T> fg{g.fusion_head_scale, g.fusion_fa_scale, g.fusion_la_scale, g.fusion_la_bias};
        fusion_backward(dheads, fg, dheads, a.heads.data(), N, n_fa, n_la, Dh, plan.fusion, fusion_params(w),
                        eps);
    }
    const T* xn = a.xn1.data();
    bool first = true;  // the first input-gradient contribution overwrites dxn, later ones add

    if (n_fa > 0) {
        const T* dfa = dheads;
        if (n_la > 0) {
            T* cols = buf(a.fa_out, N * Dfa);
            get_cols(cols, dheads, Dq, 0, Dfa, N);
            dfa = cols;
        }
        T* dq = buf(s.dq, N * Dfa);
        T* dk = buf(s.dk, N * Dkv);
        T* dv = buf(s.dv, N * Dkv);
        if (prefix) {
            prefix_attention_backward(dq, dk, dv, dfa, a.probs.data(), a.q.data(), a.k.data(), a.v.data(),
                                      run.prefix_k, run.prefix_v, N, pos0, n_fa, n_kv, Dh, scale);
            const RopeTable<T>& rt = rope_table_for<T>(1, pos0, cfg);
            if (rope) {
                cpu::rope_backward(dq, 1, N * n_fa, Dh, cfg.rope_dim, rt.cos.data(), rt.sin.data());
                cpu::rope_backward(dk, 1, N * n_kv, Dh, cfg.rope_dim, rt.cos.data(), rt.sin.data());
            }
        } else {
            const RopeTable<T>& rt = rope_table_for<T>(S, 0, cfg);
            const bool keep_probs = !run.recompute_attention;
            const int32_t* map = w.uniform_groups ? nullptr : w.kv_index.data();
#pragma omp parallel for schedule(static) if (parallel_over_batch(B))
            for (int64_t b = 0; b < B; ++b) {
                const int64_t qo = b * S * Dfa, ko = b * S * Dkv;
                cpu::causal_attention_backward(
                    dq + qo, dk + ko, dv + ko, dfa + qo, a.q.data() + qo, a.k.data() + ko, a.v.data() + ko,
                    keep_probs ? a.probs.data() + b * S * n_fa * S : nullptr, S, n_fa, n_kv, Dh, scale, map,
                    w.fa_window.empty() ? nullptr : w.fa_window.data(), w.window_sinks);
                if (rope) {
                    cpu::rope_backward(dq + qo, S, n_fa, Dh, cfg.rope_dim, rt.cos.data(), rt.sin.data());
                    cpu::rope_backward(dk + ko, S, n_kv, Dh, cfg.rope_dim, rt.cos.data(), rt.sin.data());
                }
            }
        }
        if (cfg.qk_norm) {
            cpu::rmsnorm_backward(dq, g.q_norm, dq, a.q_pre.data(), w.q_norm, a.rstd_q.data(), N * n_fa, Dh);
            cpu::rmsnorm_backward(dk, g.k_norm, dk, a.k_pre.data(), w.k_norm, a.rstd_k.data(), N * n_kv, Dh);
        }
        cpu::linear_backward(dxn, g.wq, g.bq, dq, xn, w.wq, N, C, Dfa);
        cpu::linear_backward(dxn, g.wk, g.bk, dk, xn, w.wk, N, C, Dkv, true);
        cpu::linear_backward(dxn, g.wv, g.bv, dv, xn, w.wv, N, C, Dkv, true);
        first = false;
    }
    if (n_la > 0) {
        T* dla = buf(s.dla, N * Dla);
        get_cols(dla, dheads, Dq, Dfa, Dla, N);
        T* dlq = buf(s.lq, N * Dla);
        T* dlk = buf(s.lk, N * Dla);
        T* dlv = buf(s.lv, N * Dla);
        T* dlz = buf(s.lz, N * Dla);
        T* dla_a = buf(s.la, N * n_la);
        T* dla_b = buf(s.lb, N * n_la);
        const GdnConfig gc = gdn_config(plan.gdn, n_la, Dh);
        const GdnParams<T> gp = gdn_params(w);
        const GdnParamGrads<T> gg{g.conv_q, g.conv_k, g.conv_v, g.A_log, g.dt_bias, g.o_norm};
        for (int64_t b = 0; b < B; ++b) {
            const int64_t r = b * S;
            const GdnInputs<T> in{a.la_q.data() + r * Dla,  a.la_k.data() + r * Dla,
                                  a.la_v.data() + r * Dla,  a.la_a.data() + r * n_la,
                                  a.la_b.data() + r * n_la, a.la_z.data() + r * Dla};
            const GdnInputGrads<T> din{dlq + r * Dla,    dlk + r * Dla,    dlv + r * Dla,
                                       dla_a + r * n_la, dla_b + r * n_la, dlz + r * Dla};
            gdn_block_backward(din, gg, (const GdnStateView<T>*)nullptr, dla + r * Dla,
                               (const GdnStateView<T>*)nullptr, gc, gp, in, S, a.gdn[size_t(b)]);
        }
        cpu::linear_backward(dxn, g.la_wq, g.la_bq, dlq, xn, w.la_wq, N, C, Dla, !first);
        cpu::linear_backward(dxn, g.la_wk, g.la_bk, dlk, xn, w.la_wk, N, C, Dla, true);
        cpu::linear_backward(dxn, g.la_wv, g.la_bv, dlv, xn, w.la_wv, N, C, Dla, true);
        cpu::linear_backward(dxn, g.la_wg, (T*)nullptr, dlz, xn, w.la_wg, N, C, Dla, true);
        cpu::linear_backward(dxn, g.la_wa, (T*)nullptr, dla_a, xn, w.la_wa, N, C, n_la, true);
        cpu::linear_backward(dxn, g.la_wb, (T*)nullptr, dla_b, xn, w.la_wb, N, C, n_la, true);
    }
    cpu::rmsnorm_backward(dx, g.attn_norm, dxn, a.x_in.data(), w.attn_norm, a.rstd1.data(), N, C,
                          true);  // d x_in
}

#define HYDRA_LAYER_INSTANCES(T)                                                                            \
    template void decoder_layer_forward<T>(T*, const T*, const ModelConfig&, const HybridPlan&,             \
                                           const LayerParams<const T>&, const LayerRun<T>&, LayerActs<T>&); \
    template void decoder_layer_mixer<T>(const T*, const ModelConfig&, const HybridPlan&,                   \
                                         const LayerParams<const T>&, const LayerRun<T>&, LayerActs<T>&);   \
    template void decoder_layer_block<T>(T*, const T*, const ModelConfig&, const HybridPlan&,               \
                                         const LayerParams<const T>&, const LayerRun<T>&, LayerActs<T>&);   \
    template void decoder_layer_backward<T>(T*, const ModelConfig&, const HybridPlan&,                      \
                                            const LayerParams<const T>&, const LayerParams<T>&,             \
                                            const LayerRun<T>&, LayerActs<T>&, T*);
HYDRA_LAYER_INSTANCES(float)
HYDRA_LAYER_INSTANCES(double)
#undef HYDRA_LAYER_INSTANCES

}  // namespace hydra
