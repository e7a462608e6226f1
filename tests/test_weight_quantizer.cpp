// model/weight_quantizer: Q8_0 copies of f32 weights (block rounding within half a scale step, zero blocks,
// refused shapes and values), attach_quantized's shape check, and decoding a hybrid from the copies: logits
// close to the f32 path, and the LA heads' copies in use (attaching them moves the logits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "model/hybrid_conversion.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/plan_builders.h"
#include "model/weight_quantizer.h"
#include "tiny_model.h"

namespace hydra {
namespace {

Tensor random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
    Tensor t = Tensor::zeros({rows, cols});
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> d(0.f, 0.5f);
    for (int64_t i = 0; i < rows * cols; ++i) t.f32()[i] = d(gen);
    return t;
}

TEST(WeightQuantizer, Q8_0RowsRoundWithinHalfAStep) {
    Tensor w = random_matrix(5, 96, 1);
    for (int j = 32; j < 64; ++j) w.f32()[2 * 96 + j] = 0.f;  // row 2, block 1: all zeros
    const QuantizedWeight q = quantize_q8_0(w, "w");
    ASSERT_EQ(q.type, GgmlType::Q8_0);
    ASSERT_EQ(q.rows, 5);
    ASSERT_EQ(q.cols, 96);
    ASSERT_EQ(q.bytes.size(), size_t(5 * 3 * 34));
    for (int64_t r = 0; r < 5; ++r)
        for (int64_t b = 0; b < 3; ++b) {
            const uint8_t* blk = q.bytes.data() + (r * 3 + b) * 34;
            const float d = load_f16(blk);
            float amax = 0.f;
            for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(w.f32()[r * 96 + b * 32 + j]));
            if (amax == 0.f) {
                EXPECT_EQ(d, 0.f);
                for (int j = 0; j < 32; ++j) EXPECT_EQ(int8_t(blk[2 + j]), 0);
                continue;
            }
            EXPECT_NEAR(d, amax / 127.f, amax / 127.f * 1e-3f) << "row " << r << " block " << b;
            for (int j = 0; j < 32; ++j) {
                const float x = w.f32()[r * 96 + b * 32 + j], back = d * float(int8_t(blk[2 + j]));
                EXPECT_LE(std::fabs(x - back), 0.5f * d * 1.01f) << "row " << r << " column " << b * 32 + j;
            }
        }
}

TEST(WeightQuantizer, RefusesPartialBlocksAndNonFiniteWeights) {
    try {
        quantize_q8_0(random_matrix(2, 40, 2), "layer.w");
        FAIL() << "40 columns accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("layer.w"), std::string::npos) << e.what();
    }
    Tensor w = random_matrix(2, 64, 3);
    w.f32()[70] = std::nanf("");
    try {
        quantize_q8_0(w, "layer.v");
        FAIL() << "a NaN weight accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("(1, 6)"), std::string::npos) << e.what();
    }
}

// A tiny 1:1 head-granularity hybrid whose linear weights all have widths in whole blocks of 32.
std::unique_ptr<LlamaModel> hybrid() {
    const ModelConfig c = test::tiny_llama_config({.vocab = 96,
                                                   .hidden = 64,
                                                   .intermediate = 96,
                                                   .layers = 3,
                                                   .heads = 4,
                                                   .kv_heads = 2,
                                                   .head_dim = 16});
    LlamaModel teacher(c);
    test::randomize_params(teacher, 5, 0.2f);
    PlanRequest r;
    r.select = "random";
    r.granularity = "head";
    r.ratio = parse_ratio("1:1", "test");
    r.fusion = FusionKind::ScaleNorm;
    ConversionOptions o;
    o.calibration_tokens = {1, 5, 9, 20, 33, 40, 41, 7};
    return convert_to_hybrid(teacher, build_plan(c, r), o);
}

std::vector<float> decode_logits(const LlamaModel& m, const std::vector<int32_t>& tokens,
                                 bool q8_activations = true) {
    KVCache cache(m, int64_t(tokens.size()) + 1);
    std::vector<float> all;
    ForwardOptions fo;
    fo.q8_activations = q8_activations;
    for (int32_t t : tokens) {
        const int32_t one[1] = {t};
        const Tensor l = forward_last_logits(m, one, cache, fo);
        all.insert(all.end(), l.f32(), l.f32() + m.config().vocab_size);
    }
    return all;
}

double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i)
        num += double(a[i] - b[i]) * (a[i] - b[i]), den += double(b[i]) * b[i];
    return std::sqrt(num / den);
}

TEST(WeightQuantizer, HybridDecodesFromTheCopiesCloseToF32) {
    const std::vector<int32_t> tokens = {3, 17, 42, 8, 8, 60, 1, 95, 23, 11};
    auto m = hybrid();
    int64_t n_la = 0, n_fa = 0;
    for (int64_t l = 0; l < m->config().num_layers; ++l) n_la += m->layer(l).n_la, n_fa += m->layer(l).n_fa;
    ASSERT_GT(n_la, 0);
    ASSERT_GT(n_fa, 0);
    const std::vector<float> f32 = decode_logits(*m, tokens);

    // every non-LA linear weight first, then the LA projections too
    auto non_la = hybrid();
    int64_t attached = 0;
    for (int64_t l = 0; l < non_la->config().num_layers; ++l) {
        const LayerWeights& w = non_la->layer(l);
        for (const auto& [suffix, t] :
             {std::pair<const char*, const Tensor*>{"self_attn.q_proj.weight", &w.wq},
              {"self_attn.k_proj.weight", &w.wk},
              {"self_attn.v_proj.weight", &w.wv},
              {"self_attn.o_proj.weight", &w.wo},
              {"mlp.gate_proj.weight", &w.w_gate},
              {"mlp.up_proj.weight", &w.w_up},
              {"mlp.down_proj.weight", &w.w_down}})
            if (!t->empty())
                attached +=
                    non_la->attach_quantized(LlamaModel::layer_name(l, suffix), quantize_q8_0(*t, suffix));
    }
    const std::vector<float> without_la = decode_logits(*non_la, tokens);
    const int64_t n = quantize_linear_weights(*m);
    EXPECT_GT(n, attached);                     // the LM head and the LA projections besides
    EXPECT_EQ(quantize_linear_weights(*m), 0);  // nothing left without a copy
    const std::vector<float> q8 = decode_logits(*m, tokens);

    // Q8_0 rounds each weight by up to half a step (max |w| / 254 of its block, ~0.4% of a typical weight);
    // the random tiny hybrid's logits move by a few percent for it, and the 8-bit activations add as much
    // again (ReferenceLogits.Q8ActivationDecodeMatchesF32Decode bounds those alone by 0.2 on the real model)
    const double err_weights = rel_rms(decode_logits(*m, tokens, false), f32), err = rel_rms(q8, f32);
    std::printf(
        "decode logits from Q8_0 copies against f32: rel RMS %.3e (f32 activations), %.3e (8-bit), %lld "
        "copies\n",
        err_weights, err, (long long)n);
    EXPECT_GT(err_weights, 0.0);
    EXPECT_LT(err_weights, 5e-2);
    EXPECT_LT(err, 1e-1);
    EXPECT_GT(rel_rms(q8, without_la), 0.0) << "the LA projections' copies are not used";
    // the prefill (several rows at once) stays on the f32 weights
    KVCache a(*m, 16), b(*hybrid(), 16);
    const Tensor pa = forward_last_logits(*m, tokens, a), pb = forward_last_logits(*hybrid(), tokens, b);
    EXPECT_EQ(std::memcmp(pa.f32(), pb.f32(), size_t(m->config().vocab_size) * sizeof(float)), 0);
}

TEST(WeightQuantizer, AttachRefusesACopyOfAnotherShape) {
    auto m = hybrid();
    const LayerWeights& w = m->layer(0);
    const Tensor wrong = random_matrix(w.w_gate.dim(0) + 1, w.w_gate.dim(1), 4);
    EXPECT_FALSE(
        m->attach_quantized(LlamaModel::layer_name(0, "mlp.gate_proj.weight"), quantize_q8_0(wrong, "x")));
    EXPECT_TRUE(
        m->attach_quantized(LlamaModel::layer_name(0, "mlp.gate_proj.weight"), quantize_q8_0(w.w_gate, "x")));
    EXPECT_TRUE(
        m->attach_quantized(LlamaModel::layer_name(0, "mlp.gate_proj.weight"), QuantizedWeight{}));  // clears
    EXPECT_TRUE(m->layer(0).qw_gate.empty());
}

}  // namespace
}  // namespace hydra
