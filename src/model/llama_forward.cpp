// Llama-family / HydraHead forward pass (see llama_forward.h). Per layer:
//   x -> RMSNorm -> FA heads: q,k,v (+bias) -> [q/k RMSNorm] -> RoPE -> cache -> causal GQA
//                   LA heads: Gated DeltaNet (model/gdn_heads.h) with its cached state
//     -> [fusion] -> o_proj -> +x -> RMSNorm -> gate,up -> silu(gate)*up -> down -> +x
// The teacher (every head FA) runs exactly the llama computation: same ops, same shapes.
#include "model/llama_forward.h"

#include <cmath>
#include <cstring>

#include "model/fusion.h"
#include "model/gdn_heads.h"
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
    const int64_t C = cfg.hidden_size, F = cfg.intermediate_size, H = cfg.num_heads;
    const int64_t Dh = cfg.head_dim, Dq = cfg.q_dim();
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
        const int64_t n_fa = w.n_fa, n_la = w.n_la, n_kv = w.n_fa_kv;
        HYDRA_ASSERT(cache.kv_heads(l) == n_kv, "cache layer {} holds {} KV heads, the model {}", l, cache.kv_heads(l),
                     n_kv);
        cpu::rmsnorm_forward(xn.f32(), (float*)nullptr, x.f32(), w.attn_norm.f32(), T, C, cfg.rms_norm_eps);
        fire(options, "attn_norm", li, xn);

        // FA heads (all heads for the teacher): GQA softmax attention over the cached KV groups.
        if (n_fa > 0) {
            Tensor q = Tensor::zeros({T, n_fa, Dh});
            Tensor k = Tensor::zeros({T, n_kv, Dh});
            Tensor v = Tensor::zeros({T, n_kv, Dh});
            linear(q.f32(), xn.f32(), w.wq, w.qwq, T, C, n_fa * Dh, qd, w.bq);
            linear(k.f32(), xn.f32(), w.wk, w.qwk, T, C, n_kv * Dh, qd, w.bk);
            linear(v.f32(), xn.f32(), w.wv, w.qwv, T, C, n_kv * Dh, qd, w.bv);
            if (cfg.qk_norm) {
                cpu::rmsnorm_forward(q.f32(), (float*)nullptr, q.f32(), w.q_norm.f32(), T * n_fa, Dh, cfg.rms_norm_eps);
                cpu::rmsnorm_forward(k.f32(), (float*)nullptr, k.f32(), w.k_norm.f32(), T * n_kv, Dh, cfg.rms_norm_eps);
            }
            cpu::rope_forward(q.f32(), T, n_fa, Dh, cfg.rope_dim, pos0, cfg.rope_theta);
            cpu::rope_forward(k.f32(), T, n_kv, Dh, cfg.rope_dim, pos0, cfg.rope_theta);
            fire(options, "q", li, q);
            fire(options, "k", li, k);
            fire(options, "v", li, v);

            const int64_t Dkv = n_kv * Dh;
            std::memcpy(cache.k(l) + pos0 * Dkv, k.f32(), size_t(T * Dkv) * sizeof(float));
            std::memcpy(cache.v(l) + pos0 * Dkv, v.f32(), size_t(T * Dkv) * sizeof(float));
            Tensor probs;
            if (taps && options.taps->wants("attn_probs", li)) probs = Tensor::zeros({T, n_fa, pos0 + T});
            // Uniform GQA grouping needs no map; head-granular plans may give groups of unequal size.
            const bool uniform = n_fa % n_kv == 0 && [&] {
                for (int64_t h = 0; h < n_fa; ++h)
                    if (w.fa_kv_index[size_t(h)] != h / (n_fa / n_kv)) return false;
                return true;
            }();
            Tensor fa_out = n_la == 0 ? heads : Tensor::zeros({T, n_fa, Dh});
            cpu::causal_attention_forward(fa_out.f32(), probs.empty() ? (float*)nullptr : probs.f32(), q.f32(),
                                          cache.k(l), cache.v(l), T, pos0, n_fa, n_kv, Dh, scale,
                                          uniform ? nullptr : w.fa_kv_index.data());
            if (!probs.empty()) fire(options, "attn_probs", li, probs);
            if (n_la > 0)
                for (int64_t t = 0; t < T; ++t)
                    std::memcpy(heads.f32() + t * H * Dh, fa_out.f32() + t * n_fa * Dh, size_t(n_fa * Dh) * sizeof(float));
        }
        // LA heads: Gated DeltaNet, continuing the cached recurrent and convolution state.
        if (n_la > 0) {
            Tensor la_out = Tensor::zeros({T, n_la * Dh});
            gdn_heads_forward(la_out.f32(), xn.f32(), w, model.plan().gdn, cache.gdn(l), T, C, Dh);
            for (int64_t t = 0; t < T; ++t)
                std::memcpy(heads.f32() + t * H * Dh + n_fa * Dh, la_out.f32() + t * n_la * Dh,
                            size_t(n_la * Dh) * sizeof(float));
        }
        fire(options, "head_out", li, heads);
        if (fusion_active(model.plan().fusion, n_la)) {
            FusionParams<float> fp{w.fusion_head_scale.empty() ? nullptr : w.fusion_head_scale.f32(),
                                   w.fusion_fa_scale.empty() ? nullptr : w.fusion_fa_scale.f32(),
                                   w.fusion_la_scale.empty() ? nullptr : w.fusion_la_scale.f32()};
            fusion_forward(heads.f32(), heads.f32(), T, n_fa, n_la, Dh, model.plan().fusion, fp, cfg.rms_norm_eps);
            fire(options, "fused_out", li, heads);
        }

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
