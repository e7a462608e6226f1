// `hydra pipeline` settings and the pieces its GPU run leans on: the device and score.file keys (parse,
// validation, clear errors), device = cuda refused up front without the CUDA hooks (nothing written),
// run_eval's sample cache (several models see exactly the samples they would have built), and a
// miniature CPU pipeline whose training stages all leave the held-out text out of their data.
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "eval/eval_runner.h"
#include "eval/model_text_encoder.h"
#include "eval/synthetic_mixer.h"
#include "eval/task_registry.h"
#include "pipeline/pipeline_config.h"
#include "pipeline/pipeline_runner.h"
#include "pipeline/pipeline_steps.h"
#include "pipeline/run_ledger.h"
#include "tiny_model.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;

TEST(PipelineConfig, DeviceAndScoreFile) {
    PipelineConfig tiny = PipelineConfig::preset("tiny-cpu");
    EXPECT_EQ(tiny.device, "cpu");
    EXPECT_TRUE(tiny.score_file.empty());
    const PipelineConfig gpu = PipelineConfig::preset("smollm2-gpu");
    EXPECT_EQ(gpu.device, "cuda");
    EXPECT_NE(gpu.score_file.find("smollm2_scores/scores.json"), std::string::npos);
    EXPECT_EQ(gpu.eval_lengths.back(), 32768);
    EXPECT_GT(gpu.longctx.seq_len, gpu.distill.seq_len);  // stage 3 is the long one

    tiny.apply_override("device=cuda");
    tiny.apply_override("score.file=/x/scores.json");
    EXPECT_EQ(tiny.device, "cuda");
    EXPECT_EQ(tiny.score_file, "/x/scores.json");
    const nlohmann::json j = tiny.to_json();
    EXPECT_EQ(j["device"], "cuda");
    EXPECT_EQ(j["score"]["file"], "/x/scores.json");

    PipelineConfig round = PipelineConfig::preset("tiny-cpu");
    round.apply(j, "round trip");
    EXPECT_EQ(round.device, "cuda");
    EXPECT_EQ(round.score_file, "/x/scores.json");

    PipelineConfig bad = PipelineConfig::preset("tiny-cpu");
    bad.apply_override("device=gpu");
    try {
        bad.validate();
        FAIL() << "device=gpu accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'gpu' is not cpu or cuda"), std::string::npos) << e.what();
    }
    try {
        bad.apply_override("score.fil=x");
        FAIL() << "score.fil accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("file"), std::string::npos) << e.what();  // lists the keys
    }
}

TEST(PipelineConfig, CudaWithoutHooksIsRefusedBeforeWriting) {
    PipelineConfig c = PipelineConfig::preset("tiny-cpu");
    c.device = "cuda";
    const fs::path out = fs::temp_directory_path() / "hydra_test_pipeline_cuda_refused";
    fs::remove_all(out);
    try {
        run_pipeline(c, out.string(), "", PipelineHooks{});
        FAIL() << "device=cuda ran without the CUDA hooks";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out));
}

// A run's timings survive a restart (a resumed run reports the steps it skips); a timings file that is not
// an object is not trusted, and the configuration as run is written when the ledger opens.
TEST(RunLedger, TimingsAcrossARestart) {
    const fs::path out = fs::temp_directory_path() / ("hydra_test_ledger_" + std::to_string(::getpid()));
    fs::remove_all(out);
    {
        RunLedger ledger(out / "run", "pipeline", nlohmann::json{{"seed", 7}});
        ledger.record("score", 1.5);
        ledger.record("v/distill", 2.0, 4096);
    }
    EXPECT_EQ(read_json_or(out / "run" / "pipeline_config.json", {}).value("seed", 0), 7);
    RunLedger again(out / "run", "pipeline", nlohmann::json::object());
    EXPECT_TRUE(again.has("score"));
    EXPECT_FALSE(again.has("eval/v"));
    EXPECT_DOUBLE_EQ(again.timings()["score"]["seconds"].get<double>(), 1.5);
    EXPECT_FALSE(again.timings()["score"].contains("tokens"));
    EXPECT_EQ(again.timings()["v/distill"]["tokens"].get<int64_t>(), 4096);
    std::ofstream(out / "run" / "timings.json") << "[1, 2]";
    RunLedger odd(out / "run", "pipeline", nlohmann::json::object());
    EXPECT_TRUE(odd.timings().is_object());
    EXPECT_TRUE(odd.timings().empty());
    odd.record("score", 3.0);
    EXPECT_DOUBLE_EQ(read_json_or(out / "run" / "timings.json", {})["score"]["seconds"].get<double>(), 3.0);
    fs::remove_all(out);
}

ModelConfig byte_config() {
    ModelConfig c = test::tiny_llama_config({.vocab = 260,
                                             .hidden = 16,
                                             .intermediate = 32,
                                             .layers = 1,
                                             .heads = 2,
                                             .kv_heads = 1,
                                             .head_dim = 8},
                                            "tiny-bytes");
    c.max_position_embeddings = 1024;
    return c;
}

TEST(EvalSampleCache, SameSamplesBuiltOnce) {
    auto ctx = std::make_shared<TaskContext>();
    ctx->text = byte_model_text();
    ctx->options.number_digits = 4;
    std::vector<std::unique_ptr<TaskGenerator>> gens;
    std::vector<const TaskGenerator*> tasks;
    for (const char* t : {"passkey", "niah_single_1"}) {
        gens.push_back(make_task(t, ctx));
        tasks.push_back(gens.back().get());
    }
    const LlamaModel model(byte_config());
    EvalSettings es;
    es.tasks = {"passkey", "niah_single_1"};
    es.lengths = {400, 700};
    es.samples = 2;
    es.seed = 7;
    // A generator that records the prompts it is given (and answers nothing).
    std::vector<std::vector<int32_t>> seen;
    auto recorder = [&](std::vector<std::vector<int32_t>>& into) -> GenerateFn {
        return [&into](const std::vector<int32_t>& prompt, int64_t,
                       const std::function<bool(const std::string&)>&) {
            into.push_back(prompt);
            return GreedyResult{};
        };
    };
    const ModelEvalResult plain = run_eval("plain", model, tasks, ctx->text, es, {}, recorder(seen));

    SampleCache cache;
    es.sample_cache = &cache;
    std::vector<std::vector<int32_t>> first, second;
    const ModelEvalResult a = run_eval("a", model, tasks, ctx->text, es, {}, recorder(first));
    EXPECT_EQ(cache.size(), 2u * 2u * 2u);
    const ModelEvalResult b = run_eval("b", model, tasks, ctx->text, es, {}, recorder(second));
    EXPECT_EQ(cache.size(), 8u);  // nothing rebuilt
    ASSERT_EQ(seen.size(), 8u);
    EXPECT_EQ(first, seen);
    EXPECT_EQ(second, seen);
    ASSERT_EQ(b.samples.size(), plain.samples.size());
    for (size_t i = 0; i < b.samples.size(); ++i) {
        EXPECT_EQ(b.samples[i].answers, plain.samples[i].answers);
        EXPECT_EQ(b.samples[i].prompt_tokens, plain.samples[i].prompt_tokens);
    }
    // A different seed is a different key: new samples.
    es.seed = 8;
    std::vector<std::vector<int32_t>> other;
    run_eval("c", model, tasks, ctx->text, es, {}, recorder(other));
    EXPECT_EQ(cache.size(), 16u);
    EXPECT_NE(other, seen);
}

// A miniature tiny-cpu pipeline: a few steps per stage, one task at 256 tokens, the given variants; and
// the hooks that give its stages synthetic rows (the preset is byte-level).
PipelineConfig miniature(const std::string& variants) {
    PipelineConfig c = PipelineConfig::preset("tiny-cpu");
    for (const std::string o :
         {"teacher_train.run.steps=3", "teacher_train.data.batch_size=2", "align.run.steps=1",
          "distill.run.steps=1", "longctx.run.steps=1", "eval.tasks=[\"passkey\"]", "eval.lengths=[256]",
          "eval.samples=1", "eval.heldout_tokens=300"})
        c.apply_override(o);
    c.apply_override("variants=" + variants);
    return c;
}

PipelineHooks byte_level_hooks() {
    PipelineHooks hooks;
    hooks.synthetic_rows = [](const TrainConfig& t) {
        static const ModelText text = byte_model_text();
        return synthetic_task_mixer(text, training_task_options(text), t.synthetic_tasks, t.seq_len);
    };
    return hooks;
}

TEST(PipelineRun, HeldoutTextIsLeftOutOfEveryStage) {
    const fs::path heldout = fs::path(HYDRA_SOURCE_DIR) / ".cache/prose/austen_persuasion.txt";
    if (std::getenv("HYDRA_CACHE") || !fs::exists(heldout))
        GTEST_SKIP() << "prose cache missing (tools/setup.sh)";
    const fs::path out = fs::temp_directory_path() / ("hydra_test_pipeline_" + std::to_string(::getpid()));
    fs::remove_all(out);
    const PipelineConfig c = miniature("[{\"name\":\"la\",\"select\":\"all-la\"}]");
    const PipelineHooks hooks = byte_level_hooks();
    run_pipeline(c, out.string(), "", hooks);
    for (const char* stage : {"teacher", "la/align", "la/distill", "la/longctx"}) {
        SCOPED_TRACE(stage);
        std::ifstream in(out / stage / "config.json");
        ASSERT_TRUE(in.good());
        const nlohmann::json j = nlohmann::json::parse(in);
        const nlohmann::json& src = j["hydra"]["train_config"]["data"]["sources"];
        ASSERT_TRUE(src.is_array());
        EXPECT_GE(src.size(), 2u);
        for (const auto& f : src) {
            std::error_code ec;
            EXPECT_FALSE(fs::equivalent(f.get<std::string>(), heldout, ec)) << f;
        }
    }
    std::ifstream report(out / "report.md");
    const std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("left out of every training stage"), std::string::npos);
    EXPECT_NE(text.find("saw synthetic rows of passkey"), std::string::npos);
    fs::remove_all(out);
}

// Variants for the long-context baselines: stages are a per-variant subset, the teacher (all-fa) may run
// longctx only, nope needs LA heads, rope_scaling is checked before anything runs.
TEST(PipelineConfig, VariantStagesAndPositions) {
    PipelineConfig c = PipelineConfig::preset("tiny-cpu");
    c.apply_override(
        "variants=[{\"name\":\"t-yarn\",\"select\":\"all-fa\",\"rope_scaling\":\"yarn:4\",\"stages\":[]},"
        "{\"name\":\"h\",\"select\":\"random\",\"ratio\":\"1:1\",\"nope\":true,\"stages\":[\"distill\","
        "\"longctx\"]}]");
    c.validate();
    ASSERT_EQ(c.variants.size(), 2u);
    EXPECT_TRUE(c.variants[0].stages.empty());
    EXPECT_EQ(c.variants[1].stages, (std::vector<std::string>{"distill", "longctx"}));
    EXPECT_TRUE(c.variants[1].nope);
    const nlohmann::json j = c.to_json();
    EXPECT_EQ(j["variants"][0]["rope_scaling"], "yarn:4");
    PipelineConfig round = PipelineConfig::preset("tiny-cpu");
    round.apply(j, "round trip");
    EXPECT_EQ(round.variants[1].stages, c.variants[1].stages);

    const std::vector<std::pair<std::string, std::string>> bad = {
        {"[{\"name\":\"t\",\"select\":\"all-fa\",\"stages\":[\"align\"]}]", "runs at most the longctx stage"},
        {"[{\"name\":\"t\",\"select\":\"all-fa\",\"nope\":true,\"stages\":[]}]", "nope needs LA heads"},
        {"[{\"name\":\"h\",\"stages\":[\"longctx\",\"align\"]}]", "in the order"},
        {"[{\"name\":\"h\",\"stages\":[\"warmup\"]}]", "unknown stage 'warmup'"},
        {"[{\"name\":\"h\",\"rope_scaling\":\"yarn:abc\"}]", "variant 'h': rope_scaling"},
        {"[{\"name\":\"h\",\"nope\":1}]", "expected true or false"},
        {"[{\"name\":\"h\",\"select\":\"random\",\"ratio\":\"7:1\",\"score_method\":\"retrieval\"}]",
         "score_method is for select scores"},
        {"[{\"name\":\"h\",\"select\":\"scores\",\"ratio\":\"7:1\",\"score_method\":\"retrieval\"}]",
         "not among score.methods"},
        {"[{\"name\":\"w\",\"select\":\"all-fa\",\"window\":8,\"stages\":[]}]", "needs a selection with LA"},
        {"[{\"name\":\"w\",\"select\":\"random\",\"ratio\":\"1:1\",\"window\":8,\"stages\":[\"align\"]}]",
         "no new heads for the align stage"},
        {"[{\"name\":\"w\",\"select\":\"random\",\"ratio\":\"1:1\",\"sinks\":2}]", "sinks need a window"},
    };
    for (const auto& [variants, want] : bad) {
        SCOPED_TRACE(variants);
        PipelineConfig b = PipelineConfig::preset("tiny-cpu");
        try {
            b.apply_override("variants=" + variants);
            b.validate();
            FAIL() << "accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        }
    }
}

// The study presets are valid as they stand, and variants_only runs a part of one (by name, in the order
// given; an unknown name lists the known ones).
TEST(PipelineConfig, StudyPresetsAndVariantsOnly) {
    for (const char* name : {"smollm2-gpu-selection", "smollm2-gpu-long"}) {
        SCOPED_TRACE(name);
        const PipelineConfig p = PipelineConfig::preset(name);
        p.validate();
        EXPECT_GE(p.variants.size(), 6u);
        EXPECT_EQ(p.distill.steps * p.distill.batch_size * p.distill.seq_len,
                  3052 * 8 * 2048);  // 50.0M tokens
    }
    // Stage 3 inside the teacher's window learns from the teacher alone; past it (16K rows) the text
    // teaches the positions the teacher cannot see.
    const PipelineConfig gp = PipelineConfig::preset("smollm2-gpu");
    EXPECT_EQ(gp.longctx.seq_len, gp.longctx.kl_max_position);
    EXPECT_EQ(gp.longctx.ce_weight, 0.0);
    EXPECT_EQ(gp.longctx.kl_weight, 1.0);
    EXPECT_EQ(PipelineConfig::preset("smollm2-gpu-selection").longctx.ce_weight, 0.0);
    const PipelineConfig lp = PipelineConfig::preset("smollm2-gpu-long");
    EXPECT_GT(lp.longctx.seq_len, lp.longctx.kl_max_position);
    EXPECT_GT(lp.longctx.ce_weight, 0.0);
    EXPECT_EQ(lp.longctx.ce_from_position, lp.longctx.kl_max_position);  // teacher inside, text past it
    EXPECT_EQ(lp.eval_lengths.back(), 131072);
    EXPECT_EQ(lp.longctx.seq_len, 16384);
    EXPECT_TRUE(lp.longctx.recompute);
    // both training-free scalings of the teacher (issue 34's baselines), no stage
    ASSERT_GE(lp.variants.size(), 2u);
    EXPECT_EQ(lp.variants[0].rope_scaling, "yarn:16");
    EXPECT_EQ(lp.variants[1].rope_scaling, "dynamic:16");
    EXPECT_TRUE(lp.variants[1].stages.empty());
    const PipelineVariant& swa = lp.variants.back();  // the sliding-window baseline, no align stage
    EXPECT_EQ(swa.window, 1024);
    EXPECT_EQ(swa.sinks, 4);
    EXPECT_EQ(swa.stages, (std::vector<std::string>{"distill", "longctx"}));
    PipelineConfig sel = PipelineConfig::preset("smollm2-gpu-selection");
    EXPECT_EQ(sel.variants[4].score_method, "retrieval");
    sel.apply_override("variants_only=[\"all-la\",\"hydra-7:1-random-s2\"]");
    ASSERT_EQ(sel.variants.size(), 2u);
    EXPECT_EQ(sel.variants[0].name, "all-la");
    EXPECT_EQ(sel.variants[1].seed, 2u);
    std::string err;
    try {
        sel.apply_override("variants_only=[\"nope\"]");
    } catch (const Error& e) {
        err = e.what();
    }
    EXPECT_NE(err.find("no variant named 'nope' (variants: all-la, hydra-7:1-random-s2)"), std::string::npos)
        << err;
}

// The baselines run end to end on the CPU: the teacher with training-free YaRN (no stage), the teacher
// fine-tuned by the longctx stage alone, and a NoPE hybrid with two stages; each model's record lists
// the stages it ran, and the converted configs carry the positions asked for.
TEST(PipelineRun, BaselineVariantsRunOnlyTheirStages) {
    if (std::getenv("HYDRA_CACHE") ||
        !fs::exists(fs::path(HYDRA_SOURCE_DIR) / ".cache/prose/austen_emma.txt"))
        GTEST_SKIP() << "prose cache missing (tools/setup.sh)";
    const fs::path out = fs::temp_directory_path() / ("hydra_test_pipeline_bl_" + std::to_string(::getpid()));
    fs::remove_all(out);
    PipelineConfig c = miniature(
        "[{\"name\":\"t-yarn\",\"select\":\"all-fa\",\"rope_scaling\":\"yarn:2\",\"stages\":[]},"
        "{\"name\":\"t-ft\",\"select\":\"all-fa\",\"stages\":[\"longctx\"]},"
        "{\"name\":\"h-nope\",\"select\":\"random\",\"ratio\":\"1:1\",\"nope\":true,\"stages\":[\"distill\","
        "\"longctx\"]},"
        "{\"name\":\"swa\",\"select\":\"random\",\"ratio\":\"1:1\",\"window\":16,\"sinks\":2}]");
    EXPECT_EQ(c.variants[3].stages, (std::vector<std::string>{"distill", "longctx"}));  // nothing to align
    c.apply_override("eval.teacher=false");  // a study part: the teacher's row came from an earlier part
    EXPECT_FALSE(c.eval_teacher);
    EXPECT_EQ(c.to_json()["eval"]["teacher"], false);
    const PipelineHooks hooks = byte_level_hooks();
    run_pipeline(c, out.string(), "", hooks);
    auto read = [](const fs::path& p) {
        std::ifstream in(p);
        EXPECT_TRUE(in.good()) << p;
        return nlohmann::json::parse(in);
    };
    const nlohmann::json teacher = read(out / "teacher" / "config.json");
    const nlohmann::json yarn = read(out / "t-yarn" / "converted" / "config.json");
    EXPECT_EQ(yarn["rope_scaling"]["rope_type"], "yarn") << yarn.dump();
    EXPECT_EQ(yarn["max_position_embeddings"].get<int64_t>(),
              2 * teacher["max_position_embeddings"].get<int64_t>());
    for (const char* st : {"align", "distill", "longctx"})
        EXPECT_FALSE(fs::exists(out / "t-yarn" / st)) << st;
    EXPECT_TRUE(fs::exists(out / "t-ft" / "longctx" / "config.json"));
    EXPECT_FALSE(fs::exists(out / "t-ft" / "align"));
    EXPECT_FALSE(fs::exists(out / "h-nope" / "align"));
    EXPECT_TRUE(fs::exists(out / "h-nope" / "longctx" / "config.json"));
    const nlohmann::json nope = read(out / "h-nope" / "converted" / "config.json");
    EXPECT_EQ(nope.value("hydra_fa_nope", false), true) << nope.dump();
    for (const auto& [name, stages] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"t-yarn", {}}, {"t-ft", {"longctx"}}, {"h-nope", {"distill", "longctx"}}}) {
        SCOPED_TRACE(name);
        const nlohmann::json r = read(out / "results" / (name + ".json"));
        std::vector<std::string> ran;
        for (const auto& [k, v] : r["budget"]["stages"].items()) ran.push_back(k);
        EXPECT_EQ(ran, stages) << r["budget"].dump();
    }
    std::ifstream report(out / "report.md");
    const std::string text((std::istreambuf_iterator<char>(report)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("`t-yarn`: stages: none (training-free); FA heads' RoPE scaling yarn:2"),
              std::string::npos);
    // The held-out windows are measured after every earlier stage of a variant too.
    const nlohmann::json ag = read(out / "eval" / "agreement.json");
    ASSERT_TRUE(ag["h-nope"].contains("after_stage")) << ag["h-nope"].dump();
    EXPECT_TRUE(ag["h-nope"]["after_stage"].contains("distill"));
    EXPECT_FALSE(ag["h-nope"]["after_stage"].contains("longctx"));  // the final model is the main entry
    EXPECT_GT(ag["h-nope"]["after_stage"]["distill"]["kl"].get<double>(), 0.0);
    EXPECT_FALSE(ag["t-ft"].contains("after_stage"));  // one stage: nothing earlier
    EXPECT_FALSE(ag.contains("teacher"));              // eval.teacher=false: no teacher row
    // the sliding-window baseline: every head softmax, the selection's LA heads windowed, trained and
    // evaluated
    const nlohmann::json swa = read(out / "swa" / "longctx" / "config.json");
    EXPECT_EQ(swa["hydra"]["plan"]["window_sinks"], 2) << swa["hydra"]["plan"].dump();
    EXPECT_EQ(swa["hydra"]["plan"]["la_heads"], 0);
    EXPECT_TRUE(ag.contains("swa"));
    EXPECT_NE(text.find("sliding-window heads (window 16, 2 sinks)"), std::string::npos);
    EXPECT_FALSE(fs::exists(out / "results" / "teacher.json"));
    EXPECT_NE(text.find("| h-nope | distill |"), std::string::npos);
    EXPECT_NE(text.find("| h-nope | final |"), std::string::npos);
    fs::remove_all(out);
}

}  // namespace
}  // namespace hydra
