// Stage-1 alignment step and teacher state extraction (see align_step.h).
#include "train/align_step.h"

#include <unordered_set>

#include "core/error.h"
#include "model/decoder_layer.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/rmsnorm.h"

namespace hydra {

std::vector<float> layer_boundary_states(const ModelConfig& cfg, const HybridPlan& plan,
                                         const ParamArena& layout, const float* params, const int32_t* tokens,
                                         int64_t B, int64_t S) {
    const int64_t N = B * S, C = cfg.hidden_size, L = cfg.num_layers;
    for (int64_t i = 0; i < N; ++i)
        HYDRA_CHECK(tokens[i] >= 0 && tokens[i] < cfg.vocab_size, "token {} at {} outside the vocabulary",
                    tokens[i], i);
    std::vector<float> states(static_cast<size_t>((L + 1) * N * C));
    cpu::embedding_forward(states.data(), tokens, params + layout.entry("model.embed_tokens.weight").offset,
                           N, C);
    LayerRun<float> run;
    run.batch = B;
    run.seq_len = S;
    LayerActs<float> acts;
    for (int64_t l = 0; l < L; ++l)
        decoder_layer_forward(states.data() + (l + 1) * N * C, states.data() + l * N * C, cfg, plan,
                              layer_params(cfg, plan, layout, params, l), run, acts);
    return states;
}

std::vector<float> final_hidden_states(const ModelConfig& cfg, const HybridPlan& plan,
                                       const ParamArena& layout, const float* params, const int32_t* tokens,
                                       int64_t B, int64_t S) {
    const int64_t N = B * S, C = cfg.hidden_size, L = cfg.num_layers;
    std::vector<float> states = layer_boundary_states(cfg, plan, layout, params, tokens, B, S);
    std::vector<float> out(static_cast<size_t>(N * C));
    cpu::rmsnorm_forward(out.data(), (float*)nullptr, states.data() + L * N * C,
                         params + layout.entry("model.norm.weight").offset, N, C, double(cfg.rms_norm_eps));
    return out;
}

AlignResult align_step(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout,
                       const float* params, float* grads, const std::vector<char>& trainable,
                       const float* teacher, int64_t B, int64_t S) {
    const int64_t N = B * S, C = cfg.hidden_size, L = cfg.num_layers;
    std::unordered_set<int64_t> frozen;
    for (size_t i = 0; i < trainable.size(); ++i)
        if (!trainable[i]) frozen.insert(layout.entries()[i].offset);
    AlignResult r;
    LayerRun<float> run;
    run.batch = B;
    run.seq_len = S;
    run.save = grads != nullptr;
    LayerActs<float> acts;
    std::vector<float> y(static_cast<size_t>(N * C)), dy(static_cast<size_t>(N * C));
    for (int64_t l = 0; l < L; ++l) {
        const float* x = teacher + l * N * C;
        const float* t = teacher + (l + 1) * N * C;
        const LayerParams<const float> w = layer_params(cfg, plan, layout, params, l);
        decoder_layer_forward(y.data(), x, cfg, plan, w, run, acts);
        double err = 0, update = 0;
        for (int64_t i = 0; i < N * C; ++i) {
            const double e = double(y[size_t(i)]) - t[i], u = double(t[i]) - x[i];
            err += e * e;
            update += u * u;
        }
        update = std::max(update, 1e-12);
        r.layer_loss.push_back(err / update);
        r.loss += err / update / double(L);
        if (!grads) continue;
        const double scale = 2.0 / update / double(L);
        for (int64_t i = 0; i < N * C; ++i) dy[size_t(i)] = float(scale * (double(y[size_t(i)]) - t[i]));
        LayerParams<float> g = layer_params(cfg, plan, layout, grads, l);
        drop_frozen(g, grads, frozen);
        decoder_layer_backward(dy.data(), cfg, plan, w, g, run, acts);
    }
    return r;
}

}  // namespace hydra
