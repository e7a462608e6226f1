// Training step of a teacher or hybrid with a stage objective (see model_step.h).
#include "train/model_step.h"

#include <cmath>
#include <unordered_set>

#include "core/error.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/rmsnorm.h"
#include "train/decoder_layer.h"
#include "train/losses.h"

namespace hydra {

namespace {

template <typename T>
std::vector<T> zeros(int64_t n) {
    return std::vector<T>(static_cast<size_t>(n), T(0));
}

// Double-precision CE through the LM head (gradient checks on tiny models only).
double ce_double(const double* h, const double* W, const int32_t* targets, int64_t N, int64_t C, int64_t V, double* dh,
                 double* dW, double scale) {
    double loss = 0;
    std::vector<double> logits(static_cast<size_t>(V));
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
        loss += std::log(z) + m - logits[size_t(targets[n])];
        if (!dh) continue;
        for (int64_t v = 0; v < V; ++v) {
            const double g = (std::exp(logits[size_t(v)] - m) / z - (v == targets[n] ? 1.0 : 0.0)) * scale;
            for (int64_t c = 0; c < C; ++c) {
                dh[n * C + c] += g * W[v * C + c];
                if (dW) dW[v * C + c] += g * h[n * C + c];
            }
        }
    }
    return loss;
}

}  // namespace

template <typename T>
ModelStepResult model_train_step(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout,
                                 const T* params, T* grads, const TrainBatch& batch, const StageObjective& obj,
                                 const std::vector<char>& trainable, const TrainStepOptions& options) {
    const int64_t B = batch.batch, S = batch.seq_len, N = B * S;
    const int64_t C = cfg.hidden_size, V = cfg.vocab_size, L = cfg.num_layers;
    HYDRA_CHECK(B > 0 && S > 0, "train step: empty batch ({} x {})", B, S);
    HYDRA_ASSERT(trainable.empty() || trainable.size() == layout.entries().size(), "trainable mask has {} entries, arena {}",
                 trainable.size(), layout.entries().size());
    int64_t scored = 0;
    for (int64_t i = 0; i < N; ++i) {
        HYDRA_CHECK(batch.inputs[i] >= 0 && batch.inputs[i] < V, "train step: input token {} at {} outside 0..{}",
                    batch.inputs[i], i, V - 1);
        HYDRA_CHECK(batch.targets[i] >= -1 && batch.targets[i] < V, "train step: target {} at {} outside -1..{}",
                    batch.targets[i], i, V - 1);
        scored += batch.targets[i] >= 0;
    }
    if (obj.kl_weight > 0) {
        HYDRA_ASSERT((std::is_same_v<T, float>), "the KL objective is float only");
        HYDRA_CHECK(obj.teacher_hidden && obj.teacher_head && obj.teacher_hidden_size > 0,
                    "train step: KL objective without teacher hidden states");
    }
    // Offsets of frozen tensors: their gradient pointers become null.
    std::unordered_set<int64_t> frozen;
    for (size_t i = 0; i < trainable.size(); ++i)
        if (!trainable[i]) frozen.insert(layout.entries()[i].offset);
    auto grad_of = [&](const std::string& name) -> T* {
        if (!grads) return nullptr;
        const int64_t off = layout.entry(name).offset;
        return frozen.count(off) ? nullptr : grads + off;
    };

    const T* embed = params + layout.entry("model.embed_tokens.weight").offset;
    const T* final_norm = params + layout.entry("model.norm.weight").offset;
    const std::string head_name = cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    const T* lm_head = params + layout.entry(head_name).offset;

    // ---- forward ----
    const LayerShape shape{B, S, options.recompute_attention};
    std::vector<LayerActivations<T>> acts(static_cast<size_t>(L));
    std::vector<T> x = zeros<T>(N * C);
    cpu::embedding_forward(x.data(), batch.inputs, embed, N, C);
    for (int64_t l = 0; l < L; ++l) {
        const LayerParams<const T> w = layer_params(cfg, plan, layout, params, l);
        decoder_layer_forward(x.data(), x.data(), cfg, plan, w, shape, grads ? &acts[size_t(l)] : nullptr);
    }
    std::vector<T> rstd_f = zeros<T>(N), hidden = zeros<T>(N * C);
    cpu::rmsnorm_forward(hidden.data(), rstd_f.data(), x.data(), final_norm, N, C, double(cfg.rms_norm_eps));

    // ---- loss ----
    ModelStepResult r;
    r.scored = scored;
    std::vector<T> dh = grads ? zeros<T>(N * C) : std::vector<T>();
    T* d_head = grad_of(head_name);
    if (obj.ce_weight > 0) {
        const double scale = scored ? obj.ce_weight / double(scored) : 0.0;
        double sum = 0;
        if constexpr (std::is_same_v<T, float>) {
            sum = cross_entropy_lm_head(hidden.data(), lm_head, batch.targets, N, C, V, grads ? dh.data() : nullptr,
                                        d_head, float(scale))
                      .loss;
        } else {
            sum = ce_double(hidden.data(), lm_head, batch.targets, N, C, V, grads ? dh.data() : nullptr, d_head, scale);
        }
        r.ce = scored ? sum / double(scored) : 0.0;
    }
    if constexpr (std::is_same_v<T, float>) {
        if (obj.kl_weight > 0) {
            // Rows outside the mask are left out by running the loss on the kept rows only.
            std::vector<int64_t> rows;
            for (int64_t n = 0; n < N; ++n)
                if (!obj.kl_mask || obj.kl_mask[n]) rows.push_back(n);
            const int64_t M = int64_t(rows.size()), Ct = obj.teacher_hidden_size;
            if (M > 0) {
                std::vector<float> sh(static_cast<size_t>(M * C)), th(static_cast<size_t>(M * Ct));
                for (int64_t i = 0; i < M; ++i) {
                    std::copy_n(hidden.data() + rows[size_t(i)] * C, C, sh.data() + i * C);
                    std::copy_n(obj.teacher_hidden + rows[size_t(i)] * Ct, Ct, th.data() + i * Ct);
                }
                std::vector<float> dsh = grads ? std::vector<float>(sh.size(), 0.0f) : std::vector<float>();
                const LossResult kl = kl_lm_head(sh.data(), lm_head, C, th.data(), obj.teacher_head, Ct, M, V,
                                                 obj.temperature, grads ? dsh.data() : nullptr, d_head,
                                                 float(obj.kl_weight / double(M)));
                r.kl = kl.loss / double(M);
                if (grads)
                    for (int64_t i = 0; i < M; ++i)
                        for (int64_t c = 0; c < C; ++c) dh[size_t(rows[size_t(i)] * C + c)] += dsh[size_t(i * C + c)];
            }
        }
    }
    r.loss = obj.ce_weight * r.ce + obj.kl_weight * r.kl;
    if (!grads) return r;

    // ---- backward ----
    std::vector<T> dx = zeros<T>(N * C);
    cpu::rmsnorm_backward(dx.data(), grad_of("model.norm.weight"), dh.data(), x.data(), final_norm, rstd_f.data(), N,
                          C);
    for (int64_t l = L - 1; l >= 0; --l) {
        const LayerParams<const T> w = layer_params(cfg, plan, layout, params, l);
        LayerParams<T> g = layer_params(cfg, plan, layout, grads, l);
        drop_frozen(g, grads, frozen);
        decoder_layer_backward(dx.data(), cfg, plan, w, g, shape, acts[size_t(l)]);
        acts[size_t(l)] = LayerActivations<T>();  // free early
    }
    if (T* d_embed = grad_of("model.embed_tokens.weight"))
        cpu::embedding_backward(d_embed, dx.data(), batch.inputs, N, C);
    return r;
}

template ModelStepResult model_train_step<float>(const ModelConfig&, const HybridPlan&, const ParamArena&,
                                                 const float*, float*, const TrainBatch&, const StageObjective&,
                                                 const std::vector<char>&, const TrainStepOptions&);
template ModelStepResult model_train_step<double>(const ModelConfig&, const HybridPlan&, const ParamArena&,
                                                  const double*, double*, const TrainBatch&, const StageObjective&,
                                                  const std::vector<char>&, const TrainStepOptions&);

}  // namespace hydra
