// Tests of the evaluation with intervals: --tasks-file rows (validation with line numbers, scoring
// with the built-in matcher on a tiny model, the context check), results.json / results.csv with
// intervals and their read-back (also of the older layout), task groups, held-out KL / agreement /
// perplexity over shard windows, and the per-model records merged into one report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "eval/eval_runner.h"
#include "eval/heldout_input.h"
#include "eval/heldout_metrics.h"
#include "eval/heldout_sources.h"
#include "eval/model_text_encoder.h"
#include "eval/results_io.h"
#include "eval/tasks_file.h"
#include "io/atomic_dir.h"
#include "pipeline/results_merge.h"
#include "pipeline/variant_record.h"
#include "scoped_env.h"
#include "temp_dir.h"
#include "tiny_model.h"
#include "train/token_shards.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(TasksFile, ParsesRowsAndDefaults) {
    const std::string text =
        "{\"prompt\": \"What is 2+2?\", \"answer\": \"4\"}\n"
        "\n"
        "{\"prompt\": \"Name a colour\", \"answer\": [\"red\", \"blue\"], \"length\": \"4k\", \"id\": "
        "\"c1\"}\r\n"
        "{\"prompt\": \"x\", \"answer\": \"y\", \"length\": 512, \"id\": 7}";
    const auto rows = parse_tasks_jsonl(text, "t.jsonl");
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0].line, 1);
    EXPECT_EQ(rows[0].id, "line 1");
    EXPECT_EQ(rows[0].length, 0);
    EXPECT_EQ(rows[1].line, 3);
    EXPECT_EQ(rows[1].answers, (std::vector<std::string>{"red", "blue"}));
    EXPECT_EQ(rows[1].length, 4096);
    EXPECT_EQ(rows[1].id, "c1");
    EXPECT_EQ(rows[2].id, "7");
    EXPECT_EQ(rows[2].length, 512);
}

TEST(TasksFile, EveryBadRowNamesItsLine) {
    const std::string ok = "{\"prompt\": \"p\", \"answer\": \"a\"}\n";
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{\"prompt\": \"p\", \"answer\": \"a\"", "not valid JSON"},
        {"{\"prompt\": \"p\", \"answer\": " + std::string(100, '[') + std::string(100, ']') + "}",
         "nests deeper than 64"},
        {"[1, 2]", "expected a JSON object"},
        {"{\"answer\": \"a\"}", "missing \"prompt\""},
        {"{\"prompt\": 3, \"answer\": \"a\"}", "\"prompt\" must be a string"},
        {"{\"prompt\": \"\", \"answer\": \"a\"}", "\"prompt\" is empty"},
        {"{\"prompt\": \"p\"}", "missing \"answer\""},
        {"{\"prompt\": \"p\", \"answer\": 4}", "\"answer\" must be a string or a list"},
        {"{\"prompt\": \"p\", \"answer\": []}", "empty list"},
        {"{\"prompt\": \"p\", \"answer\": [\"a\", 1]}", "\"answer\"[1] must be a string"},
        {"{\"prompt\": \"p\", \"answer\": \"  \"}", "empty or blank"},
        {"{\"prompt\": \"p\", \"answer\": \"a\", \"length\": 0}", "at least 1"},
        {"{\"prompt\": \"p\", \"answer\": \"a\", \"length\": \"long\"}", "\"length\""},
        {"{\"prompt\": \"p\", \"answer\": \"a\", \"length\": 1.5}", "positive integer"},
        {"{\"prompt\": \"p\", \"answer\": \"a\", \"id\": [1]}", "\"id\" must be a string or an integer"},
        {"{\"prompt\": \"p\", \"answers\": \"a\"}", "unknown key \"answers\""},
        {"{\"prompt\": \"p\xff\", \"answer\": \"a\"}", "invalid UTF-8"},
    };
    for (const auto& [row, want] : cases) {
        const std::string msg = error_of([&] { parse_tasks_jsonl(ok + ok + row + "\n", "f.jsonl"); });
        EXPECT_NE(msg.find("f.jsonl:3"), std::string::npos) << row << " -> " << msg;
        EXPECT_NE(msg.find(want), std::string::npos) << row << " -> " << msg;
    }
    EXPECT_NE(error_of([&] {
                  parse_tasks_jsonl(
                      "{\"prompt\":\"p\",\"answer\":\"a\",\"id\":\"x\"}\n"
                      "{\"prompt\":\"p\",\"answer\":\"a\",\"id\":\"x\"}\n",
                      "d.jsonl");
              }).find("d.jsonl:2: \"id\" x repeats"),
              std::string::npos);
    EXPECT_NE(error_of([] { parse_tasks_jsonl("\n  \n", "e.jsonl"); }).find("no rows"), std::string::npos);
    EXPECT_NE(error_of([] { read_tasks_file("/nonexistent/rows.jsonl"); }), "");
}

// A tiny random model over the byte tokenizer (its outputs are noise; `generate` stands in where the
// test needs known outputs).
struct TinyByteModel {
    std::unique_ptr<LlamaModel> model;
    TaskContext ctx;
    explicit TinyByteModel(int64_t max_pos = 0, uint64_t seed = 5) {
        ctx.text = byte_model_text();
        ctx.options.format = PromptFormat::kRaw;
        test::TinyShape s;
        s.vocab = ctx.text.encoder->vocab_size();
        ModelConfig c = test::tiny_llama_config(s);
        c.max_position_embeddings = max_pos;
        model = std::make_unique<LlamaModel>(c);
        test::randomize_params(*model, seed);
    }
};

TEST(TasksFile, ScoresWithTheBuiltInMatcherAndGroupsByLength) {
    TinyByteModel tm;
    const auto rows = parse_tasks_jsonl(
        "{\"prompt\": \"q1\", \"answer\": \"Paris\", \"length\": 100}\n"
        "{\"prompt\": \"q2\", \"answer\": [\"red\", \"blue\"], \"length\": 100}\n"
        "{\"prompt\": \"q3\", \"answer\": \"42\", \"length\": 200}\n"
        "{\"prompt\": \"q4\", \"answer\": \"x\"}\n",
        "rows.jsonl");
    // Known outputs per prompt: the matcher is case-insensitive and takes any acceptable answer.
    const std::map<int32_t, std::string> outputs = {
        {'1', "  the answer is PARIS.\n"}, {'2', "Blue, I think"}, {'3', "forty-two"}, {'4', "x marks it"}};
    GenerateFn gen = [&](const std::vector<int32_t>& prompt, int64_t,
                         const std::function<bool(const std::string&)>&) {
        GreedyResult g;
        g.text = outputs.at(prompt.back());
        g.tokens.assign(3, 0);
        return g;
    };
    EvalSettings es;
    ModelEvalResult r =
        run_tasks_file("tiny", *tm.model, tm.ctx, rows, "rows", "rows.jsonl", 256, es, {}, gen);
    ASSERT_EQ(r.samples.size(), 4u);
    EXPECT_EQ(r.samples[0].score, 1.0);
    EXPECT_EQ(r.samples[1].score, 1.0);
    EXPECT_EQ(r.samples[2].score, 0.0);
    EXPECT_EQ(r.samples[3].score, 1.0);
    EXPECT_EQ(r.samples[3].length,
              256);  // no "length": the prompt's tokens rounded up to a power of two >= 256
    EXPECT_EQ(r.samples[1].id, "line 2");
    EXPECT_DOUBLE_EQ(r.task_scores["rows"][100], 100.0);
    EXPECT_DOUBLE_EQ(r.task_scores["rows"][200], 0.0);
    EXPECT_DOUBLE_EQ(r.overall, (100.0 + 0.0 + 100.0) / 3);
    EXPECT_DOUBLE_EQ(r.task_ci["rows"][100].lo, 100.0);  // both samples right: a degenerate interval

    // The real CPU path runs end to end on the tiny model; scores stay in [0, 1].
    ModelEvalResult cpu = run_tasks_file("tiny", *tm.model, tm.ctx, rows, "rows", "rows.jsonl", 256, es);
    ASSERT_EQ(cpu.samples.size(), 4u);
    for (const auto& s : cpu.samples) {
        EXPECT_GE(s.score, 0.0);
        EXPECT_LE(s.score, 1.0);
        EXPECT_GT(s.prompt_tokens, 0);
    }
}

TEST(TasksFile, PromptBeyondTheContextIsRefusedBeforeRunning) {
    TinyByteModel tm(64);
    const std::string long_prompt(100, 'a');
    const auto rows = parse_tasks_jsonl("{\"prompt\": \"short\", \"answer\": \"a\"}\n{\"prompt\": \"" +
                                            long_prompt + "\", \"answer\": \"a\"}\n",
                                        "ctx.jsonl");
    int calls = 0;
    GenerateFn gen = [&](const std::vector<int32_t>&, int64_t,
                         const std::function<bool(const std::string&)>&) {
        ++calls;
        return GreedyResult{};
    };
    const std::string msg =
        error_of([&] { run_tasks_file("tiny", *tm.model, tm.ctx, rows, "r", "ctx.jsonl", 64, {}, {}, gen); });
    EXPECT_NE(msg.find("ctx.jsonl:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("context of 64"), std::string::npos) << msg;
    EXPECT_EQ(calls, 0);
}

ModelEvalResult synthetic_result(const std::string& name, double p_a, double p_b) {
    ModelEvalResult r;
    r.model = name;
    for (int64_t len : {1024, 2048})
        for (const auto& [task, p] : {std::pair<std::string, double>{"a", p_a}, {"b", p_b}})
            for (int i = 0; i < 50; ++i) {
                SampleOutcome o;
                o.task = task;
                o.length = len;
                o.index = i;
                o.score = i < int(p * 50) ? 1.0 : 0.0;
                r.samples.push_back(o);
            }
    aggregate(r);
    return r;
}

TEST(EvalResults, IntervalsInJsonCsvTableAndReadBack) {
    const ModelEvalResult r = synthetic_result("m", 0.8, 0.3);
    EXPECT_NEAR(r.overall, 55.0, 1e-9);
    EXPECT_LT(r.overall_ci.lo, 55.0);
    EXPECT_GT(r.overall_ci.hi, 55.0);
    // The mean over four cells of 50 is tighter than one cell's interval.
    EXPECT_LT(r.overall_ci.hi - r.overall_ci.lo,
              r.task_ci.at("b").at(1024).hi - r.task_ci.at("b").at(1024).lo);
    EvalRunInfo info;
    info.settings.tasks = {"a", "b"};
    info.settings.lengths = {1024, 2048};
    info.groups = {{"held-out tasks", {"b"}}};
    const json j = results_to_json(info, {r});
    const json& m = j["models"][0];
    EXPECT_TRUE(m["overall_ci"]["lo"].is_number());
    EXPECT_TRUE(m["per_length_ci"]["1024"]["hi"].is_number());
    EXPECT_TRUE(m["scores_ci"]["a"]["2048"]["lo"].is_number());
    EXPECT_DOUBLE_EQ(m["groups"]["held-out tasks"]["overall"].get<double>(), 30.0);
    EXPECT_EQ(j["bootstrap"]["resamples"].get<int64_t>(), 1000);

    const ModelEvalResult back = model_result_from_json(m, "results.json");
    EXPECT_DOUBLE_EQ(back.overall, r.overall);
    EXPECT_DOUBLE_EQ(back.overall_ci.lo, r.overall_ci.lo);  // recomputed from the samples, same seed

    // Older layout (the pipeline's eval/<model>.json before intervals), without samples: numbers kept.
    const json old = {{"model", "t"},
                      {"overall", 40.0},
                      {"task_scores", {{"vt", {{"2048", 40.0}}}}},
                      {"length_scores", {{"2048", 40.0}}}};
    const ModelEvalResult o = model_result_from_json(old, "old.json");
    EXPECT_DOUBLE_EQ(o.task_scores.at("vt").at(2048), 40.0);
    EXPECT_DOUBLE_EQ(o.overall, 40.0);
    EXPECT_TRUE(std::isnan(o.overall_ci.lo));
    EXPECT_THROW(model_result_from_json(json{{"samples", {{{"task", "a"}}}}}, "bad.json"), Error);

    const std::string csv = results_to_csv({r});
    EXPECT_EQ(csv.substr(0, csv.find('\n')),
              "model,task,length,score,ci_lo,ci_hi,samples,mean_prefill_s,mean_decode_s");
    const std::string table = results_table(r, info);
    EXPECT_NE(table.find("80.0 ["), std::string::npos) << table;
    EXPECT_NE(table.find("held-out tasks"), std::string::npos) << table;
}

TEST(HeldoutMetrics, WindowStatsMatchAHandComputation) {
    // V = 3, two positions. Teacher logits (0, 0, 0) and (ln 2, 0, 0); student (ln 2, 0, 0) and (0, 0, 0).
    const float l2 = float(std::log(2.0));
    const std::vector<float> t = {0, 0, 0, l2, 0, 0}, s = {l2, 0, 0, 0, 0, 0};
    const std::vector<int32_t> tokens = {0, 1, 0};  // targets 1, 0
    const WindowStats w = window_stats(tokens, t, s, 3);
    // p_t = (1/3,1/3,1/3), p_s = (1/2,1/4,1/4): KL = sum p_t log(p_t/p_s).
    const double kl0 = (std::log((1 / 3.0) / 0.5) + 2 * std::log((1 / 3.0) / 0.25)) / 3;
    const double kl1 = 0.5 * std::log(0.5 / (1 / 3.0)) + 2 * 0.25 * std::log(0.25 / (1 / 3.0));
    EXPECT_NEAR(w.kl, kl0 + kl1, 1e-6);
    EXPECT_EQ(w.tokens, 2);
    EXPECT_DOUBLE_EQ(w.agree, 2.0);  // argmax 0 at both positions for both (a tie goes to the first id)
    EXPECT_NEAR(w.nll_student, -std::log(0.25) - std::log(1 / 3.0), 1e-6);
    EXPECT_NEAR(w.nll_teacher, -std::log(1 / 3.0) - std::log(0.5), 1e-6);
    EXPECT_THROW(window_stats(std::vector<int32_t>{0, 5, 0}, t, s, 3),
                 Error);  // token outside the vocabulary
}

TEST(HeldoutMetrics, ShardWindowsAndTinyModels) {
    test::TempDir dir("heldout");
    const fs::path src = dir.path / "doc.txt";
    std::string text;
    for (int i = 0; i < 400; ++i)
        text += "Paragraph " + std::to_string(i) + " says something about the sea.\n\n";
    write_text_file(src, text);
    const ByteEncoder enc;
    build_token_shards({src.string()}, enc, (dir.path / "shards").string(), 1 << 20, 0.3, 11, 256);
    const TokenShards sh = open_token_shards((dir.path / "shards").string(), &enc);
    ASSERT_GT(sh.heldout.size(), 300);
    const auto ws = heldout_windows(sh.heldout, 64, 200);
    int64_t covered = 0;
    for (const auto& w : ws) covered += int64_t(w.size()) - 1;
    EXPECT_EQ(covered, 200);
    ASSERT_GE(ws.size(), 4u);
    std::vector<int32_t> first(65);
    sh.heldout.read(0, 65, first.data());
    EXPECT_EQ(ws[0], first);
    EXPECT_EQ(ws[1][0], first[64]);  // the next window starts at the previous one's last token
    EXPECT_THROW(heldout_windows(sh.heldout, 0, 10), Error);

    test::TinyShape shape;
    shape.vocab = enc.vocab_size();
    LlamaModel teacher(test::tiny_llama_config(shape)), student(test::tiny_llama_config(shape));
    test::randomize_params(teacher, 1, 0.1f);
    test::randomize_params(student, 2, 0.1f);
    const LogitsFn lt = cpu_logits_fn(teacher), ls = cpu_logits_fn(student);
    const HeldoutMetrics self = heldout_metrics(lt, lt, ws, shape.vocab);
    EXPECT_EQ(self.tokens, 200);
    EXPECT_NEAR(self.kl, 0.0, 1e-9);
    EXPECT_DOUBLE_EQ(self.top1, 1.0);
    EXPECT_NEAR(self.ppl_ratio, 1.0, 1e-12);
    const HeldoutMetrics m = heldout_metrics(lt, ls, ws, shape.vocab);
    EXPECT_GT(m.kl, 0.0);
    EXPECT_LE(m.kl_ci.lo, m.kl);
    EXPECT_GE(m.kl_ci.hi, m.kl);
    EXPECT_LE(m.ppl_ci.lo, m.ppl);
    EXPECT_GE(m.ppl_ci.hi, m.ppl);
    EXPECT_NEAR(m.teacher_ppl, self.ppl, 1e-9 * self.ppl);
    const json j = heldout_metrics_json(m);
    EXPECT_EQ(j["tokens"].get<int64_t>(), 200);
    EXPECT_TRUE(j["kl_ci"]["lo"].is_number());
}

// `hydra ppl --teacher`'s input: a text file's tokens or a shard directory's held-out split, cut as
// heldout_windows cuts them; every bad input is a hydra::Error naming it.
TEST(HeldoutMetrics, InputFromTextFileOrShards) {
    test::TempDir dir("heldout_input");
    const fs::path src = dir.path / "doc.txt";
    std::string text;
    for (int i = 0; i < 300; ++i) text += "Line " + std::to_string(i) + " of the held-out text.\n\n";
    write_text_file(src, text);
    const ByteEncoder enc;

    const HeldoutInput from_text = heldout_input_windows(src.string(), "", enc, 64, 1000);
    const std::vector<int32_t> ids = enc.encode(text);
    EXPECT_EQ(from_text.windows, heldout_windows(std::span<const int32_t>(ids), 64, 1000));
    EXPECT_EQ(from_text.source, src.string());
    int64_t covered = 0;
    for (const auto& w : from_text.windows) covered += int64_t(w.size()) - 1;
    EXPECT_EQ(covered, 1000);

    build_token_shards({src.string()}, enc, (dir.path / "shards").string(), 1 << 20, 0.3, 11, 256);
    const TokenShards sh = open_token_shards((dir.path / "shards").string(), &enc);
    const HeldoutInput from_shards = heldout_input_windows("", (dir.path / "shards").string(), enc, 64, 200);
    EXPECT_EQ(from_shards.windows, heldout_windows(sh.heldout, 64, 200));
    EXPECT_NE(from_shards.source.find("held-out split"), std::string::npos);

    auto message = [&](const std::string& file, const std::string& shards, const TextEncoder& e) {
        try {
            heldout_input_windows(file, shards, e, 64, 200);
        } catch (const Error& err) {
            return std::string(err.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(message("", "", enc).find("neither"), std::string::npos);
    EXPECT_NE(message(src.string(), (dir.path / "shards").string(), enc).find("both"), std::string::npos);
    EXPECT_NE(message((dir.path / "missing.txt").string(), "", enc).find("missing.txt"), std::string::npos);
    write_text_file(dir.path / "empty.txt", "");
    EXPECT_NE(message((dir.path / "empty.txt").string(), "", enc).find("empty"), std::string::npos);
    write_text_file(dir.path / "one.txt", "x");
    EXPECT_NE(message((dir.path / "one.txt").string(), "", enc).find("at least 2"), std::string::npos);
    // shards written by another tokenizer are refused (their ids mean other text)
    struct OtherEncoder final : TextEncoder {
        ByteEncoder inner;
        std::vector<int32_t> encode(std::string_view t) const override { return inner.encode(t); }
        std::string decode(std::span<const int32_t> i) const override { return inner.decode(i); }
        int32_t vocab_size() const override { return inner.vocab_size(); }
        int32_t eos_id() const override { return inner.eos_id(); }
        std::string name() const override { return "another-tokenizer"; }
    } other;
    EXPECT_NE(message("", (dir.path / "shards").string(), other).find("another-tokenizer"),
              std::string::npos);
    // a split without held-out tokens
    build_token_shards({src.string()}, enc, (dir.path / "no_heldout").string(), 1 << 20, 0.0, 11, 256);
    EXPECT_NE(message("", (dir.path / "no_heldout").string(), enc).find("held-out split holds 0"),
              std::string::npos);
}

// Windows are attributed to the source holding their first token; per-source metrics are those of the
// source's windows alone, and the mix weights them by the training weights of the sources reached.
TEST(HeldoutMetrics, BySourceMixesByTrainingWeight) {
    const std::vector<HeldoutSource> src = {
        {"dict", 1.0, 0, 250}, {"code", 3.0, 250, 400}, {"kernel", 4.0, 400, 900}};
    const std::vector<int> at = window_sources(src, 100, 6);  // windows start at 0, 100, ..., 500
    EXPECT_EQ(at, (std::vector<int>{0, 0, 0, 1, 2, 2}));
    EXPECT_EQ(window_sources(src, 100, 10)[9], -1);  // token 900 is past every span
    // KL sums per window (100 tokens each): dict 0.5 per token, code 0.1, kernel 0.2 and 0.4.
    std::vector<WindowStats> ws(5);
    const double kl[5] = {50, 50, 10, 20, 40}, agree[5] = {60, 60, 90, 80, 70};
    for (int i = 0; i < 5; ++i) {
        ws[size_t(i)].tokens = 100;
        ws[size_t(i)].kl = kl[i];
        ws[size_t(i)].agree = agree[i];
        ws[size_t(i)].nll_student = ws[size_t(i)].nll_teacher = 200;
    }
    const std::vector<int> labels = {0, 0, 1, 2, 2};
    const HeldoutBySource h = summarize_by_source(ws, labels, src);
    ASSERT_EQ(h.sources.size(), 3u);
    EXPECT_NEAR(h.sources[0].metrics.kl, 0.5, 1e-12);
    EXPECT_NEAR(h.sources[1].metrics.kl, 0.1, 1e-12);
    EXPECT_NEAR(h.sources[2].metrics.kl, 0.3, 1e-12);
    EXPECT_NEAR(h.sources[2].metrics.top1, 0.75, 1e-12);
    EXPECT_NEAR(h.sources[1].weight, 3.0 / 8.0, 1e-12);
    EXPECT_NEAR(h.kl, (1.0 * 0.5 + 3.0 * 0.1 + 4.0 * 0.3) / 8.0, 1e-12);
    EXPECT_NEAR(h.top1, (1.0 * 0.6 + 3.0 * 0.9 + 4.0 * 0.75) / 8.0, 1e-12);
    EXPECT_NEAR(h.weight_covered, 1.0, 1e-12);
    EXPECT_LE(h.kl_ci.lo, h.kl);
    EXPECT_GE(h.kl_ci.hi, h.kl);
    // A source without windows drops out of the mix, and the covered share says so.
    const std::vector<int> no_code = {0, 0, -1, 2, 2};
    const HeldoutBySource d = summarize_by_source(ws, no_code, src);
    ASSERT_EQ(d.sources.size(), 2u);
    EXPECT_NEAR(d.kl, (1.0 * 0.5 + 4.0 * 0.3) / 5.0, 1e-12);
    EXPECT_NEAR(d.weight_covered, 5.0 / 8.0, 1e-12);
    const json j = heldout_by_source_json(d);
    EXPECT_EQ(j["sources"][1]["name"], "kernel");
    EXPECT_NEAR(j["kl"].get<double>(), 0.34, 1e-9);
    EXPECT_THROW(summarize_by_source(ws, {0, 0}, src), Error);
    EXPECT_THROW(summarize_by_source(ws, {-1, -1, -1, -1, -1}, src), Error);
    EXPECT_THROW(summarize_by_source(ws, {0, 0, 7, 2, 2}, src), Error);
}

TEST(ResultsMerge, RecordsFromTwoRunsMergeIntoOneReport) {
    test::TempDir dir("merge");
    PipelineConfig cfg = PipelineConfig::preset("tiny-cpu");
    EvalRunInfo info;
    info.settings.tasks = {"a", "b"};
    info.settings.lengths = {1024, 2048};
    info.settings.samples = 50;
    info.groups = {{kHeldoutTaskGroup, {"b"}}};
    const ModelEvalResult ra = synthetic_result("v1", 0.8, 0.3), rb = synthetic_result("v2", 0.6, 0.5);
    std::map<std::string, TrainConfig> stages = {
        {"align", cfg.align}, {"distill", cfg.distill}, {"longctx", cfg.longctx}};
    for (const auto& [run, res] :
         {std::pair<std::string, const ModelEvalResult*>{"run1", &ra}, {"run2", &rb}}) {
        VariantRecordInputs vi;
        vi.config = &cfg;
        vi.out_dir = (dir.path / run).string();
        vi.name = res->model;
        vi.path = vi.out_dir + "/" + res->model + "/longctx";
        vi.variant = &cfg.variants[0];
        vi.stages = stages;
        vi.result = res;
        vi.info = &info;
        vi.heldout = {{"tokens", 8192}, {"kl", 0.2}, {"kl_ci", {{"lo", 0.18}, {"hi", 0.22}}}, {"ppl", 9.5}};
        if (run == "run2") {  // a newer record: the held-out detail by stage and by source
            vi.heldout["after_stage"] = {{"distill", {{"kl", 0.15}, {"mix_kl", 0.125}}}};
            vi.heldout["by_source"] = {{"kl", 0.175},
                                       {"weight_covered", 0.9},
                                       {"sources",
                                        {{{"name", "gcide"}, {"weight", 0.25}, {"tokens", 4096}, {"kl", 0.4}},
                                         {{"name", "go"}, {"weight", 0.75}, {"tokens", 4096}, {"kl", 0.1}}}}};
        }
        vi.timings = {{res->model + "/distill", {{"seconds", 100.0}}},
                      {"eval/" + res->model, {{"seconds", 20.0}}},
                      {"other/distill", {{"seconds", 999.0}}}};
        vi.plan_summary = "7:1";
        const json rec = variant_record(vi);
        EXPECT_DOUBLE_EQ(rec["wall_seconds"]["total"].get<double>(), 120.0);
        EXPECT_EQ(rec["budget"]["total_tokens"].get<int64_t>(),
                  cfg.align.steps * cfg.align.batch_size * cfg.align.seq_len +
                      cfg.distill.steps * cfg.distill.batch_size * cfg.distill.seq_len +
                      cfg.longctx.steps * cfg.longctx.batch_size * cfg.longctx.seq_len);
        fs::create_directories(dir.path / run / "results");
        write_text_file(dir.path / run / "results" / (res->model + ".json"), rec.dump());
    }
    const auto records =
        collect_variant_records({(dir.path / "run1").string(), (dir.path / "run2" / "results").string()});
    ASSERT_EQ(records.size(), 2u);
    const MergeResult mr = write_merged_report(records, (dir.path / "merged").string());
    const std::string md = read_text_file(mr.report_path);
    EXPECT_NE(md.find("| v1 |"), std::string::npos);
    EXPECT_NE(md.find("| v2 |"), std::string::npos);
    EXPECT_NE(md.find("0.200 [0.180, 0.220]"), std::string::npos) << md;
    EXPECT_NE(md.find("55.0 ["), std::string::npos);
    EXPECT_NE(md.find("held-out tasks mean"), std::string::npos);
    EXPECT_NE(md.find("2.0 min"), std::string::npos);  // wall time of each
    EXPECT_TRUE(fs::exists(dir.path / "merged" / "merged.json"));
    EXPECT_NE(md.find("## Score against cache"), std::string::npos);  // eval/pareto.h's section
    EXPECT_NE(md.find("| v2 | distill | 0.150 | n/a | n/a | 0.125 |"), std::string::npos) << md;
    EXPECT_NE(md.find("| v2 | final | 0.200 [0.180, 0.220] |"), std::string::npos) << md;
    EXPECT_EQ(md.find("| v1 | final |"), std::string::npos) << md;  // an older record: no detail
    EXPECT_NE(md.find("| gcide | 0.250 | 4096 | 0.400 |"), std::string::npos) << md;
    EXPECT_NE(md.find("| **mix-weighted** | | | 0.175 |"), std::string::npos) << md;
    // The figures it links are there.
    EXPECT_NE(md.find("](score_vs_length.png)"), std::string::npos);
    EXPECT_NE(md.find("](pareto.png)"), std::string::npos);
    EXPECT_TRUE(fs::exists(dir.path / "merged" / "score_vs_length.png"));
    EXPECT_TRUE(fs::exists(dir.path / "merged" / "pareto.png"));
    {
        // Without PLplot's PNG driver (as on the GPU machine) the report keeps its tables, links no
        // figure, and says why each is missing.
        fs::create_directories(dir.path / "no_drivers");
        const ScopedEnv env("PLPLOT_DRV_DIR", (dir.path / "no_drivers").string());
        const std::string bare =
            read_text_file(write_merged_report(records, (dir.path / "bare").string()).report_path);
        EXPECT_EQ(bare.find(".png)"), std::string::npos) << bare;
        EXPECT_NE(bare.find("(score plot not drawn here: "), std::string::npos) << bare;
        EXPECT_NE(bare.find("(plot not drawn: "), std::string::npos) << bare;
        EXPECT_NE(bare.find("| v2 | final | 0.200 [0.180, 0.220] |"), std::string::npos);
        EXPECT_FALSE(fs::exists(dir.path / "bare" / "score_vs_length.png"));
    }

    // Bad inputs: no records, a malformed one.
    fs::create_directories(dir.path / "empty");
    EXPECT_NE(
        error_of([&] { collect_variant_records({(dir.path / "empty").string()}); }).find("holds no records"),
        std::string::npos);
    write_text_file(dir.path / "empty" / "x.json", "{\"format\": \"other\"}");
    EXPECT_NE(error_of([&] {
                  collect_variant_records({(dir.path / "empty").string()});
              }).find("not a hydra variant"),
              std::string::npos);
}

}  // namespace
}  // namespace hydra
