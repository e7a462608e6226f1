// Llama-family / HydraHead forward pass (see llama_forward.h): embedding, the decoder layers of
// model/decoder_layer.h in cache mode (K/V appended at the cache's position, GDN state continued), the
// final RMSNorm. The teacher (every head FA) runs exactly the llama computation: same ops, same shapes.
#include "model/llama_forward.h"

#include <cstring>
#include <optional>

#include "model/decoder_layer.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/quant_gemv.h"
#include "ops/cpu/quant_gemv_q8.h"
#include "ops/cpu/rmsnorm.h"

namespace hydra {

namespace {

// out (T, N) = x (T, K) @ W^T, from the quantized copy for single-token steps when allowed.
void linear(float* out, const float* x, const Tensor& w, const QuantizedWeight& qw, int64_t T, int64_t K,
            int64_t N, bool quantized, bool q8) {
    if (quantized && T == 1 && !qw.empty()) {
        if (q8) {
            static thread_local cpu::Q8Activations xq;
            cpu::quantize_activations_q8(xq, x, K);
            cpu::quant_gemv_q8(out, qw.type, qw.bytes.data(), xq, N);
        } else {
            cpu::quant_gemv(out, qw.type, qw.bytes.data(), x, N, K);
        }
        return;
    }
    cpu::linear_forward(out, x, w.f32(), (const float*)nullptr, T, K, N);
}

void fire(const ForwardOptions& options, const char* point, int layer, Tensor& value) {
    if (options.taps && !options.taps->empty()) options.taps->fire(point, layer, value);
}

}  // namespace

Tensor forward_hidden(const LlamaModel& model, std::span<const int32_t> tokens, KVCache& cache,
                      const ForwardOptions& options) {
    const ModelConfig& cfg = model.config();
    const int64_t T = int64_t(tokens.size());
    const int64_t C = cfg.hidden_size;
    const int64_t pos0 = cache.pos();
    HYDRA_CHECK(T > 0, "forward: no tokens");
    HYDRA_CHECK(pos0 + T <= cache.capacity(),
                "context overflow: {} cached + {} new tokens exceed the cache of {}", pos0, T,
                cache.capacity());
    for (int64_t t = 0; t < T; ++t)
        HYDRA_CHECK(tokens[size_t(t)] >= 0 && tokens[size_t(t)] < cfg.vocab_size,
                    "token id {} at position {} is outside the vocabulary (0..{})", tokens[size_t(t)], t,
                    cfg.vocab_size - 1);

    Tensor x = Tensor::zeros({T, C});  // residual stream
    const float* embed = model.embedding().f32();
    for (int64_t t = 0; t < T; ++t)
        std::memcpy(x.f32() + t * C, embed + int64_t(tokens[size_t(t)]) * C, size_t(C) * sizeof(float));
    fire(options, "embed", -1, x);

    // Decode steps reuse one thread's buffers (no allocation per token); a prompt's are freed after it.
    static thread_local LayerActs<float> acts;
    const bool taps = options.taps && !options.taps->empty();
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
        const LayerParams<const float> w = layer_params(model, l);
        HYDRA_ASSERT(cache.kv_heads(l) == w.n_kv, "cache layer {} holds {} KV heads, the model {}", l,
                     cache.kv_heads(l), w.n_kv);
        LayerCache<float> lc{cache.k(l), cache.v(l), {}};
        if (w.n_la > 0) {
            GdnLayerState& st = cache.gdn(l);
            lc.gdn = {st.conv_q.f32(), st.conv_k.f32(), st.conv_v.f32(), st.recurrent.f32()};
        }
        const LayerQuantized qz = layer_quantized(model, l);
        std::optional<LayerTaps> layer_taps;
        if (taps) layer_taps.emplace(*options.taps, int(l));
        LayerRun<float> run;
        run.seq_len = T;
        run.pos0 = pos0;
        run.cache = &lc;
        run.quantized = options.quantized_decode ? &qz : nullptr;
        run.q8_activations = options.q8_activations;
        run.taps = layer_taps ? &*layer_taps : nullptr;
        decoder_layer_forward(x.f32(), x.f32(), cfg, model.plan(), w, run, acts);
    }
    if (T > 64) acts = LayerActs<float>();
    cache.advance(T);
    cpu::rmsnorm_forward(x.f32(), (float*)nullptr, x.f32(), model.final_norm().f32(), T, C, cfg.rms_norm_eps);
    fire(options, "final_norm", -1, x);
    return x;
}

Tensor compute_logits(const LlamaModel& model, const Tensor& hidden, bool quantized_decode,
                      bool q8_activations) {
    const int64_t N = hidden.dim(0), C = model.config().hidden_size, V = model.config().vocab_size;
    HYDRA_ASSERT(hidden.dim(1) == C, "hidden width {} != {}", hidden.dim(1), C);
    Tensor logits = Tensor::zeros({N, V});
    linear(logits.f32(), hidden.f32(), model.lm_head(), model.quantized_lm_head(), N, C, V, quantized_decode,
           q8_activations);
    return logits;
}

Tensor forward_last_logits(const LlamaModel& model, std::span<const int32_t> tokens, KVCache& cache,
                           const ForwardOptions& options) {
    Tensor hidden = forward_hidden(model, tokens, cache, options);
    const int64_t T = hidden.dim(0);
    return compute_logits(model, hidden.rows(T - 1, T), options.quantized_decode && T == 1,
                          options.q8_activations)
        .reshaped({model.config().vocab_size});
}

}  // namespace hydra
