// Tests for the synthetic eval tasks (src/eval/): RULER scoring, exact prompt lengths for every task
// with the byte tokenizer and the default model's BPE, determinism, answers present in the prompt,
// clean/corrupted pairs, suites and argument errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "eval/eval_runner.h"
#include "eval/model_text_encoder.h"
#include "eval/task_registry.h"
#include "model/model_loader.h"
#include "model_paths.h"

namespace hydra {
namespace {

std::shared_ptr<const TaskContext> byte_ctx(PromptStyle style = PromptStyle::kRuler) {
    auto c = std::make_shared<TaskContext>();
    c->text = byte_model_text();
    c->options.style = style;
    c->options.number_digits = 4;
    return c;
}

std::shared_ptr<const TaskContext> bpe_ctx() {
    static std::shared_ptr<const TaskContext> ctx = [] {
        auto c = std::make_shared<TaskContext>();
        c->text = model_text_for(test::default_model_path());
        return std::shared_ptr<const TaskContext>(c);
    }();
    return ctx;
}

TEST(EvalTasks, ScoringMatchesRuler) {
    EXPECT_DOUBLE_EQ(score_answers({"1234", "ABC"}, "all", "  the abc is 1234\n"), 1.0);
    EXPECT_DOUBLE_EQ(score_answers({"1234", "5678"}, "all", "1234"), 0.5);
    EXPECT_DOUBLE_EQ(score_answers({"1234", "5678"}, "part", "x 5678"), 1.0);
    EXPECT_DOUBLE_EQ(score_answers({"1234"}, "part", "123"), 0.0);
    EXPECT_DOUBLE_EQ(score_answers({"a b"}, "all",
                                   "a\x01"
                                   "b"),
                     0.0);  // control char becomes '\n'
    EXPECT_THROW(score_answers({"x"}, "exact", "x"), Error);
}

void check_task(const std::shared_ptr<const TaskContext>& ctx, const std::string& task, int64_t length) {
    SCOPED_TRACE(task + " @ " + std::to_string(length) + " " + ctx->text.name());
    auto gen = make_task(task, ctx);
    const TaskSample s = gen->sample(length, 7, 0);
    ASSERT_EQ(int64_t(s.prompt.size()), length);
    EXPECT_FALSE(s.answers.empty());
    const std::string text = ctx->text.encoder->decode(s.prompt);
    for (const std::string& a : s.answers) EXPECT_NE(text.find(a), std::string::npos) << a;
    EXPECT_GT(s.query_begin, 0);
    EXPECT_LT(s.query_begin, length);
    for (auto [b, e] : s.needle_spans) {
        EXPECT_LT(b, e);
        EXPECT_LE(e, s.query_begin);
    }
    // Deterministic, and another index differs.
    EXPECT_EQ(gen->sample(length, 7, 0).prompt, s.prompt);
    EXPECT_NE(gen->sample(length, 7, 1).prompt, s.prompt);
}

TEST(EvalTasks, ExactLengthsByteTokenizer) {
    for (const std::string& t : all_task_names())
        for (int64_t len : {int64_t(1024), int64_t(1500)}) check_task(byte_ctx(), t, len);
    // Tiny-teacher sizes: the one-needle tasks fit 256 bytes in the compact style; multi-needle ones 512.
    for (const std::string& t : all_task_names()) {
        const bool tiny = t == "niah_single_1" || t == "niah_single_2" || t == "niah_multikey_2" ||
                          t == "passkey" || t == "mqar" || t == "fwe";
        check_task(byte_ctx(PromptStyle::kCompact), t, tiny ? 256 : 512);
    }
}

TEST(EvalTasks, ExactLengthsModelBpe) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model absent";
    for (const std::string& t : all_task_names())
        for (int64_t len : {int64_t(512), int64_t(1024), int64_t(2047)}) check_task(bpe_ctx(), t, len);
}

TEST(EvalTasks, ModelBpeUsesChatTemplateAndNoExtraBos) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model absent";
    const auto ctx = bpe_ctx();
    EXPECT_TRUE(ctx->chat());
    const TaskSample s = make_task("niah_single_1", ctx)->sample(512, 1, 0);
    EXPECT_EQ(s.prompt[0], ctx->text.im_start);  // SmolLM2: add_bos is false, the template opens the prompt
    EXPECT_FALSE(ctx->text.stop_ids.empty());
}

TEST(EvalTasks, PairsAlignAndDiffer) {
    std::vector<std::shared_ptr<const TaskContext>> ctxs = {byte_ctx()};
    if (test::default_model_present()) ctxs.push_back(bpe_ctx());
    for (const auto& ctx : ctxs)
        for (const std::string& t : all_task_names()) {
            auto gen = make_task(t, ctx);
            if (!gen->has_pairs()) continue;
            for (const std::string& c : gen->corruptions()) {
                SCOPED_TRACE(t + " " + c + " " + ctx->text.name());
                const PatchingPair p = gen->pair(1024, 3, 0, c);
                ASSERT_EQ(p.clean.size(), 1024u);
                ASSERT_EQ(p.corrupted.size(), 1024u);
                EXPECT_NE(p.clean, p.corrupted);
                EXPECT_NE(p.answer_token, p.distractor_token);
                EXPECT_GE(p.answer_token, 0);
                EXPECT_GE(p.distractor_token, 0);
                // The answer token continues the clean answer.
                const std::string first = ctx->text.encoder->decode(std::vector<int32_t>{p.answer_token});
                EXPECT_NE(p.clean_answer.find(first.substr(first.find_first_not_of(' ') == std::string::npos
                                                               ? 0
                                                               : first.find_first_not_of(' '))),
                          std::string::npos);
                // Differences stay inside the needle span (value-swap, needle-removed) or after the query.
                size_t first_diff = 0;
                while (p.clean[first_diff] == p.corrupted[first_diff]) ++first_diff;
                if (c == "key-swap")
                    EXPECT_GE(int64_t(first_diff), p.query_begin);
                else {
                    bool inside = false;
                    for (auto [b, e] : p.needle_spans)
                        inside |= int64_t(first_diff) >= b && int64_t(first_diff) < e;
                    EXPECT_TRUE(inside);
                }
            }
        }
    EXPECT_FALSE(make_task("cwe", byte_ctx())->has_pairs());
    EXPECT_THROW(make_task("cwe", byte_ctx())->pair(1024, 1, 0, "value-swap"), Error);
}

TEST(EvalTasks, SuitesAndErrors) {
    EXPECT_EQ(suite_tasks("ruler").size(), 11u);
    EXPECT_EQ(suite_tasks("all").size(), 13u);
    EXPECT_THROW(suite_tasks("qa"), Error);
    EXPECT_THROW(parse_task_list("niah_single_1,bogus"), Error);
    EXPECT_EQ(parse_task_list("vt, cwe").size(), 2u);
    EXPECT_EQ(parse_length("1k"), 1024);
    EXPECT_EQ(parse_length("300"), 300);
    EXPECT_THROW(parse_length("1x"), Error);
    EXPECT_THROW(parse_length("0"), Error);
    EXPECT_THROW(make_task("niah_single_1", byte_ctx())->sample(64, 1, 0), Error);  // too short: clear error
}

}  // namespace
}  // namespace hydra
