// init_weights_normal: the from-scratch initialisation of `hydra train` and `hydra init`.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "model/hf_config.h"
#include "model/llama_model.h"
#include "model/weight_init.h"

namespace hydra {
namespace {

ModelConfig tiny_qwen3() {
    return load_hf_config(std::string(HYDRA_SOURCE_DIR) + "/tests/data/tiny_hf/qwen3/config.json");
}

TEST(WeightInit, NormsAreOneAndMatricesHaveTheRequestedSpread) {
    LlamaModel m(tiny_qwen3());
    Rng rng(7);
    init_weights_normal(m, 0.05, rng);
    bool saw_qk_norm = false;
    for (size_t i = 0; i < m.params().entries().size(); ++i) {
        const ArenaEntry& e = m.params().entries()[i];
        const Tensor t = m.params().get(i);
        if (e.name.find("norm") != std::string::npos) {
            saw_qk_norm |= e.name.find("q_norm") != std::string::npos;
            for (int64_t j = 0; j < t.numel(); ++j) ASSERT_EQ(t.f32()[j], 1.0f) << e.name;
            continue;
        }
        if (t.numel() < 4000) continue;  // too few values for a tight spread check
        double s = 0, s2 = 0;
        for (int64_t j = 0; j < t.numel(); ++j) s += t.f32()[j], s2 += double(t.f32()[j]) * t.f32()[j];
        const double n = double(t.numel()), mean = s / n, sd = std::sqrt(s2 / n - mean * mean);
        EXPECT_NEAR(sd, 0.05, 0.05 * 6 / std::sqrt(2 * n) + 1e-3) << e.name;  // 6 sigma of the sample sd
        EXPECT_NEAR(mean, 0.0, 6 * 0.05 / std::sqrt(n)) << e.name;
    }
    EXPECT_TRUE(saw_qk_norm) << "the qwen3 config has q/k norms, which must start at one";
}

TEST(WeightInit, SameSeedSameWeightsOtherSeedOtherWeights) {
    LlamaModel a(tiny_qwen3()), b(tiny_qwen3()), c(tiny_qwen3());
    Rng ra(3), rb(3), rc(4);
    init_weights_normal(a, 0.02, ra);
    init_weights_normal(b, 0.02, rb);
    init_weights_normal(c, 0.02, rc);
    const Tensor ta = a.params().get(0), tb = b.params().get(0), tc = c.params().get(0);
    int64_t differ = 0;
    for (int64_t j = 0; j < ta.numel(); ++j) {
        ASSERT_EQ(ta.f32()[j], tb.f32()[j]);
        differ += ta.f32()[j] != tc.f32()[j];
    }
    EXPECT_GT(differ, ta.numel() / 2);
}

TEST(WeightInit, NonPositiveStdIsRefused) {
    LlamaModel m(tiny_qwen3());
    Rng rng(1);
    EXPECT_THROW(init_weights_normal(m, 0.0, rng), Error);
    EXPECT_THROW(init_weights_normal(m, -1.0, rng), Error);
}

}  // namespace
}  // namespace hydra
