// Tests of the HF config.json import: real configs of SmolLM2-135M (llama), Qwen2.5-0.5B (qwen2) and
// Qwen3-0.6B (qwen3) as published on the Hub, checked field by field, plus malformed configs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/hf_config.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// SmolLM2-135M config.json (values from the Hub).
const char* kSmolLM2 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 576,
  "initializer_range": 0.041666666666666664,
  "intermediate_size": 1536,
  "is_llama_config": true,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 9,
  "num_hidden_layers": 30,
  "num_key_value_heads": 3,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_interleaved": false,
  "rope_scaling": null,
  "rope_theta": 100000,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1",
  "use_cache": true,
  "vocab_size": 49152
})";

// Qwen2.5-0.5B-Instruct style config (eos as a list, as generation configs write it).
const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": [151645, 151643],
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// Qwen3-0.6B as newer transformers releases write it (RoPE settings in rope_parameters).
const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "layer_types": ["full_attention"],
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
  "sliding_window": null,
  "tie_word_embeddings": true,
  "dtype": "bfloat16",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

class HfConfigTest : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        dir_ =
            fs::temp_directory_path() / fmt::format("hydra_hfc_{}_{}", ::getpid(), info->name()) / "MyModel";
        fs::remove_all(dir_.parent_path());
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_.parent_path()); }

    std::string write(const std::string& text) {
        const std::string p = (dir_ / "config.json").string();
        std::ofstream(p, std::ios::binary) << text;
        return p;
    }
    ModelConfig load(const std::string& text) { return load_hf_config(write(text)); }

    // `base` with `patch` merged in (null values delete keys), loaded; expects a hydra::Error whose
    // message names the file and contains each of `parts`.
    void expect_error(const char* base, const json& patch, std::vector<std::string> parts) {
        json j = json::parse(base);
        j.merge_patch(patch);
        expect_error_text(j.dump(), parts);
    }
    void expect_error_text(const std::string& text, std::vector<std::string> parts) {
        const std::string p = write(text);
        try {
            load_hf_config(p);
        } catch (const Error& e) {
            const std::string msg = e.what();
            EXPECT_NE(msg.find(p), std::string::npos) << "message does not name the file: " << msg;
            for (const auto& part : parts)
                EXPECT_NE(msg.find(part), std::string::npos) << "lacks '" << part << "': " << msg;
            return;
        }
        ADD_FAILURE() << "no hydra::Error for " << text;
    }
    fs::path dir_;
};

TEST_F(HfConfigTest, SmolLM2Llama) {
    const ModelConfig c = load(kSmolLM2);
    EXPECT_EQ(c.architecture, "llama");
    EXPECT_EQ(c.name, "MyModel");
    EXPECT_EQ(c.vocab_size, 49152);
    EXPECT_EQ(c.hidden_size, 576);
    EXPECT_EQ(c.intermediate_size, 1536);
    EXPECT_EQ(c.num_layers, 30);
    EXPECT_EQ(c.num_heads, 9);
    EXPECT_EQ(c.num_kv_heads, 3);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.rope_dim, 64);
    EXPECT_EQ(c.max_position_embeddings, 8192);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
    EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_FALSE(c.qk_norm);
    EXPECT_EQ(c.bos_token_ids, std::vector<int32_t>{1});
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
    EXPECT_EQ(c.q_dim(), 576);
    EXPECT_EQ(c.kv_dim(), 192);
    EXPECT_EQ(c.group_size(), 3);
}

TEST_F(HfConfigTest, Qwen2) {
    const ModelConfig c = load(kQwen2);
    EXPECT_EQ(c.architecture, "qwen2");
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.hidden_size, 896);
    EXPECT_EQ(c.intermediate_size, 4864);
    EXPECT_EQ(c.num_layers, 24);
    EXPECT_EQ(c.num_heads, 14);
    EXPECT_EQ(c.num_kv_heads, 2);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.rope_dim, 64);
    EXPECT_EQ(c.max_position_embeddings, 32768);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
    EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_TRUE(c.attention_bias);  // always for Qwen2, with no flag in the file
    EXPECT_FALSE(c.qk_norm);
    EXPECT_EQ(c.bos_token_ids, std::vector<int32_t>{151643});
    EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{151645, 151643}));
}

TEST_F(HfConfigTest, Qwen3WithRopeParameters) {
    const ModelConfig c = load(kQwen3);
    EXPECT_EQ(c.architecture, "qwen3");
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.hidden_size, 1024);
    EXPECT_EQ(c.intermediate_size, 3072);
    EXPECT_EQ(c.num_layers, 28);
    EXPECT_EQ(c.num_heads, 16);
    EXPECT_EQ(c.num_kv_heads, 8);
    EXPECT_EQ(c.head_dim, 128);  // explicit, not hidden / heads = 64
    EXPECT_EQ(c.rope_dim, 128);
    EXPECT_EQ(c.q_dim(), 2048);
    EXPECT_EQ(c.max_position_embeddings, 40960);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
    EXPECT_FLOAT_EQ(c.rope_theta, 1e6f);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.bos_token_ids, std::vector<int32_t>{151643});
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{151645});
}

TEST_F(HfConfigTest, Qwen3AttentionBiasFromItsField) {
    json j = json::parse(kQwen3);
    j["attention_bias"] = true;
    EXPECT_TRUE(load(j.dump()).attention_bias);
}

TEST_F(HfConfigTest, Defaults) {
    // Only the required fields: every default shows.
    const ModelConfig c = load(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4})");
    EXPECT_EQ(c.num_kv_heads, 4);  // = num_attention_heads
    EXPECT_EQ(c.head_dim, 16);     // = hidden / heads
    EXPECT_EQ(c.rope_dim, 16);
    EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
    EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
    EXPECT_EQ(c.max_position_embeddings, 0);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_TRUE(c.bos_token_ids.empty());
    EXPECT_TRUE(c.eos_token_ids.empty());
    // null means "default" too, as transformers writes it.
    const ModelConfig d = load(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": null,
        "head_dim": null, "eos_token_id": null, "rope_scaling": null})");
    EXPECT_EQ(d.num_kv_heads, 4);
    EXPECT_EQ(d.head_dim, 16);
}

TEST_F(HfConfigTest, ArchitectureFromArchitecturesList) {
    json j = json::parse(kQwen3);
    j.erase("model_type");
    EXPECT_EQ(load(j.dump()).architecture, "qwen3");
    j["architectures"] = {"Qwen2ForCausalLM"};
    EXPECT_EQ(load(j.dump()).architecture, "qwen2");
    j["architectures"] = {"MistralForCausalLM"};
    expect_error_text(j.dump(), {"MistralForCausalLM", "not supported", "LlamaForCausalLM"});
    j.erase("architectures");
    expect_error_text(j.dump(), {"neither \"model_type\" nor \"architectures\""});
}

TEST_F(HfConfigTest, RopeThetaTopLevelOrRopeParameters) {
    json j = json::parse(kSmolLM2);
    j.erase("rope_theta");
    EXPECT_FLOAT_EQ(load(j.dump()).rope_theta, 10000.0f);
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
    EXPECT_FLOAT_EQ(load(j.dump()).rope_theta, 500000.0f);
    j["rope_scaling"] = {{"rope_type", "default"}};  // "default" scaling is no scaling
    EXPECT_FLOAT_EQ(load(j.dump()).rope_theta, 500000.0f);
}

TEST_F(HfConfigTest, UnsupportedFeatures) {
    expect_error(kSmolLM2, {{"model_type", "mistral"}}, {"\"mistral\"", "llama, qwen2, qwen3"});
    // llama3, linear and yarn are supported since issue 34 (tests/test_rope_scaling.cpp); these are not
    expect_error(kSmolLM2, {{"rope_scaling", {{"rope_type", "longrope"}, {"factor", 8.0}}}},
                 {"rope_scaling", "\"longrope\"", "not supported yet"});
    expect_error(kSmolLM2, {{"rope_scaling", {{"type", "su"}, {"factor", 2.0}}}},
                 {"\"su\"", "not supported"});
    expect_error(kQwen3, {{"rope_parameters", {{"rope_type", "proportional"}, {"rope_theta", 1e6}}}},
                 {"rope_parameters", "\"proportional\"", "not supported yet"});
    expect_error(kSmolLM2, {{"hidden_act", "gelu"}}, {"hidden_act", "\"gelu\"", "silu"});
    expect_error(kSmolLM2, {{"mlp_bias", true}}, {"mlp_bias"});
    expect_error(kQwen2, {{"use_sliding_window", true}}, {"use_sliding_window"});
}

TEST_F(HfConfigTest, WrongTypesAndMissingFields) {
    expect_error(kSmolLM2, {{"hidden_size", "576"}},
                 {"\"hidden_size\"", "is a string", "expected an integer"});
    expect_error(kSmolLM2, {{"hidden_size", 576.5}},
                 {"\"hidden_size\"", "is a float", "expected an integer"});
    expect_error(kSmolLM2, {{"num_key_value_heads", true}},
                 {"\"num_key_value_heads\"", "expected an integer"});
    expect_error(kSmolLM2, {{"num_hidden_layers", nullptr}}, {"missing required key \"num_hidden_layers\""});
    expect_error(kSmolLM2, {{"vocab_size", nullptr}}, {"missing", "\"vocab_size\""});
    expect_error(kSmolLM2, {{"intermediate_size", nullptr}}, {"missing", "\"intermediate_size\""});
    expect_error(kSmolLM2, {{"num_attention_heads", nullptr}}, {"missing", "\"num_attention_heads\""});
    expect_error(kSmolLM2, {{"rms_norm_eps", "1e-5"}}, {"\"rms_norm_eps\"", "expected a number"});
    expect_error(kSmolLM2, {{"rope_theta", {1, 2}}}, {"\"rope_theta\"", "is an array", "expected a number"});
    expect_error(kSmolLM2, {{"tie_word_embeddings", 1}},
                 {"\"tie_word_embeddings\"", "expected true or false"});
    expect_error(kSmolLM2, {{"eos_token_id", "2"}}, {"\"eos_token_id\"", "a string", "token id"});
    expect_error(kSmolLM2, {{"eos_token_id", {2, "x"}}}, {"\"eos_token_id\"", "token id"});
    expect_error(kSmolLM2, {{"bos_token_id", -1}}, {"\"bos_token_id\"", "out of range"});
    expect_error(kSmolLM2, {{"model_type", 3}}, {"\"model_type\"", "expected a string"});
    expect_error(kQwen3, {{"rope_parameters", {{"rope_theta", "big"}}}},
                 {"rope_parameters.rope_theta", "a number"});
    expect_error(kQwen3, {{"rope_parameters", 5}}, {"rope_parameters", "expected an object"});
    expect_error(kSmolLM2, {{"hidden_size", 18446744073709551615ull}}, {"\"hidden_size\"", "out of range"});
}

TEST_F(HfConfigTest, InconsistentValuesFailValidation) {
    expect_error(kSmolLM2, {{"num_key_value_heads", 4}}, {"num_kv_heads"});           // 9 % 4 != 0
    expect_error(kSmolLM2, {{"hidden_size", 577}}, {"hidden_size 577", "head_dim"});  // not divisible by 9
    expect_error(kSmolLM2, {{"num_hidden_layers", 0}}, {"num_layers"});
    expect_error(kSmolLM2, {{"num_attention_heads", 0}}, {"num_attention_heads"});
    expect_error(kSmolLM2, {{"rms_norm_eps", 0}}, {"rms_norm_eps"});
    expect_error(kSmolLM2, {{"head_dim", 63}}, {"head_dim"});  // odd: no RoPE pairs
    expect_error(kSmolLM2, {{"max_position_embeddings", -1}}, {"max_position_embeddings"});
    expect_error(kSmolLM2, {{"rope_theta", 1e300}}, {"rope_theta", "does not fit a float"});
}

TEST_F(HfConfigTest, BadFiles) {
    expect_error_text("{\"model_type\": ", {"not valid JSON"});
    expect_error_text("[1, 2]", {"expected a JSON object"});
    expect_error_text("", {"not valid JSON"});
    const std::string missing = (dir_ / "nope.json").string();
    try {
        load_hf_config(missing);
        ADD_FAILURE() << "no error for a missing file";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace hydra
