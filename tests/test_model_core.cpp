// Unit tests of the CPU forward building blocks and serving helpers: RoPE (and the GGUF q/k
// un-permutation it relies on), causal GQA attention against a naive float64 loop, incremental
// decode == one-shot prefill, named taps, the sampler, UTF-8 streaming, and loader errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "core/error.h"
#include "model/gguf_import.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model_paths.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/rope.h"
#include "serve/sampler.h"
#include "serve/utf8_stream.h"
#include "tiny_model.h"

namespace hydra {
namespace {

ModelConfig tiny_config() {
    return test::tiny_llama_config({.vocab = 50, .hidden = 24, .intermediate = 40, .layers = 2, .head_dim = 4});
}

void randomize(LlamaModel& m, uint64_t seed) { test::randomize_params(m, seed); }

// --- RoPE and the GGUF permutation -------------------------------------------------------------

// llama.cpp's converter permutation (engines.md §2.7): GGUF row 2i+j of a head = HF row j*(d/2)+i.
std::vector<float> permute_like_llamacpp(const std::vector<float>& hf, int64_t heads, int64_t d, int64_t cols) {
    std::vector<float> out(hf.size());
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < d / 2; ++i)
            for (int64_t j = 0; j < 2; ++j)
                for (int64_t c = 0; c < cols; ++c)
                    out[size_t((h * d + 2 * i + j) * cols + c)] = hf[size_t((h * d + j * (d / 2) + i) * cols + c)];
    return out;
}

TEST(Rope, UnpermuteInvertsTheConverterPermutation) {
    const int64_t heads = 3, d = 8, cols = 5;
    std::vector<float> hf(size_t(heads * d * cols));
    for (size_t i = 0; i < hf.size(); ++i) hf[i] = float(i);
    std::vector<float> gguf = permute_like_llamacpp(hf, heads, d, cols);
    EXPECT_NE(gguf, hf);
    unpermute_qk_rows(gguf.data(), heads, d, cols);
    EXPECT_EQ(gguf, hf);
}

TEST(Rope, NeoxOnHfLayoutEqualsAdjacentPairsOnGgufLayout) {
    // Scores q.k after RoPE must not depend on the layout/convention pair used.
    const int64_t d = 8, pos_q = 7, pos_k = 3;
    std::mt19937 gen(1);
    std::normal_distribution<float> dist;
    std::vector<float> q(d), k(d);
    for (auto& x : q) x = dist(gen);
    for (auto& x : k) x = dist(gen);
    std::vector<float> qn = q, kn = k;
    cpu::rope_forward(qn.data(), 1, 1, d, d, pos_q, 10000.0);
    cpu::rope_forward(kn.data(), 1, 1, d, d, pos_k, 10000.0);
    double neox = 0;
    for (int64_t i = 0; i < d; ++i) neox += double(qn[size_t(i)]) * kn[size_t(i)];
    // GGUF layout + ggml NORM RoPE (adjacent pairs), written out independently here.
    auto norm_rope = [&](std::vector<float> v, int64_t pos) {
        for (int64_t i = 0; i < d / 2; ++i) {
            const double a = double(pos) * std::pow(10000.0, -2.0 * double(i) / double(d));
            const double x0 = v[size_t(2 * i)], x1 = v[size_t(2 * i + 1)];
            v[size_t(2 * i)] = float(x0 * std::cos(a) - x1 * std::sin(a));
            v[size_t(2 * i + 1)] = float(x1 * std::cos(a) + x0 * std::sin(a));
        }
        return v;
    };
    auto qg = norm_rope(permute_like_llamacpp(q, 1, d, 1), pos_q);
    auto kg = norm_rope(permute_like_llamacpp(k, 1, d, 1), pos_k);
    double norm = 0;
    for (int64_t i = 0; i < d; ++i) norm += double(qg[size_t(i)]) * kg[size_t(i)];
    EXPECT_NEAR(neox, norm, 1e-5);
}

TEST(Rope, PositionZeroIsIdentityAndNormIsPreserved) {
    std::vector<double> x = {0.3, -1.2, 0.5, 2.0, 1.0, -0.7};
    std::vector<double> y = x;
    cpu::rope_forward(y.data(), 1, 1, 6, 6, 0, 10000.0);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_DOUBLE_EQ(x[i], y[i]);
    cpu::rope_forward(y.data(), 1, 1, 6, 6, 123, 10000.0);
    double nx = 0, ny = 0;
    for (size_t i = 0; i < x.size(); ++i) nx += x[i] * x[i], ny += y[i] * y[i];
    EXPECT_NEAR(nx, ny, 1e-12);
    EXPECT_NE(x[0], y[0]);
}

// --- attention -----------------------------------------------------------------------------------

TEST(Attention, MatchesNaiveFloat64GroupedCausal) {
    const int64_t T = 5, pos0 = 3, S = pos0 + T, H = 6, Hkv = 2, Dh = 4;
    std::mt19937 gen(3);
    std::normal_distribution<double> dist;
    std::vector<double> q(size_t(T * H * Dh)), k(size_t(S * Hkv * Dh)), v(size_t(S * Hkv * Dh));
    for (auto& x : q) x = dist(gen);
    for (auto& x : k) x = dist(gen);
    for (auto& x : v) x = dist(gen);
    std::vector<double> out(q.size()), probs(size_t(T * H * S));
    const double scale = 0.5;
    cpu::causal_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), T, pos0, H, Hkv, Dh, scale);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = h / (H / Hkv);
            std::vector<double> w;
            double z = 0;
            for (int64_t s = 0; s <= pos0 + t; ++s) {
                double dot = 0;
                for (int64_t d = 0; d < Dh; ++d) dot += q[size_t((t * H + h) * Dh + d)] * k[size_t((s * Hkv + g) * Dh + d)];
                w.push_back(std::exp(dot * scale));
                z += w.back();
            }
            double psum = 0;
            for (int64_t s = 0; s < S; ++s) psum += probs[size_t((t * H + h) * S + s)];
            EXPECT_NEAR(psum, 1.0, 1e-12);
            for (int64_t d = 0; d < Dh; ++d) {
                double ref = 0;
                for (int64_t s = 0; s <= pos0 + t; ++s) ref += w[size_t(s)] / z * v[size_t((s * Hkv + g) * Dh + d)];
                EXPECT_NEAR(out[size_t((t * H + h) * Dh + d)], ref, 1e-12);
            }
        }
}

// --- whole-model behaviour -----------------------------------------------------------------------

TEST(Forward, TokenByTokenDecodeEqualsPrefill) {
    LlamaModel m(tiny_config());
    randomize(m, 5);
    const std::vector<int32_t> ids = {3, 17, 42, 8, 0, 49, 25, 11, 30};
    const int64_t T = int64_t(ids.size()), C = m.config().hidden_size;
    KVCache a(m.config(), T), b(m.config(), T);
    Tensor all = forward_hidden(m, ids, a);
    for (int64_t t = 0; t < T; ++t) {
        Tensor one = forward_hidden(m, std::span<const int32_t>(&ids[size_t(t)], 1), b);
        for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(one.f32()[c], all.f32()[t * C + c], 1e-5) << "t=" << t;
    }
    // Prefill in two pieces equals one piece as well.
    KVCache c2(m.config(), T);
    forward_hidden(m, std::span<const int32_t>(ids.data(), 4), c2);
    Tensor rest = forward_hidden(m, std::span<const int32_t>(ids.data() + 4, size_t(T - 4)), c2);
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(rest.f32()[(T - 5) * C + c], all.f32()[(T - 1) * C + c], 1e-5);
}

TEST(Forward, RejectsOutOfVocabularyTokensAndCacheOverflow) {
    LlamaModel m(tiny_config());
    KVCache cache(m.config(), 4);
    const std::vector<int32_t> bad = {1, 50};
    EXPECT_THROW(forward_hidden(m, bad, cache), Error);
    const std::vector<int32_t> many = {1, 2, 3, 4, 5};
    EXPECT_THROW(forward_hidden(m, many, cache), Error);
}

TEST(Taps, ReadOverwriteAndWildcards) {
    LlamaModel m(tiny_config());
    randomize(m, 9);
    const std::vector<int32_t> ids = {1, 2, 3, 4};
    KVCache c0(m.config(), 8);
    Tensor base = forward_hidden(m, ids, c0);

    Taps taps;
    int fired = 0;
    taps.on("blk.*.resid_out", [&](std::string_view, int layer, Tensor& t) {
        EXPECT_EQ(t.dim(0), 4);
        EXPECT_EQ(layer, fired);
        ++fired;
    });
    // Writing a head's own value back must change nothing; zeroing it must change the output.
    taps.on("blk.1.head_out", [&](std::string_view, int, Tensor& t) {
        EXPECT_EQ(t.shape(), (Shape{4, 6, 4}));
    });
    KVCache c1(m.config(), 8);
    Tensor same = forward_hidden(m, ids, c1, {&taps});
    EXPECT_EQ(fired, 2);
    for (int64_t i = 0; i < same.numel(); ++i) EXPECT_EQ(same.f32()[i], base.f32()[i]);

    Taps zero;
    zero.on("blk.1.head_out", [](std::string_view, int, Tensor& t) {
        for (int64_t tok = 0; tok < t.dim(0); ++tok)
            for (int64_t d = 0; d < t.dim(2); ++d) t.f32()[(tok * t.dim(1) + 2) * t.dim(2) + d] = 0;  // head 2
    });
    KVCache c2(m.config(), 8);
    Tensor patched = forward_hidden(m, ids, c2, {&zero});
    double diff = 0;
    for (int64_t i = 0; i < patched.numel(); ++i) diff += std::fabs(patched.f32()[i] - base.f32()[i]);
    EXPECT_GT(diff, 1e-3);

    Taps probs;
    bool got = false;
    probs.on("blk.0.attn_probs", [&](std::string_view, int, Tensor& t) {
        got = true;
        EXPECT_EQ(t.shape(), (Shape{4, 6, 4}));
        EXPECT_EQ(t.f32()[1], 0.0f);  // token 0 cannot see token 1
    });
    KVCache c3(m.config(), 8);
    forward_hidden(m, ids, c3, {&probs});
    EXPECT_TRUE(got);
    EXPECT_THROW(taps.on("blk.x.q", {}), Error);
}

// --- sampler -------------------------------------------------------------------------------------

TEST(Sampler, GreedyTopKAndDistribution) {
    const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
    Sampler greedy({0.0f, 0, 1.0f, 1});
    EXPECT_EQ(greedy.sample(logits), 0);
    Sampler topk1({1.0f, 1, 1.0f, 2});
    for (int i = 0; i < 100; ++i) EXPECT_EQ(topk1.sample(logits), 0);

    Sampler full({1.0f, 0, 1.0f, 3});
    std::map<int, int> counts;
    const int n = 40000;
    for (int i = 0; i < n; ++i) counts[full.sample(logits)]++;
    EXPECT_NEAR(counts[0] / double(n), 0.5, 0.015);
    EXPECT_NEAR(counts[1] / double(n), 0.3, 0.015);
    EXPECT_NEAR(counts[2] / double(n), 0.2, 0.015);

    Sampler nucleus({1.0f, 0, 0.6f, 4});  // 0.5 < 0.6 <= 0.8: keeps tokens 0 and 1
    std::map<int, int> kept;
    for (int i = 0; i < 20000; ++i) kept[nucleus.sample(logits)]++;
    EXPECT_EQ(kept.count(2), 0u);
    EXPECT_NEAR(kept[0] / 20000.0, 0.5 / 0.8, 0.02);

    Sampler s1({0.9f, 40, 0.9f, 77}), s2({0.9f, 40, 0.9f, 77});
    for (int i = 0; i < 50; ++i) EXPECT_EQ(s1.sample(logits), s2.sample(logits));

    EXPECT_THROW(Sampler({-1.0f, 0, 1.0f, 0}), Error);
    EXPECT_THROW(Sampler({1.0f, -3, 1.0f, 0}), Error);
    EXPECT_THROW(Sampler({1.0f, 0, 0.0f, 0}), Error);
    EXPECT_THROW(Sampler({1.0f, 0, 1.5f, 0}), Error);
}

// --- UTF-8 streaming -----------------------------------------------------------------------------

TEST(Utf8Stream, ReleasesOnlyCompleteCharacters) {
    const std::string text = "a\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x9a\x80z";  // a é 東 🚀 z
    for (size_t cut1 = 0; cut1 <= text.size(); ++cut1)
        for (size_t cut2 = cut1; cut2 <= text.size(); ++cut2) {
            Utf8Stream s;
            std::string out;
            for (auto piece : {text.substr(0, cut1), text.substr(cut1, cut2 - cut1), text.substr(cut2)}) {
                std::string ready = s.push(piece);
                if (!ready.empty()) {
                    const unsigned char last_lead = static_cast<unsigned char>(ready.back());
                    EXPECT_TRUE(last_lead < 0x80 || (last_lead & 0xC0) == 0x80);
                }
                out += ready;
            }
            out += s.flush();
            EXPECT_EQ(out, text);
        }
}

// --- loader errors -------------------------------------------------------------------------------

TEST(ModelLoader, ErrorsNameThePath) {
    try {
        load_model("/nonexistent/model.gguf");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/model.gguf"), std::string::npos) << e.what();
    }
    const auto dir = std::filesystem::temp_directory_path() / "hydra_loader_test";
    std::filesystem::create_directories(dir);
    try {
        load_model(dir.string());
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
    if (test::default_model_present()) {
        // A truncated copy of the real model: one clear error naming the file.
        const auto cut = dir / "truncated.gguf";
        {
            std::ifstream in(test::default_model_path(), std::ios::binary);
            std::vector<char> head(1 << 20);
            in.read(head.data(), std::streamsize(head.size()));
            std::ofstream out(cut, std::ios::binary);
            out.write(head.data(), std::streamsize(head.size()));
        }
        try {
            load_model(cut.string());
            FAIL() << "no error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("truncated.gguf"), std::string::npos) << e.what();
        }
    }
    std::filesystem::remove_all(dir);
}

TEST(ModelConfig, ValidateNamesTheField) {
    ModelConfig c = tiny_config();
    c.num_kv_heads = 4;  // 6 % 4 != 0
    try {
        c.validate("cfg.json");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("num_kv_heads"), std::string::npos);
        EXPECT_NE(std::string(e.what()).find("cfg.json"), std::string::npos);
    }
}

}  // namespace
}  // namespace hydra
