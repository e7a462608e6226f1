// Llama-family forward pass (see llama_forward.h). Per layer:
//   x -> RMSNorm -> q,k,v (+bias) -> [q/k RMSNorm] -> RoPE -> cache -> causal GQA -> o_proj -> +x
//     -> RMSNorm -> gate,up -> silu(gate)*up -> down -> +x
#include "model/llama_forward.h"

#include <cmath>
#include <cstring>

#include "ops/cpu/attention.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/quant_gemv.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

namespace hydra {

namespace {

// out (T, N) = x (T, K) @ W^T (+ bias), from the quantized copy for single-token steps when allowed.
void linear(float* out, const float* x, const Tensor& w, const QuantizedWeight& qw, int64_t T, int64_t K, int64_t N,
            bool quantized, const Tensor& bias = Tensor()) {
    if (quantized && T == 1 && !qw.empty()) {
        cpu::quant_gemv(out, qw.type, qw.bytes.data(), x, N, K);
        if (!bias.empty())
            for (int64_t n = 0; n < N; ++n) out[n] += bias.f32()[n];
        return;
    }
    cpu::linear_forward(out, x, w.f32(), bias.empty() ? nullptr : bias.f32(), T, K, N);
}

void fire(const ForwardOptions& options, const char* point, int layer, Tensor& value) {
    if (options.taps && !options.taps->empty()) options.taps->fire(point, layer, value);
}

}  // namespace

Tensor forward_hidden(const LlamaModel& model, std::span<const int32_t> tokens, KVCache& cache,
                      const ForwardOptions& options) {
    const ModelConfig& cfg = model.config();
    const int64_t T = int64_t(tokens.size());
    const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, H = cfg.num_heads, Hkv = cfg.num_kv_heads;
    const int64_t Dh = cfg.head_dim, Dq = cfg.q_dim(), Dkv = cfg.kv_dim();
    const int64_t pos0 = cache.pos();
    HYDRA_CHECK(T > 0, "forward: no tokens");
    HYDRA_CHECK(pos0 + T <= cache.capacity(), "context overflow: {} cached + {} new tokens exceed the cache of {}",
                pos0, T, cache.capacity());
    for (int64_t t = 0; t < T; ++t)
        HYDRA_CHECK(tokens[size_t(t)] >= 0 && tokens[size_t(t)] < cfg.vocab_size,
                    "token id {} at position {} is outside the vocabulary (0..{})", tokens[size_t(t)], t,
                    cfg.vocab_size - 1);

    Tensor x = Tensor::zeros({T, C});       // residual stream
    Tensor xn = Tensor::zeros({T, C});      // normed input of a sub-block
    Tensor q = Tensor::zeros({T, H, Dh});
    Tensor k = Tensor::zeros({T, Hkv, Dh});
    Tensor v = Tensor::zeros({T, Hkv, Dh});
    Tensor heads = Tensor::zeros({T, H, Dh});
    Tensor proj = Tensor::zeros({T, C});
    Tensor gate = Tensor::zeros({T, F});
    Tensor up = Tensor::zeros({T, F});

    const float* embed = model.embedding().f32();
    for (int64_t t = 0; t < T; ++t)
        std::memcpy(x.f32() + t * C, embed + int64_t(tokens[size_t(t)]) * C, size_t(C) * sizeof(float));
    fire(options, "embed", -1, x);

    const double scale = 1.0 / std::sqrt(double(Dh));
    const bool taps = options.taps && !options.taps->empty();
    const bool qd = options.quantized_decode;
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
        const LayerWeights& w = model.layer(l);
        const int li = int(l);
        cpu::rmsnorm_forward(xn.f32(), (float*)nullptr, x.f32(), w.attn_norm.f32(), T, C, cfg.rms_norm_eps);
        fire(options, "attn_norm", li, xn);

        linear(q.f32(), xn.f32(), w.wq, w.qwq, T, C, Dq, qd, w.bq);
        linear(k.f32(), xn.f32(), w.wk, w.qwk, T, C, Dkv, qd, w.bk);
        linear(v.f32(), xn.f32(), w.wv, w.qwv, T, C, Dkv, qd, w.bv);
        if (cfg.qk_norm) {
            cpu::rmsnorm_forward(q.f32(), (float*)nullptr, q.f32(), w.q_norm.f32(), T * H, Dh, cfg.rms_norm_eps);
            cpu::rmsnorm_forward(k.f32(), (float*)nullptr, k.f32(), w.k_norm.f32(), T * Hkv, Dh, cfg.rms_norm_eps);
        }
        cpu::rope_forward(q.f32(), T, H, Dh, cfg.rope_dim, pos0, cfg.rope_theta);
        cpu::rope_forward(k.f32(), T, Hkv, Dh, cfg.rope_dim, pos0, cfg.rope_theta);
        fire(options, "q", li, q);
        fire(options, "k", li, k);
        fire(options, "v", li, v);

        std::memcpy(cache.k(l) + pos0 * Dkv, k.f32(), size_t(T * Dkv) * sizeof(float));
        std::memcpy(cache.v(l) + pos0 * Dkv, v.f32(), size_t(T * Dkv) * sizeof(float));
        Tensor probs;
        if (taps && options.taps->wants("attn_probs", li)) probs = Tensor::zeros({T, H, pos0 + T});
        cpu::causal_attention_forward(heads.f32(), probs.empty() ? (float*)nullptr : probs.f32(), q.f32(),
                                      cache.k(l), cache.v(l), T, pos0, H, Hkv, Dh, scale);
        if (!probs.empty()) fire(options, "attn_probs", li, probs);
        fire(options, "head_out", li, heads);

        linear(proj.f32(), heads.f32(), w.wo, w.qwo, T, Dq, C, qd);
        fire(options, "attn_out", li, proj);
        float* xs = x.f32();
        const float* ps = proj.f32();
        for (int64_t i = 0; i < T * C; ++i) xs[i] += ps[i];
        fire(options, "resid_mid", li, x);

        cpu::rmsnorm_forward(xn.f32(), (float*)nullptr, x.f32(), w.ffn_norm.f32(), T, C, cfg.rms_norm_eps);
        fire(options, "ffn_norm", li, xn);
        linear(gate.f32(), xn.f32(), w.w_gate, w.qw_gate, T, C, F, qd);
        linear(up.f32(), xn.f32(), w.w_up, w.qw_up, T, C, F, qd);
        cpu::swiglu_forward(gate.f32(), gate.f32(), up.f32(), T * F);
        linear(proj.f32(), gate.f32(), w.w_down, w.qw_down, T, F, C, qd);
        fire(options, "ffn_out", li, proj);
        for (int64_t i = 0; i < T * C; ++i) xs[i] += ps[i];
        fire(options, "resid_out", li, x);
    }
    cache.advance(T);
    cpu::rmsnorm_forward(x.f32(), (float*)nullptr, x.f32(), model.final_norm().f32(), T, C, cfg.rms_norm_eps);
    fire(options, "final_norm", -1, x);
    return x;
}

Tensor compute_logits(const LlamaModel& model, const Tensor& hidden, bool quantized_decode) {
    const int64_t N = hidden.dim(0), C = model.config().hidden_size, V = model.config().vocab_size;
    HYDRA_ASSERT(hidden.dim(1) == C, "hidden width {} != {}", hidden.dim(1), C);
    Tensor logits = Tensor::zeros({N, V});
    linear(logits.f32(), hidden.f32(), model.lm_head(), model.quantized_lm_head(), N, C, V, quantized_decode);
    return logits;
}

Tensor forward_last_logits(const LlamaModel& model, std::span<const int32_t> tokens, KVCache& cache,
                           const ForwardOptions& options) {
    Tensor hidden = forward_hidden(model, tokens, cache, options);
    const int64_t T = hidden.dim(0);
    return compute_logits(model, hidden.rows(T - 1, T), options.quantized_decode && T == 1)
        .reshaped({model.config().vocab_size});
}

}  // namespace hydra
