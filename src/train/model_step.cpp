// Training step of a teacher or hybrid with a stage objective (see model_step.h).
#include "train/model_step.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "core/error.h"
#include "model/decoder_layer.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/rmsnorm.h"
#include "train/losses.h"

namespace hydra {

namespace {

// Every buffer of a step, kept per calling thread between steps: only growing vectors, so a steady
// training loop neither allocates nor touches fresh pages. An evaluation step (no gradients) between
// training steps uses layer 0's buffers and keeps the others.
template <typename T>
struct StepWorkspace {
    std::vector<LayerActs<T>> acts;
    std::vector<T> x, hidden, rstd_f, dh, dx;
};

}  // namespace

template <typename T>
ModelStepResult model_train_step(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout,
                                 const T* params, T* grads, const TrainBatch& batch,
                                 const StageObjective& obj, const std::vector<char>& trainable,
                                 const TrainStepOptions& options) {
    const int64_t B = batch.batch, S = batch.seq_len, N = B * S;
    const int64_t C = cfg.hidden_size, V = cfg.vocab_size, L = cfg.num_layers;
    HYDRA_CHECK(B > 0 && S > 0, "train step: empty batch ({} x {})", B, S);
    HYDRA_ASSERT(trainable.empty() || trainable.size() == layout.entries().size(),
                 "trainable mask has {} entries, arena {}", trainable.size(), layout.entries().size());
    int64_t scored = 0;
    for (int64_t i = 0; i < N; ++i) {
        HYDRA_CHECK(batch.inputs[i] >= 0 && batch.inputs[i] < V,
                    "train step: input token {} at {} outside 0..{}", batch.inputs[i], i, V - 1);
        HYDRA_CHECK(batch.targets[i] >= -1 && batch.targets[i] < V,
                    "train step: target {} at {} outside -1..{}", batch.targets[i], i, V - 1);
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
    const bool train = grads != nullptr;

    static thread_local StepWorkspace<T> ws;
    ws.acts.resize(std::max(ws.acts.size(), size_t(train ? L : 1)));  // grow only
    LayerRun<T> run;
    run.batch = B;
    run.seq_len = S;
    run.save = train;
    run.recompute_attention = options.recompute_attention;

    // ---- forward ----
    T* x = layer_buffer(ws.x, N * C);
    cpu::embedding_forward(x, batch.inputs, embed, N, C);
    for (int64_t l = 0; l < L; ++l)
        decoder_layer_forward(x, x, cfg, plan, layer_params(cfg, plan, layout, params, l), run,
                              ws.acts[size_t(train ? l : 0)]);
    T* rstd_f = layer_buffer(ws.rstd_f, N);
    T* hidden = layer_buffer(ws.hidden, N * C);
    cpu::rmsnorm_forward(hidden, rstd_f, x, final_norm, N, C, double(cfg.rms_norm_eps));

    // ---- loss ----
    ModelStepResult r;
    r.scored = scored;
    T* dh = train ? layer_buffer(ws.dh, N * C) : nullptr;
    if (dh) std::fill(dh, dh + N * C, T(0));
    T* d_head = grad_of(head_name);
    if (obj.ce_weight > 0) {
        const double scale = scored ? obj.ce_weight / double(scored) : 0.0;
        const double sum =
            cross_entropy_lm_head(hidden, lm_head, batch.targets, N, C, V, dh, d_head, T(scale)).loss;
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
                    std::copy_n(hidden + rows[size_t(i)] * C, C, sh.data() + i * C);
                    std::copy_n(obj.teacher_hidden + rows[size_t(i)] * Ct, Ct, th.data() + i * Ct);
                }
                std::vector<float> dsh = train ? std::vector<float>(sh.size(), 0.0f) : std::vector<float>();
                const LossResult kl =
                    kl_lm_head(sh.data(), lm_head, C, th.data(), obj.teacher_head, Ct, M, V, obj.temperature,
                               train ? dsh.data() : nullptr, d_head, float(obj.kl_weight / double(M)));
                r.kl = kl.loss / double(M);
                if (train)
                    for (int64_t i = 0; i < M; ++i)
                        for (int64_t c = 0; c < C; ++c) dh[rows[size_t(i)] * C + c] += dsh[size_t(i * C + c)];
            }
        }
    }
    r.loss = obj.ce_weight * r.ce + obj.kl_weight * r.kl;
    if (!train) return r;

    // ---- backward ----
    // dx is the gradient of the residual stream at the current point, walking back through the layers.
    T* dx = layer_buffer(ws.dx, N * C);
    cpu::rmsnorm_backward(dx, grad_of("model.norm.weight"), dh, x, final_norm, rstd_f, N, C);
    for (int64_t l = L - 1; l >= 0; --l) {
        LayerParams<T> g = layer_params(cfg, plan, layout, grads, l);
        drop_frozen(g, grads, frozen);
        decoder_layer_backward(dx, cfg, plan, layer_params(cfg, plan, layout, params, l), g, run,
                               ws.acts[size_t(l)]);
    }
    if (T* d_embed = grad_of("model.embed_tokens.weight"))
        cpu::embedding_backward(d_embed, dx, batch.inputs, N, C);
    return r;
}

template ModelStepResult model_train_step<float>(const ModelConfig&, const HybridPlan&, const ParamArena&,
                                                 const float*, float*, const TrainBatch&,
                                                 const StageObjective&, const std::vector<char>&,
                                                 const TrainStepOptions&);
template ModelStepResult model_train_step<double>(const ModelConfig&, const HybridPlan&, const ParamArena&,
                                                  const double*, double*, const TrainBatch&,
                                                  const StageObjective&, const std::vector<char>&,
                                                  const TrainStepOptions&);

}  // namespace hydra
