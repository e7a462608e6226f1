// Whole-prompt teacher forward for head scoring (see fa_forward.h). The op sequence mirrors
// model/llama_forward.cpp for the all-FA case so the float run matches the engine to rounding.
#include "interp/fa_forward.h"

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
                      const HeadHook<T>& hook) {
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
    cpu::rope_forward(a.q.data(), N, H, Dh, c.rope_dim, 0, c.rope_theta);
    cpu::rope_forward(a.k.data(), N, Hkv, Dh, c.rope_dim, 0, c.rope_theta);
    cpu::causal_attention_forward(a.heads.data(), (T*)nullptr, a.q.data(), a.k.data(), a.v.data(), N, 0, H,
                                  Hkv, Dh, 1.0 / std::sqrt(double(Dh)));
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
                    const HeadHook<T>& hook) {
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
    const int64_t R = run.saved_rows(), from = run.saved_from;

    std::vector<T> x(static_cast<size_t>(N * C));
    for (int64_t t = 0; t < N; ++t)
        std::memcpy(x.data() + t * C, w.embedding() + int64_t(tokens[size_t(t)]) * C, size_t(C) * sizeof(T));
    FaLayerActs<T> acts;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        run.x_in.emplace_back(x.begin() + from * C, x.end());
        fa_layer_forward(w, l, x.data(), N, acts, hook);
        run.k.push_back(acts.k);
        run.v.push_back(acts.v);
        run.heads.emplace_back(acts.heads.begin() + from * HDh, acts.heads.end());
        HYDRA_ASSERT(int64_t(run.k.back().size()) == N * KVD && int64_t(run.heads.back().size()) == R * HDh,
                     "layer {} saved sizes", l);
    }
    run.x_final.assign(x.begin() + from * C, x.end());
    return run;
}

template void fa_layer_forward<float>(const FaWeights<float>&, int64_t, float*, int64_t, FaLayerActs<float>&,
                                      const HeadHook<float>&);
template void fa_layer_forward<double>(const FaWeights<double>&, int64_t, double*, int64_t,
                                       FaLayerActs<double>&, const HeadHook<double>&);
template FaRun<float> fa_forward<float>(const FaWeights<float>&, std::span<const int32_t>, bool,
                                        const HeadHook<float>&);
template FaRun<double> fa_forward<double>(const FaWeights<double>&, std::span<const int32_t>, bool,
                                          const HeadHook<double>&);

}  // namespace hydra
