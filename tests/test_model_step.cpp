// Tests of the training step (train/model_step.h, model/decoder_layer.h) on teachers and HydraHead
// hybrids: whole-model finite-difference gradient checks in double for every plan kind (head-granular
// FA groups, hymba/la-only/scale-norm fusion, layer-wise, all-LA, sliding-window heads), frozen tensors
// untouched, and the KL objective against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/hybrid_conversion.h"
#include "model/llama_model.h"
#include "model/plan_builders.h"
#include "train/model_step.h"

namespace hydra {
namespace {

ModelConfig tiny(bool bias, bool qk_norm) {
    ModelConfig c;
    c.name = "tiny";
    c.vocab_size = 23;
    c.hidden_size = 12;
    c.intermediate_size = 16;
    c.num_layers = 2;
    c.num_heads = 3;
    c.num_kv_heads = 3;
    c.head_dim = 4;
    c.rope_dim = 4;
    c.rms_norm_eps = 1e-5f;
    c.tie_word_embeddings = !bias;
    c.attention_bias = bias;
    c.qk_norm = qk_norm;
    return c;
}

std::vector<std::pair<std::string, HybridPlan>> plans(const ModelConfig& c) {
    std::vector<std::pair<std::string, HybridPlan>> out;
    HybridPlan p = HybridPlan::all_fa(c);
    out.emplace_back("teacher", p);
    // layer 0: head 1 FA (unequal groups need the kv map when Hkv < H); layer 1: heads 0, 2 FA
    p.granularity = "head";
    p.layers[0] = {{1}, {0, 2}};
    p.layers[1] = {{0, 2}, {1}};
    p.fusion = FusionKind::ScaleNorm;
    out.emplace_back("head scale-norm", p);
    p.fusion = FusionKind::Hymba;
    out.emplace_back("head hymba", p);
    p.fusion = FusionKind::LaOnly;
    out.emplace_back("head la-only", p);
    p.fusion = FusionKind::ScaleNorm;
    p.la_bias = true;  // the fusion's LA offsets
    out.emplace_back("head scale-norm + LA offsets", p);
    p.fusion = FusionKind::Hymba;
    out.emplace_back("head hymba + LA offsets", p);
    p.la_bias = false;
    HybridPlan lw = HybridPlan::all_fa(c);
    lw.layers[0] = {{}, {0, 1, 2}};
    lw.fusion = FusionKind::None;
    out.emplace_back("layerwise", lw);
    HybridPlan la = HybridPlan::all_fa(c);
    la.layers[0] = {{}, {0, 1, 2}};
    la.layers[1] = {{}, {0, 1, 2}};
    out.emplace_back("all-LA", la);
    // the sliding-window baseline: head 1 of layer 0 full, the others windows of 2 and 3 with one sink
    HybridPlan sw = HybridPlan::all_fa(c);
    sw.fusion = FusionKind::None;
    sw.layers[0].fa_window = {2, 0, 3};
    sw.layers[1].fa_window = {3, 3, 0};
    sw.window_sinks = 1;
    out.emplace_back("sliding window", sw);
    return out;
}

void randomize(std::vector<double>& p, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<double> d(0.0, 0.4);
    for (double& x : p) x = d(gen);
}

TEST(ModelStep, WholeModelGradientsMatchFiniteDifferences) {
    for (bool variant : {false, true}) {
        const ModelConfig c = tiny(variant, variant);
        for (auto [name, plan] : plans(c)) {
            SCOPED_TRACE(name + (variant ? " +bias +qk_norm" : ""));
            plan.gdn.chunk_size = 4;  // several chunks and a partial one at S = 7
            const LlamaModel m(c, &plan);
            const ParamArena& layout = m.params();
            std::vector<double> p(static_cast<size_t>(layout.numel()));
            randomize(p, 3);
            // Softplus/exp gates and norms like well-scaled values.
            for (const ArenaEntry& e : layout.entries())
                if (e.name.find("A_log") != std::string::npos || e.name.find("dt_bias") != std::string::npos)
                    for (int64_t i = 0; i < shape_numel(e.shape); ++i) p[size_t(e.offset + i)] *= 0.5;
            const int64_t B = 2, S = 7;
            std::vector<int32_t> in(B * S), tg(B * S);
            std::mt19937_64 gen(9);
            for (auto& t : in) t = int32_t(gen() % uint64_t(c.vocab_size));
            for (auto& t : tg) t = int32_t(gen() % uint64_t(c.vocab_size));
            tg[3] = -1;
            const TrainBatch batch{in.data(), tg.data(), B, S};
            std::vector<double> g(p.size(), 0.0);
            const StageObjective obj;
            model_train_step<double>(c, plan, layout, p.data(), g.data(), batch, obj);
            // Check a spread of parameters from every tensor.
            int checked = 0;
            for (const ArenaEntry& e : layout.entries()) {
                const int64_t n = shape_numel(e.shape);
                for (int64_t i : {int64_t(0), n / 2, n - 1}) {
                    const size_t k = size_t(e.offset + i);
                    const double keep = p[k], h = 1e-5;
                    p[k] = keep + h;
                    const double up = model_train_step<double>(c, plan, layout, p.data(), nullptr, batch, obj).loss;
                    p[k] = keep - h;
                    const double down = model_train_step<double>(c, plan, layout, p.data(), nullptr, batch, obj).loss;
                    p[k] = keep;
                    const double fd = (up - down) / (2 * h);
                    EXPECT_NEAR(g[k], fd, 1e-6 + 1e-4 * std::fabs(fd)) << e.name << "[" << i << "]";
                    ++checked;
                }
            }
            EXPECT_GT(checked, 30);
        }
    }
}

TEST(ModelStep, FrozenTensorsStayZero) {
    const ModelConfig c = tiny(false, true);
    const HybridPlan plan = HybridPlan::all_fa(c);
    LlamaModel m(c);
    std::vector<double> pd(static_cast<size_t>(m.params().numel()));
    randomize(pd, 5);
    std::vector<float> p(pd.begin(), pd.end());
    const int64_t B = 2, S = 9;
    std::vector<int32_t> in(B * S), tg(B * S);
    std::mt19937_64 gen(1);
    for (auto& t : in) t = int32_t(gen() % uint64_t(c.vocab_size));
    for (auto& t : tg) t = int32_t(gen() % uint64_t(c.vocab_size));
    const TrainBatch batch{in.data(), tg.data(), B, S};
    // Freeze everything but the MLPs: the rest of the gradient buffer stays exactly zero.
    std::vector<char> trainable;
    for (const ArenaEntry& e : m.params().entries()) trainable.push_back(e.name.find(".mlp.") != std::string::npos);
    std::vector<float> g3(p.size(), 0.0f);
    model_train_step<float>(c, plan, m.params(), p.data(), g3.data(), batch, {}, trainable);
    for (size_t i = 0; i < m.params().entries().size(); ++i) {
        const ArenaEntry& e = m.params().entries()[i];
        double sum = 0;
        for (int64_t j = 0; j < shape_numel(e.shape); ++j) sum += std::fabs(g3[size_t(e.offset + j)]);
        if (trainable[i]) EXPECT_GT(sum, 0.0) << e.name;
        else EXPECT_EQ(sum, 0.0) << e.name;
    }
}

TEST(ModelStep, KlObjectiveGradientMatchesFiniteDifferences) {
    const ModelConfig c = tiny(false, false);
    auto ps = plans(c);
    const HybridPlan& plan = ps[1].second;
    LlamaModel m(c, &plan);
    std::vector<double> pd(static_cast<size_t>(m.params().numel()));
    randomize(pd, 8);
    std::vector<float> p(pd.begin(), pd.end());
    const int64_t B = 1, S = 6, N = B * S, Ct = 5;
    std::vector<int32_t> in(N), tg(N, -1);
    std::mt19937_64 gen(2);
    for (auto& t : in) t = int32_t(gen() % uint64_t(c.vocab_size));
    std::vector<float> th(N * Ct), tw(c.vocab_size * Ct);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (auto& x : th) x = d(gen);
    for (auto& x : tw) x = d(gen);
    std::vector<uint8_t> mask = {1, 1, 0, 1, 1, 1};
    StageObjective obj;
    obj.ce_weight = 0;
    obj.kl_weight = 1;
    obj.teacher_hidden = th.data();
    obj.teacher_head = tw.data();
    obj.teacher_hidden_size = Ct;
    obj.kl_mask = mask.data();
    const TrainBatch batch{in.data(), tg.data(), B, S};
    std::vector<float> g(p.size(), 0.0f);
    const ModelStepResult r = model_train_step<float>(c, plan, m.params(), p.data(), g.data(), batch, obj);
    EXPECT_GT(r.kl, 0.0);
    // Finite differences in float on the largest-gradient coordinates of a few tensors.
    for (const char* name : {"model.embed_tokens.weight", "model.layers.1.self_attn.o_proj.weight",
                             "model.layers.0.linear_attn.q_proj.weight"}) {
        const ArenaEntry& e = m.params().entry(name);
        int64_t best = 0;
        for (int64_t j = 0; j < shape_numel(e.shape); ++j)
            if (std::fabs(g[size_t(e.offset + j)]) > std::fabs(g[size_t(e.offset + best)])) best = j;
        const size_t k = size_t(e.offset + best);
        const float keep = p[k];
        // These coordinates sit on strongly curved parts of the loss (tied embedding, q before the L2
        // norm): central differences only converge below h ~ 1e-3.
        const float h = 1e-3f;
        p[k] = keep + h;
        const double up = model_train_step<float>(c, plan, m.params(), p.data(), nullptr, batch, obj).loss;
        p[k] = keep - h;
        const double down = model_train_step<float>(c, plan, m.params(), p.data(), nullptr, batch, obj).loss;
        p[k] = keep;
        const double fd = (up - down) / (2.0 * h);
        EXPECT_NEAR(g[k], fd, 2e-3 + 2e-2 * std::fabs(fd)) << name;
    }
}

}  // namespace
}  // namespace hydra
