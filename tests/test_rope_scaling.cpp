// RoPE scaling against Hugging Face transformers (tests/data/make_rope_scaling_references.py): each type's
// inverse frequencies, attention scale and cos/sin at chosen positions (rope_scaling/rotary_reference.json);
// a tiny random Llama-3-style model (rope_scaling llama3) and the same weights under linear, dynamic and
// yarn configs and without rotation (NoPE) with transformers' logits; config.json, GGUF and `--rope-scaling`
// parsing; the scaled
// rotation's backward; the cache path; NoPE; conversion with scaling and NoPE written and read back.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fmt/format.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "model/gguf_import.h"
#include "model/hf_config.h"
#include "model/hybrid_conversion.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_directory.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "model/rope_scaling.h"
#include "model_paths.h"
#include "ops/cpu/rope.h"
#include "temp_dir.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);
}

// ---- transformers' rotary embeddings, per type ----

TEST(RopeScalingReference, MatchesTransformersRotaryEmbedding) {
    const json ref = read_json(test::test_data("rope_scaling/rotary_reference.json"));
    ASSERT_GE(ref["cases"].size(), 10u);
    for (const json& c : ref["cases"]) {
        const std::string name = c["name"];
        SCOPED_TRACE(name);
        const RopeScaling s = rope_scaling_from_json(c["rope_parameters"], name, "rope_parameters");
        const int64_t R = c["head_dim"], half = R / 2, L = c["seq_len"];
        const double theta = c["rope_theta"];
        validate_rope_scaling(s, c["max_position_embeddings"], name);
        const RopeFrequencies f = rope_frequencies(s, theta, R, c["max_position_embeddings"], L);
        ASSERT_EQ(int64_t(f.inv_freq.size()), half);
        // transformers computes in float32: its inv_freq is ours rounded (a few ulp of pow in float32)
        for (int64_t i = 0; i < half; ++i) {
            const double want = c["inv_freq"][size_t(i)];
            EXPECT_NEAR(f.inv_freq[size_t(i)], want, 2e-6 * want) << "pair " << i;
        }
        EXPECT_NEAR(f.attention_scale, double(c["attention_scaling"]), 1e-6);
        // cos/sin through the CPU table the decoder layer uses, one position at a time (pos0 = p)
        for (size_t k = 0; k < c["positions"].size(); ++k) {
            const int64_t p = c["positions"][k];
            std::vector<double> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
            cpu::rope_table(cs.data(), sn.data(), 1, R, p, f.inv_freq.data(), f.attention_scale);
            // float32 angles in transformers: |error| up to ~ (p + 1) * 1.2e-7 rad
            const double tol = 2e-6 + 2.5e-7 * double(p + 1);
            for (int64_t i = 0; i < half; ++i) {
                EXPECT_NEAR(cs[size_t(i)], double(c["cos"][k][size_t(i)]), tol)
                    << "pos " << p << " pair " << i;
                EXPECT_NEAR(sn[size_t(i)], double(c["sin"][k][size_t(i)]), tol)
                    << "pos " << p << " pair " << i;
            }
        }
    }
}

TEST(RopeScaling, DefaultIsTheUnscaledTableBitForBit) {
    const RopeFrequencies f = rope_frequencies(RopeScaling{}, 10000.0, 64, 2048, 100);
    std::vector<float> c1(32 * 5), s1(32 * 5), c2(32 * 5), s2(32 * 5);
    cpu::rope_table(c1.data(), s1.data(), 5, 64, 17, 10000.0);
    cpu::rope_table(c2.data(), s2.data(), 5, 64, 17, f.inv_freq.data(), f.attention_scale);
    EXPECT_EQ(c1, c2);
    EXPECT_EQ(s1, s2);
}

TEST(RopeScaling, DynamicNtkGrowsOnlyPastTheOriginalContext) {
    RopeScaling s;
    s.type = RopeType::Dynamic;
    s.factor = 4;
    const RopeFrequencies plain = rope_frequencies(RopeScaling{}, 1e4, 64, 128, 0);
    EXPECT_EQ(rope_frequencies(s, 1e4, 64, 128, 128).inv_freq, plain.inv_freq);
    const RopeFrequencies at256 = rope_frequencies(s, 1e4, 64, 128, 256);
    const RopeFrequencies at512 = rope_frequencies(s, 1e4, 64, 128, 512);
    EXPECT_EQ(at256.inv_freq[0], 1.0);  // pair 0 never moves
    for (size_t i = 1; i < plain.inv_freq.size(); ++i) {
        EXPECT_LT(at256.inv_freq[i], plain.inv_freq[i]);
        EXPECT_LT(at512.inv_freq[i], at256.inv_freq[i]);
    }
    EXPECT_DOUBLE_EQ(dynamic_ntk_base(1e4, 4, 128, 64, 256), 1e4 * std::pow(4.0 * 2 - 3, 64.0 / 62.0));
}

TEST(RopeScaling, ScaledRotationBackwardIsItsTranspose) {
    // <R x, y> == <x, R^T y> with a YaRN table (cos/sin scaled by the attention factor)
    RopeScaling s;
    s.type = RopeType::Yarn;
    s.factor = 8;
    s.original_max_position_embeddings = 64;
    const RopeFrequencies f = rope_frequencies(s, 1e4, 16, 512, 0);
    ASSERT_GT(f.attention_scale, 1.1);
    const int64_t T = 7, H = 3, Dh = 16, n = T * H * Dh;
    std::vector<double> cs(static_cast<size_t>(T * 8)), sn(static_cast<size_t>(T * 8));
    cpu::rope_table(cs.data(), sn.data(), T, 16, 300, f.inv_freq.data(), f.attention_scale);
    std::mt19937_64 gen(3);
    std::normal_distribution<double> d;
    std::vector<double> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (auto& v : x) v = d(gen);
    for (auto& v : y) v = d(gen);
    std::vector<double> rx = x, ry = y;
    cpu::rope_forward(rx.data(), T, H, Dh, 16, cs.data(), sn.data());
    cpu::rope_backward(ry.data(), T, H, Dh, 16, cs.data(), sn.data());
    double a = 0, b = 0, nx = 0, nrx = 0;
    for (int64_t i = 0; i < n; ++i) a += rx[size_t(i)] * y[size_t(i)], b += x[size_t(i)] * ry[size_t(i)];
    for (int64_t i = 0; i < n; ++i) nx += x[size_t(i)] * x[size_t(i)], nrx += rx[size_t(i)] * rx[size_t(i)];
    EXPECT_NEAR(a, b, 1e-10 * std::abs(a));
    EXPECT_NEAR(std::sqrt(nrx / nx), f.attention_scale, 1e-12);  // a scaled rotation
}

// ---- config.json, the convert spec, GGUF ----

const char* kLlama =
    R"({"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
  "max_position_embeddings": 131072, "rope_theta": 500000.0})";

ModelConfig with_scaling(const json& patch) {
    json j = json::parse(kLlama);
    j.merge_patch(patch);
    return parse_hf_config(j.dump(), "/m/config.json");
}

void expect_error(const json& patch, const std::vector<std::string>& parts) {
    try {
        with_scaling(patch);
        ADD_FAILURE() << "no error for " << patch.dump();
    } catch (const Error& e) {
        for (const std::string& p : parts)
            EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
}

TEST(RopeScalingConfig, ReadsLlama31AndRoundTrips) {
    const ModelConfig c = with_scaling({{"rope_scaling",
                                         {{"rope_type", "llama3"},
                                          {"factor", 8.0},
                                          {"low_freq_factor", 1.0},
                                          {"high_freq_factor", 4.0},
                                          {"original_max_position_embeddings", 8192}}}});
    EXPECT_EQ(c.rope_scaling.type, RopeType::Llama3);
    EXPECT_EQ(c.rope_scaling.factor, 8.0);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
    EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
    const ModelConfig back = parse_hf_config(hf_config_to_json(c).dump(), "/m/config.json");
    EXPECT_EQ(back.rope_scaling, c.rope_scaling);
    // the newer layout: everything in rope_parameters; the legacy "type" key
    const ModelConfig y =
        with_scaling({{"rope_theta", nullptr},
                      {"rope_parameters",
                       {{"rope_type", "yarn"}, {"rope_theta", 1e6}, {"factor", 4.0}, {"beta_fast", 16}}}});
    EXPECT_EQ(y.rope_scaling.type, RopeType::Yarn);
    EXPECT_EQ(y.rope_scaling.beta_fast, 16.0);
    EXPECT_FLOAT_EQ(y.rope_theta, 1e6f);
    EXPECT_EQ(parse_hf_config(hf_config_to_json(y).dump(), "/m/config.json").rope_scaling, y.rope_scaling);
    EXPECT_EQ(with_scaling({{"rope_scaling", {{"type", "linear"}, {"factor", 2}}}}).rope_scaling.type,
              RopeType::Linear);
    EXPECT_EQ(with_scaling({{"rope_scaling", {{"type", "dynamic"}, {"factor", 2}}}}).rope_scaling.type,
              RopeType::Dynamic);
    EXPECT_TRUE(with_scaling({{"hydra_fa_nope", true}}).fa_nope);
}

TEST(RopeScalingConfig, RefusesWhatItCannotRun) {
    expect_error({{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 4.0}}}},
                 {"\"longrope\"", "not supported"});
    expect_error({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}, {"low_freq_factor"});
    expect_error({{"rope_scaling", {{"rope_type", "linear"}}}}, {"factor is missing"});
    expect_error({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.5}}}}, {"factor 0.5 out of range"});
    expect_error({{"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4}, {"beta_fast", "x"}}}},
                 {"rope_scaling.beta_fast", "a number"});
    expect_error(
        {{"rope_scaling",
          {{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 1}}}},
        {"low_freq_factor"});
    expect_error({{"rope_scaling", {{"rope_type", 3}}}}, {"rope_scaling.rope_type", "a string"});
}

TEST(RopeScalingConfig, ConvertSpec) {
    const RopeScaling y = parse_rope_scaling_spec("yarn:4,beta_fast=16,attention_factor=1.2,truncate=false");
    EXPECT_EQ(y.type, RopeType::Yarn);
    EXPECT_EQ(y.factor, 4.0);
    EXPECT_EQ(y.beta_fast, 16.0);
    EXPECT_EQ(y.attention_factor, 1.2);
    EXPECT_EQ(y.truncate, false);
    const RopeScaling l = parse_rope_scaling_spec("llama3:8");
    EXPECT_EQ(l.low_freq_factor, 1.0);
    EXPECT_EQ(l.high_freq_factor, 4.0);
    EXPECT_TRUE(parse_rope_scaling_spec("none").is_default());
    for (const char* bad :
         {"yarn", "yarn:", "yarn:x", "foo:2", "yarn:4,bogus=1", "yarn:4,beta_fast", "linear:0.5"})
        EXPECT_THROW(parse_rope_scaling_spec(bad), Error) << bad;
    // applied to a model of 8192 positions: that becomes the original context, the context grows
    ModelConfig c = with_scaling({{"max_position_embeddings", 8192}});
    apply_rope_scaling(c, y);
    EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
    EXPECT_EQ(c.max_position_embeddings, 32768);
    ModelConfig d = with_scaling({{"max_position_embeddings", 8192}});
    apply_rope_scaling(d, parse_rope_scaling_spec("dynamic:2"));
    EXPECT_EQ(d.max_position_embeddings, 8192);  // dynamic scales past it by itself
    EXPECT_NE(describe_rope_scaling(c.rope_scaling, c.max_position_embeddings).find("yarn factor 4"),
              std::string::npos);
    EXPECT_GT(static_ntk_theta(1e4, 4, 64), 4e4);
}

// A GGUF with the metadata config_from_gguf reads and one embedding tensor.
GgufWriter gguf_base() {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    w.add_u32("llama.embedding_length", 64);
    w.add_u32("llama.block_count", 1);
    w.add_u32("llama.feed_forward_length", 96);
    w.add_u32("llama.attention.head_count", 1);
    w.add_u32("llama.context_length", 4096);
    w.add_f32("llama.rope.freq_base", 10000.f);
    w.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    w.add_tensor_f32("token_embd.weight", {64, 8}, std::vector<float>(64 * 8, 0.f));
    return w;
}

ModelConfig gguf_config(const GgufWriter& w) {
    const std::vector<uint8_t> bytes = w.to_bytes();
    return config_from_gguf(GgufFile::parse(bytes.data(), bytes.size(), "test.gguf"));
}

TEST(RopeScalingGguf, YarnLinearAndLlama3Freqs) {
    {
        GgufWriter w = gguf_base();
        w.add_string("llama.rope.scaling.type", "yarn");
        w.add_f32("llama.rope.scaling.factor", 4.f);
        w.add_u32("llama.rope.scaling.original_context_length", 1024);
        w.add_f32("llama.rope.scaling.yarn_beta_fast", 16.f);
        const ModelConfig c = gguf_config(w);
        EXPECT_EQ(c.rope_scaling.type, RopeType::Yarn);
        EXPECT_EQ(c.rope_scaling.factor, 4.0);
        EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 1024);
        EXPECT_EQ(c.rope_scaling.beta_fast, 16.0);
    }
    {
        GgufWriter w = gguf_base();
        w.add_string("llama.rope.scaling.type", "linear");
        w.add_f32("llama.rope.scaling.factor", 2.f);
        EXPECT_EQ(gguf_config(w).rope_scaling.type, RopeType::Linear);
    }
    {
        GgufWriter w = gguf_base();
        w.add_string("llama.rope.scaling.type", "longrope");
        w.add_f32("llama.rope.scaling.factor", 2.f);
        EXPECT_THROW(gguf_config(w), Error);
    }
    {
        // llama.cpp's rope_freqs for Llama 3 parameters (original 1024 at this context): recovered exactly
        RopeScaling want;
        want.type = RopeType::Llama3;
        want.factor = 8, want.low_freq_factor = 1, want.high_freq_factor = 4;
        want.original_max_position_embeddings = 1024;
        const RopeFrequencies plain = rope_frequencies(RopeScaling{}, 1e4, 64, 4096, 0);
        const RopeFrequencies scaled = rope_frequencies(want, 1e4, 64, 4096, 0);
        std::vector<float> div(32);
        for (size_t i = 0; i < 32; ++i) div[i] = float(plain.inv_freq[i] / scaled.inv_freq[i]);
        GgufWriter w = gguf_base();
        w.add_u32("llama.rope.scaling.original_context_length", 1024);
        w.add_tensor_f32("rope_freqs.weight", {32}, div);
        const ModelConfig c = gguf_config(w);
        EXPECT_EQ(c.rope_scaling.type, RopeType::Llama3);
        EXPECT_NEAR(c.rope_scaling.factor, 8.0, 1e-6);
        EXPECT_NEAR(c.rope_scaling.low_freq_factor, 1.0, 1e-4);
        EXPECT_NEAR(c.rope_scaling.high_freq_factor, 4.0, 1e-4);
        // a table that is no llama3 blend is refused
        std::vector<float> odd(32, 1.f);
        odd[3] = 2.f, odd[9] = 1.5f, odd[20] = 3.f;
        GgufWriter w2 = gguf_base();
        w2.add_tensor_f32("rope_freqs.weight", {32}, odd);
        EXPECT_THROW(gguf_config(w2), Error);
    }
}

// ---- the tiny Llama-3-style model against transformers ----

double rel_rms(const Tensor& a, const float* b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        num += std::pow(double(a.f32()[i] - b[i]), 2);
        den += std::pow(double(b[i]), 2);
    }
    return std::sqrt(num / den);
}

Tensor full_logits(const LlamaModel& m, const Tensor& ids) {
    KVCache cache(m, ids.numel());
    return compute_logits(m, forward_hidden(m, {ids.data<int32_t>(), size_t(ids.numel())}, cache));
}

class TinyLlama3 : public ::testing::Test {
  protected:
    std::string dir = test::test_data("tiny_hf/llama3");
    SafetensorsFile ref = SafetensorsFile::open(dir + "/reference_logits.safetensors");
    Tensor ids = ref.copy("ids");
};

TEST_F(TinyLlama3, LogitsMatchTransformers) {
    LoadedModel m = load_model(dir);
    const ModelConfig& c = m.model->config();
    EXPECT_EQ(c.rope_scaling.type, RopeType::Llama3);
    EXPECT_EQ(c.head_dim, 64);
    Tensor expected = ref.to_f32("logits");
    const double rel = rel_rms(full_logits(*m.model, ids), expected.f32(), expected.numel());
    std::printf("llama3: relative RMS error over %lld logits: %.3g\n", (long long)expected.numel(), rel);
    EXPECT_LT(rel, 1e-5);
}

TEST_F(TinyLlama3, DecodeThroughTheCacheMatchesTheWholePrompt) {
    LoadedModel m = load_model(dir);
    const int64_t T = ids.numel(), V = m.model->config().vocab_size, split = 40;
    Tensor expected = ref.to_f32("logits");
    KVCache cache(*m.model, T);
    const int32_t* p = ids.data<int32_t>();
    Tensor first = compute_logits(*m.model, forward_hidden(*m.model, {p, size_t(split)}, cache));
    EXPECT_LT(rel_rms(first, expected.f32(), split * V), 1e-5);
    for (int64_t t = split; t < T; ++t) {
        Tensor one = compute_logits(*m.model, forward_hidden(*m.model, {p + t, 1}, cache));
        EXPECT_LT(rel_rms(one, expected.f32() + t * V, V), 1e-5) << "position " << t;
    }
}

TEST_F(TinyLlama3, OtherScalingsOfTheSameWeightsMatchTransformers) {
    const json variants = read_json(dir + "/rope_variants.json");
    ASSERT_EQ(variants.size(), 3u);
    for (const auto& [name, v] : variants.items()) {
        SCOPED_TRACE(name);
        test::TempDir tmp(name);
        json cfg = read_json(dir + "/config.json");
        cfg["max_position_embeddings"] = v["max_position_embeddings"];
        json params = v["rope_parameters"];
        params["rope_theta"] = 10000.0;
        cfg["rope_parameters"] = params;
        cfg.erase("rope_scaling");
        std::ofstream(tmp.path / "config.json") << cfg.dump(1);
        fs::copy_file(dir + "/model.safetensors", tmp.path / "model.safetensors");
        LoadedModel m = load_model(tmp.path.string());
        EXPECT_EQ(rope_type_name(m.model->config().rope_scaling.type), name);
        Tensor expected = ref.to_f32("logits_" + name);
        const double rel = rel_rms(full_logits(*m.model, ids), expected.f32(), expected.numel());
        std::printf("%s: relative RMS error %.3g\n", name.c_str(), rel);
        EXPECT_LT(rel, 1e-5);
    }
}

TEST_F(TinyLlama3, NopeMatchesTransformersWithoutRotation) {
    // hydra_fa_nope: the FA heads skip RoPE; the reference is transformers with cos 1, sin 0
    test::TempDir tmp("nope");
    json cfg = read_json(dir + "/config.json");
    cfg["hydra_fa_nope"] = true;
    std::ofstream(tmp.path / "config.json") << cfg.dump(1);
    fs::copy_file(dir + "/model.safetensors", tmp.path / "model.safetensors");
    LoadedModel m = load_model(tmp.path.string());
    ASSERT_TRUE(m.model->config().fa_nope);
    Tensor expected = ref.to_f32("logits_nope");
    const double rel = rel_rms(full_logits(*m.model, ids), expected.f32(), expected.numel());
    std::printf("nope: relative RMS error %.3g\n", rel);
    EXPECT_LT(rel, 1e-5);
}

TEST_F(TinyLlama3, ConversionWritesScalingAndNopeAndReadsThemBack) {
    LoadedModel teacher = load_model(dir);
    PlanRequest req;
    req.select = "random";
    req.granularity = "head";
    req.ratio = parse_ratio("1:1", "test");
    const HybridPlan plan = build_plan(teacher.model->config(), req);
    ConversionOptions opt;
    opt.rope_scaling = parse_rope_scaling_spec("yarn:4,beta_fast=24");
    opt.fa_nope = true;
    auto hybrid = convert_to_hybrid(*teacher.model, plan, opt);
    const ModelConfig& hc = hybrid->config();
    EXPECT_EQ(hc.rope_scaling.type, RopeType::Yarn);
    EXPECT_EQ(hc.rope_scaling.original_max_position_embeddings, 256);  // the teacher's context
    EXPECT_EQ(hc.max_position_embeddings, 1024);
    EXPECT_TRUE(hc.fa_nope);
    EXPECT_EQ(teacher.model->config().rope_scaling.type, RopeType::Llama3);  // the teacher is untouched
    test::TempDir tmp("convert");
    const std::string out = (tmp.path / "hybrid").string();
    save_model_directory(out, *hybrid, json::object());
    LoadedModel back = load_model(out);
    EXPECT_EQ(back.model->config().rope_scaling, hc.rope_scaling);
    EXPECT_TRUE(back.model->config().fa_nope);
    // NoPE needs LA heads
    req.select = "all-fa";
    ConversionOptions nope_only;
    nope_only.fa_nope = true;
    EXPECT_THROW(convert_to_hybrid(*teacher.model, build_plan(teacher.model->config(), req), nope_only),
                 Error);
}

}  // namespace
}  // namespace hydra
