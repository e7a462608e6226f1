// HF safetensors import against transformers: tiny random Llama (untied head), Qwen2 (q/k/v biases,
// tied head) and Qwen3 (q/k norms, head_dim != hidden/heads) written by
// tools/make_tiny_hf_references.py, with logits from transformers in fp32 for 40 tokens.
#include <gtest/gtest.h>

#include <cmath>

#include "io/safetensors.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model_paths.h"

namespace hydra {
namespace {

class HfImport : public ::testing::TestWithParam<const char*> {};

TEST_P(HfImport, LogitsMatchTransformers) {
    const std::string dir = test::test_data(std::string("tiny_hf/") + GetParam());
    LoadedModel m = load_model(dir);
    EXPECT_EQ(m.format, "hf-safetensors");
    SafetensorsFile ref = SafetensorsFile::open(dir + "/reference_logits.safetensors");
    Tensor ids = ref.copy("ids");
    Tensor expected = ref.to_f32("logits");
    const int64_t T = ids.numel(), V = m.model->config().vocab_size;
    ASSERT_EQ(expected.dim(0), T);
    ASSERT_EQ(expected.dim(1), V);
    KVCache cache(m.model->config(), T);
    Tensor logits = compute_logits(*m.model, forward_hidden(*m.model, {ids.data<int32_t>(), size_t(T)}, cache));
    double num = 0, den = 0;
    for (int64_t i = 0; i < T * V; ++i) {
        num += std::pow(double(logits.f32()[i] - expected.f32()[i]), 2);
        den += std::pow(double(expected.f32()[i]), 2);
    }
    const double rel = std::sqrt(num / den);
    std::printf("%s: relative RMS error over %lld x %lld logits: %.3g\n", GetParam(), (long long)T, (long long)V, rel);
    EXPECT_LT(rel, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Architectures, HfImport, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(HfImportConfig, ArchitectureFlags) {
    EXPECT_FALSE(load_model(test::test_data("tiny_hf/llama")).model->config().tie_word_embeddings);
    const ModelConfig q2 = load_model(test::test_data("tiny_hf/qwen2")).model->config();
    EXPECT_TRUE(q2.attention_bias);
    EXPECT_TRUE(q2.tie_word_embeddings);
    const ModelConfig q3 = load_model(test::test_data("tiny_hf/qwen3")).model->config();
    EXPECT_TRUE(q3.qk_norm);
    EXPECT_EQ(q3.head_dim, 16);
    EXPECT_EQ(q3.q_dim(), 96);
}

}  // namespace
}  // namespace hydra
