// Whole-prompt teacher forward for head scoring (see fa_forward.h). The op sequence mirrors
// model/llama_forward.cpp for the all-FA case so the float run matches the engine to rounding.
#include "interp/fa_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

namespace hydra {

namespace {

template <typename T>
void resize(std::vector<T>& v, int64_t n) {
    v.resize(size_t(n));
}

}  // namespace

template <typename T>
void fa_layer_forward(const FaWeights<T>& w, int64_t layer, T* x, int64_t N, FaLayerActs<T>& a,
                      const HeadHook<T>& hook, int64_t pos0, T* k_cache, T* v_cache) {
    const ModelConfig& c = w.config();
    const FaLayerWeights<T>& p = w.layer(layer);
    const int64_t C = c.hidden_size, F = c.intermediate_size, H = c.num_heads, Hkv = c.num_kv_heads;
    const int64_t Dh = c.head_dim;
    resize(a.xn1, N * C), resize(a.rstd1, N), resize(a.q, N * H * Dh), resize(a.k, N * Hkv * Dh);
    resize(a.v, N * Hkv * Dh), resize(a.heads, N * H * Dh), resize(a.x_mid, N * C), resize(a.xn2, N * C);
    resize(a.rstd2, N), resize(a.gate, N * F), resize(a.up, N * F), resize(a.act, N * F),
        resize(a.proj, N * C);

    cpu::rmsnorm_forward(a.xn1.data(), a.rstd1.data(), x, p.attn_norm, N, C, c.rms_norm_eps);
    cpu::linear_forward(a.q.data(), a.xn1.data(), p.wq, p.bq, N, C, H * Dh);
    cpu::linear_forward(a.k.data(), a.xn1.data(), p.wk, p.bk, N, C, Hkv * Dh);
    cpu::linear_forward(a.v.data(), a.xn1.data(), p.wv, p.bv, N, C, Hkv * Dh);
    if (c.qk_norm) {
        a.q_pre = a.q;
        a.k_pre = a.k;
        resize(a.rstd_q, N * H), resize(a.rstd_k, N * Hkv);
        cpu::rmsnorm_forward(a.q.data(), a.rstd_q.data(), a.q_pre.data(), p.q_norm, N * H, Dh,
                             c.rms_norm_eps);
        cpu::rmsnorm_forward(a.k.data(), a.rstd_k.data(), a.k_pre.data(), p.k_norm, N * Hkv, Dh,
                             c.rms_norm_eps);
    }
    cpu::rope_forward(a.q.data(), N, H, Dh, c.rope_dim, pos0, c.rope_theta);
    cpu::rope_forward(a.k.data(), N, Hkv, Dh, c.rope_dim, pos0, c.rope_theta);
    HYDRA_ASSERT(k_cache || pos0 == 0, "a layer at pos0 = {} needs the cache of the earlier positions", pos0);
    const T* K = a.k.data();
    const T* V = a.v.data();
    if (k_cache) {
        std::memcpy(k_cache + pos0 * Hkv * Dh, a.k.data(), size_t(N * Hkv * Dh) * sizeof(T));
        std::memcpy(v_cache + pos0 * Hkv * Dh, a.v.data(), size_t(N * Hkv * Dh) * sizeof(T));
        K = k_cache, V = v_cache;
    }
    cpu::causal_attention_forward(a.heads.data(), (T*)nullptr, a.q.data(), K, V, N, pos0, H, Hkv, Dh,
                                  1.0 / std::sqrt(double(Dh)));
    if (hook) hook(layer, a.heads.data());

    cpu::linear_forward(a.proj.data(), a.heads.data(), p.wo, (const T*)nullptr, N, H * Dh, C);
    for (int64_t i = 0; i < N * C; ++i) a.x_mid[size_t(i)] = x[i] + a.proj[size_t(i)];
    cpu::rmsnorm_forward(a.xn2.data(), a.rstd2.data(), a.x_mid.data(), p.ffn_norm, N, C, c.rms_norm_eps);
    cpu::linear_forward(a.gate.data(), a.xn2.data(), p.w_gate, (const T*)nullptr, N, C, F);
    cpu::linear_forward(a.up.data(), a.xn2.data(), p.w_up, (const T*)nullptr, N, C, F);
    cpu::swiglu_forward(a.act.data(), a.gate.data(), a.up.data(), N * F);
    cpu::linear_forward(a.proj.data(), a.act.data(), p.w_down, (const T*)nullptr, N, F, C);
    for (int64_t i = 0; i < N * C; ++i) x[i] = a.x_mid[size_t(i)] + a.proj[size_t(i)];
}

template <typename T>
FaRun<T> fa_forward(const FaWeights<T>& w, std::span<const int32_t> tokens, bool save_all_positions,
                    const HeadHook<T>& hook, const FaRun<T>* share, std::span<const int32_t> share_tokens) {
    const ModelConfig& c = w.config();
    const int64_t N = int64_t(tokens.size()), C = c.hidden_size, HDh = c.num_heads * c.head_dim;
    const int64_t KVD = c.num_kv_heads * c.head_dim;
    HYDRA_CHECK(N > 0, "head scoring: empty prompt");
    for (int64_t t = 0; t < N; ++t)
        HYDRA_CHECK(tokens[size_t(t)] >= 0 && tokens[size_t(t)] < c.vocab_size,
                    "token id {} at position {} is outside the vocabulary (0..{})", tokens[size_t(t)], t,
                    c.vocab_size - 1);
    FaRun<T> run;
    run.num_tokens = N;
    run.saved_from = save_all_positions ? 0 : N - 1;
    // Positions [0, p) come from `share`; at least the answer position is always computed.
    int64_t p = 0;
    if (share) {
        HYDRA_ASSERT(!hook, "a shared prefix cannot be combined with a head hook");
        HYDRA_ASSERT(int64_t(share_tokens.size()) == share->num_tokens,
                     "shared run of {} tokens, {} ids given", share->num_tokens, share_tokens.size());
        while (p < N - 1 && p < int64_t(share_tokens.size()) && tokens[size_t(p)] == share_tokens[size_t(p)])
            ++p;
        if (p > run.saved_from && share->saved_from > run.saved_from) p = 0;  // rows we need were not kept
    }
    run.shared_prefix = p;
    const int64_t n = N - p, R = run.saved_rows(), from = run.saved_from;
    const int64_t old_from = share ? share->saved_from : 0;

    std::vector<T> x(static_cast<size_t>(n * C));
    for (int64_t t = 0; t < n; ++t)
        std::memcpy(x.data() + t * C, w.embedding() + int64_t(tokens[size_t(p + t)]) * C,
                    size_t(C) * sizeof(T));
    // Rows [from, N) of an (N, width) quantity whose rows [p, N) are `fresh` and earlier ones in `old`.
    auto saved_rows = [&](const std::vector<T>* old, const T* fresh, int64_t width) {
        std::vector<T> out(static_cast<size_t>(R * width));
        for (int64_t t = from; t < N; ++t) {
            const T* src = t >= p ? fresh + (t - p) * width : old->data() + (t - old_from) * width;
            std::memcpy(out.data() + (t - from) * width, src, size_t(width) * sizeof(T));
        }
        return out;
    };
    FaLayerActs<T> acts;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        run.x_in.push_back(saved_rows(share ? &share->x_in[size_t(l)] : nullptr, x.data(), C));
        run.k.emplace_back(static_cast<size_t>(N * KVD));
        run.v.emplace_back(static_cast<size_t>(N * KVD));
        if (p > 0) {
            std::memcpy(run.k.back().data(), share->k[size_t(l)].data(), size_t(p * KVD) * sizeof(T));
            std::memcpy(run.v.back().data(), share->v[size_t(l)].data(), size_t(p * KVD) * sizeof(T));
        }
        fa_layer_forward(w, l, x.data(), n, acts, hook, p, run.k.back().data(), run.v.back().data());
        run.heads.push_back(saved_rows(share ? &share->heads[size_t(l)] : nullptr, acts.heads.data(), HDh));
    }
    run.x_final = saved_rows(share ? &share->x_final : nullptr, x.data(), C);
    return run;
}

template void fa_layer_forward<float>(const FaWeights<float>&, int64_t, float*, int64_t, FaLayerActs<float>&,
                                      const HeadHook<float>&, int64_t, float*, float*);
template void fa_layer_forward<double>(const FaWeights<double>&, int64_t, double*, int64_t,
                                       FaLayerActs<double>&, const HeadHook<double>&, int64_t, double*,
                                       double*);
template FaRun<float> fa_forward<float>(const FaWeights<float>&, std::span<const int32_t>, bool,
                                        const HeadHook<float>&, const FaRun<float>*,
                                        std::span<const int32_t>);
template FaRun<double> fa_forward<double>(const FaWeights<double>&, std::span<const int32_t>, bool,
                                          const HeadHook<double>&, const FaRun<double>*,
                                          std::span<const int32_t>);

}  // namespace hydra
