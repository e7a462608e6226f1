// The training step against PyTorch + transformers (tools/make_train_golden.py): loss and every
// parameter gradient of a tiny GQA Llama, and a 10-step AdamW trajectory with clipping; plus
// whole-model finite-difference checks in double for the Llama, Qwen2 (biases, untied head) and
// Qwen3 (q/k norms) variants.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model_paths.h"
#include "train/adamw.h"
#include "train/model_step.h"
#include "train/param_groups.h"

namespace hydra {
namespace {

double rel_rms(const float* a, const float* b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) num += std::pow(double(a[i]) - b[i], 2), den += double(b[i]) * b[i];
    return std::sqrt(num / std::max(den, 1e-30));
}

TEST(TrainStep, LossAndGradientsMatchPyTorch) {
    const std::string dir = test::test_data("train_golden");
    LoadedModel m = load_model(dir);
    SafetensorsFile g = SafetensorsFile::open(dir + "/golden.safetensors");
    Tensor inputs = g.copy("inputs"), targets = g.copy("targets");
    const int64_t B = inputs.dim(0), S = inputs.dim(1);
    std::vector<float> grads(static_cast<size_t>(m.model->params().numel()), 0.0f);
    TrainBatch batch{inputs.data<int32_t>(), targets.data<int32_t>(), B, S};
    for (bool recompute : {false, true}) {
        std::fill(grads.begin(), grads.end(), 0.0f);
        ModelStepResult r = model_train_step<float>(m.model->config(), m.model->plan(), m.model->params(),
                                                    m.model->params().data(), grads.data(), batch, {}, {}, {recompute});
        const double ref_loss = g.to_f32("loss").f32()[0];
        EXPECT_NEAR(r.loss, ref_loss, 1e-5 * ref_loss);
        double worst = 0;
        for (const ArenaEntry& e : m.model->params().entries()) {
            Tensor ref = g.to_f32("grad." + e.name);
            ASSERT_EQ(ref.numel(), shape_numel(e.shape)) << e.name;
            const double err = rel_rms(grads.data() + e.offset, ref.f32(), ref.numel());
            worst = std::max(worst, err);
            EXPECT_LT(err, 1e-5) << e.name;
        }
        std::printf("recompute=%d: loss %.7f (torch %.7f), worst gradient relative RMS %.3g\n", int(recompute), r.loss,
                    ref_loss, worst);
    }
}

TEST(TrainStep, AdamWTrajectoryMatchesPyTorch) {
    const std::string dir = test::test_data("train_golden");
    LoadedModel m = load_model(dir);
    SafetensorsFile g = SafetensorsFile::open(dir + "/golden.safetensors");
    const auto info = nlohmann::json::parse(g.metadata().at("info"));
    Tensor inputs = g.copy("traj.inputs"), targets = g.copy("traj.targets");
    Tensor losses = g.to_f32("traj.losses");
    const int64_t steps = inputs.dim(0), B = inputs.dim(1), S = inputs.dim(2);
    AdamWConfig ac;
    ac.lr = info["lr"].get<float>();
    ac.beta1 = info["betas"][0].get<float>();
    ac.beta2 = info["betas"][1].get<float>();
    ac.eps = info["eps"].get<float>();
    ac.weight_decay = info["weight_decay"].get<float>();
    const int64_t n = m.model->params().numel();
    AdamW opt(ac, n);
    // torch decays only matrices; our default rule exempts norms, biases and 1-D tensors: the same set here.
    const std::vector<ParamSpan> spans = build_param_spans(m.model->params().entries());
    std::vector<float> grads(static_cast<size_t>(n));
    for (int64_t s = 0; s < steps; ++s) {
        std::fill(grads.begin(), grads.end(), 0.0f);
        TrainBatch batch{inputs.data<int32_t>() + s * B * S, targets.data<int32_t>() + s * B * S, B, S};
        ModelStepResult r = model_train_step<float>(m.model->config(), m.model->plan(), m.model->params(),
                                                    m.model->params().data(), grads.data(), batch);
        EXPECT_NEAR(r.loss, losses.f32()[s], 1e-4 * losses.f32()[s]) << "step " << s;
        clip_grads(grads.data(), spans, info["clip"].get<double>(), grad_norm(grads.data(), spans));
        opt.step(m.model->params().data(), grads.data(), n, spans);
    }
    double worst = 0;
    for (const ArenaEntry& e : m.model->params().entries()) {
        Tensor ref = g.to_f32("final." + e.name);
        worst = std::max(worst, rel_rms(m.model->params().data() + e.offset, ref.f32(), ref.numel()));
    }
    std::printf("after %lld AdamW steps: worst parameter relative RMS %.3g\n", (long long)steps, worst);
    EXPECT_LT(worst, 1e-4);
}

// The step keeps its buffers between calls: steps of other shapes in between (a smaller evaluation
// batch without gradients, a longer batch, recomputed attention) must not change a later step's result.
TEST(TrainStep, ReusedWorkspaceGivesIdenticalResults) {
    ModelConfig c;
    c.architecture = "llama";
    c.vocab_size = 37;
    c.hidden_size = 32;
    c.intermediate_size = 48;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 8;
    c.rope_dim = 8;
    c.rope_theta = 10000;
    LlamaModel model(c);
    std::mt19937 gen(11);
    std::normal_distribution<float> dist(0.0f, 0.3f);
    for (int64_t i = 0; i < model.params().numel(); ++i) model.params().data()[i] = dist(gen);
    auto tokens = [&](int64_t n, uint32_t seed) {
        std::mt19937 g(seed);
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = int32_t(g() % uint32_t(c.vocab_size));
        return t;
    };
    const std::vector<int32_t> in_a = tokens(3 * 70, 1), tg_a = tokens(3 * 70, 2);
    const std::vector<int32_t> in_b = tokens(2 * 130, 3), tg_b = tokens(2 * 130, 4);
    const TrainBatch a{in_a.data(), tg_a.data(), 3, 70}, b{in_b.data(), tg_b.data(), 2, 130}, small{in_b.data(), tg_b.data(), 1, 9};
    const size_t n = static_cast<size_t>(model.params().numel());
    auto step = [&](const TrainBatch& batch, bool grads, bool recompute) {
        std::vector<float> g(grads ? n : 0, 0.0f);
        const ModelStepResult r = model_train_step<float>(c, model.plan(), model.params(), model.params().data(),
                                                          grads ? g.data() : nullptr, batch, {}, {}, {recompute});
        return std::make_pair(r.loss, g);
    };
    const auto first = step(a, true, false);
    step(small, false, false);
    step(b, true, false);
    step(b, true, true);
    step(small, false, true);
    const auto again = step(a, true, false);
    EXPECT_EQ(first.first, again.first);
    EXPECT_EQ(first.second, again.second);
    // Recomputed attention: the same gradients up to rounding.
    const auto rec = step(a, true, true);
    EXPECT_NEAR(rec.first, first.first, 1e-6 * first.first);
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i)
        num += std::pow(double(rec.second[i]) - first.second[i], 2), den += double(first.second[i]) * first.second[i];
    EXPECT_LT(std::sqrt(num / den), 1e-6);
}

// Whole-model finite differences in double.
class TrainStepGradCheck : public ::testing::TestWithParam<int> {};

TEST_P(TrainStepGradCheck, WholeModelFiniteDifferences) {
    ModelConfig c;
    c.architecture = GetParam() == 0 ? "llama" : GetParam() == 1 ? "qwen2" : "qwen3";
    c.vocab_size = 11;
    c.hidden_size = 8;
    c.intermediate_size = 12;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = GetParam() == 2 ? 6 : 2;
    c.rope_dim = c.head_dim;
    c.rope_theta = 10000;
    c.tie_word_embeddings = GetParam() == 0;
    c.attention_bias = GetParam() == 1;
    c.qk_norm = GetParam() == 2;
    LlamaModel layout_model(c);
    const ParamArena& layout = layout_model.params();
    const int64_t n = layout.numel();
    std::mt19937_64 gen(42 + GetParam());
    std::normal_distribution<double> dist(0.0, 0.5);
    std::vector<double> p(static_cast<size_t>(n)), grads(static_cast<size_t>(n), 0.0);
    for (auto& x : p) x = dist(gen);
    const int32_t inputs[] = {1, 5, 7, 2, 9, 3, 0, 4, 10, 6};
    const int32_t targets[] = {5, 7, 2, 9, -1, 0, 4, 10, 6, 8};
    TrainBatch batch{inputs, targets, 2, 5};
    const HybridPlan plan = HybridPlan::all_fa(c);
    model_train_step<double>(c, plan, layout, p.data(), grads.data(), batch);
    double worst = 0;
    for (const ArenaEntry& e : layout.entries()) {
        const int64_t size = shape_numel(e.shape);
        for (int64_t k = 0; k < std::min<int64_t>(size, 12); ++k) {
            const int64_t i = e.offset + (k * 7919) % size;
            // Fourth-order central difference: truncation O(h^4) and rounding ~1e-16/h both stay far
            // below the tolerance, which a two-point difference cannot promise for small gradients.
            const double saved = p[size_t(i)], h = 1e-3;
            auto loss_at = [&](double delta) {
                p[size_t(i)] = saved + delta;
                const double l = model_train_step<double>(c, plan, layout, p.data(), nullptr, batch).loss;
                p[size_t(i)] = saved;
                return l;
            };
            const double fd = (8 * (loss_at(h) - loss_at(-h)) - (loss_at(2 * h) - loss_at(-2 * h))) / (12 * h);
            const double an = grads[size_t(i)];
            const double err = std::fabs(fd - an) / std::max({std::fabs(fd), std::fabs(an), 1e-6});
            worst = std::max(worst, err);
            EXPECT_LT(err, 1e-6) << e.name << "[" << i - e.offset << "] analytic " << an << " numeric " << fd;
        }
    }
    std::printf("%s: worst relative gradient error %.3g\n", c.architecture.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(Variants, TrainStepGradCheck, ::testing::Values(0, 1, 2));

}  // namespace
}  // namespace hydra
