// A pipeline variant's conversion (pipeline/variant_conversion.h) and the tokenizer files a converted model
// carries (model/tokenizer_files.h): every option of the variant reaches the plan and the converted config,
// and the result loads alone, from a directory teacher and from a GGUF one.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "eval/model_text_encoder.h"
#include "io/atomic_dir.h"
#include "model/model_directory.h"
#include "model/model_loader.h"
#include "model/tokenizer_files.h"
#include "model_paths.h"
#include "pipeline/variant_conversion.h"
#include "temp_dir.h"
#include "tiny_model.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;

// A tiny full-attention teacher saved as a model directory with a chat template and a tokenizer config.
std::string save_teacher(const test::TempDir& dir) {
    ModelConfig c = test::tiny_llama_config({.vocab = 260,
                                             .hidden = 32,
                                             .intermediate = 64,
                                             .layers = 2,
                                             .heads = 4,
                                             .kv_heads = 2,
                                             .head_dim = 8},
                                            "tiny-teacher");
    c.max_position_embeddings = 512;
    LlamaModel teacher(c);
    test::randomize_params(teacher, 3, 0.2f);
    const std::string path = dir.str("teacher");
    save_model_directory(path, teacher, {{"tokenizer", "byte-v1"}},
                         {{"tokenizer_config.json", "{\"model_max_length\": 512}\n"},
                          {"chat_template.jinja", "{{ messages }}\n"}});
    return path;
}

TEST(VariantConversion, EveryVariantOptionReachesTheModel) {
    const test::TempDir dir("variant");
    const std::string teacher_path = save_teacher(dir);
    const LoadedModel teacher = load_model(teacher_path);
    const ModelText text = byte_model_text();

    PipelineVariant v;
    v.name = "half-yarn";
    v.select = "random";
    v.ratio = "1:1";
    v.granularity = "head";
    v.seed = 5;
    v.rope_scaling = "yarn:4";
    const VariantConversion a = convert_variant(teacher, teacher_path, text, v, "", {}, dir.path / "a");
    EXPECT_EQ(a.plan.granularity, "head");
    EXPECT_FALSE(a.plan.has_windows());
    EXPECT_GT(a.parameters, 0);
    const LoadedModel la = load_model(dir.str("a"));
    EXPECT_EQ(la.model->config().rope_scaling.type, RopeType::Yarn);
    EXPECT_DOUBLE_EQ(la.model->config().rope_scaling.factor, 4.0);
    EXPECT_EQ(la.model->config().max_position_embeddings, 4 * 512);
    // The teacher's tokenizer files came along; the byte tokenizer's mark too.
    EXPECT_EQ(read_text_file(dir.path / "a" / "chat_template.jinja"), "{{ messages }}\n");
    EXPECT_EQ(read_text_file(dir.path / "a" / "tokenizer_config.json"), "{\"model_max_length\": 512}\n");
    const std::string config = read_text_file(dir.path / "a" / "config.json");
    EXPECT_NE(config.find("byte-v1"), std::string::npos);
    EXPECT_NE(config.find("half-yarn"), std::string::npos);

    // The sliding-window baseline and NoPE (the demo once dropped both).
    PipelineVariant w = v;
    w.name = "window";
    w.rope_scaling = "";
    w.window = 64;
    w.sinks = 4;
    const VariantConversion b = convert_variant(teacher, teacher_path, text, w, "", {}, dir.path / "b");
    EXPECT_TRUE(b.plan.has_windows());
    EXPECT_EQ(b.plan.window_sinks, 4);
    PipelineVariant n = v;
    n.name = "nope";
    n.rope_scaling = "";
    n.nope = true;
    convert_variant(teacher, teacher_path, text, n, "", {}, dir.path / "c");
    EXPECT_TRUE(load_model(dir.str("c")).model->config().fa_nope);

    // select = scores without a scores file: an error naming the file, and nothing written.
    PipelineVariant s = v;
    s.select = "scores";
    s.rope_scaling = "";
    EXPECT_THROW(
        convert_variant(teacher, teacher_path, text, s, dir.path / "no_scores.json", {}, dir.path / "d"),
        Error);
    EXPECT_FALSE(fs::exists(dir.path / "d" / "config.json"));
}

// A GGUF teacher has no tokenizer files: the converted model gets them written from the GGUF's vocabulary,
// and reads back the same vocabulary.
TEST(TokenizerFiles, FromAGgufVocabulary) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model missing (run tools/setup.sh)";
    const std::optional<TokenizerVocab> vocab = load_vocab(test::default_model_path());
    ASSERT_TRUE(vocab.has_value());
    LoadedModel gguf;  // only the vocabulary matters here
    gguf.vocab = vocab;
    const auto files = tokenizer_files_of(test::default_model_path(), gguf);
    ASSERT_TRUE(files.count("tokenizer.json"));
    ASSERT_TRUE(files.count("tokenizer_config.json"));
    EXPECT_FALSE(files.count("chat_template.jinja"));
    const test::TempDir dir("tokfiles");
    fs::create_directories(dir.path / "m");
    write_text_file(dir.path / "m" / "tokenizer.json", files.at("tokenizer.json"));
    const std::optional<TokenizerVocab> back = load_vocab(dir.str("m"));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(back->tokens, vocab->tokens);
    EXPECT_EQ(back->merges, vocab->merges);
    // No tokenizer at all: nothing to carry.
    EXPECT_TRUE(tokenizer_files_of(dir.str("missing.gguf"), LoadedModel{}).empty());
}

}  // namespace
}  // namespace hydra
