// Held-out KL / top-1 agreement / perplexity (eval/heldout_metrics.h) through the GPU forward
// (gpu/gpu_logits.h) against the CPU forward, on the real default model and its 7:1 conversion (skipped
// when the model or the prose cache is absent): 4 windows of 512 tokens of prose. The statistics are
// computed on the host by the same code for both, so the paths differ by the forward's rounding only
// (bf16 GEMM operands against fp32): perplexities within 2%, KL within 0.02 nats + 10%, top-1 agreement
// within 0.03, and the intervals overlap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "eval/heldout_metrics.h"
#include "eval/model_text_encoder.h"
#include "eval/text_sources.h"
#include "gpu/gpu_logits.h"
#include "model/hybrid_conversion.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "model_paths.h"

namespace hydra::gputest {
namespace {

TEST(GpuHeldoutMetrics, MatchCpuOnRealModelAndHybrid) {
    if (!test::default_model_present())
        GTEST_SKIP() << "the model is not at " << test::default_model_path() << " (set HYDRA_MODEL)";
    const std::string text_file = default_prose_dir() + "/austen_persuasion.txt";
    if (!std::filesystem::exists(text_file)) GTEST_SKIP() << "the prose cache is not at " << text_file;
    LoadedModel m = load_model(test::default_model_path());
    if (!m.model->plan().is_all_fa()) GTEST_SKIP() << "the model is already a hybrid";
    const LlamaModel& teacher = *m.model;
    const ModelConfig& c = teacher.config();
    PlanRequest req;
    req.select = "random";
    req.ratio = parse_ratio("7:1", "ratio");
    req.granularity = "kv";
    req.seed = 1;
    const auto student = convert_to_hybrid(teacher, build_plan(c, req), ConversionOptions{});

    const ModelText text = model_text_for(test::default_model_path(), m.vocab, c.eos_token_ids);
    std::ifstream f(text_file);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::vector<int32_t> ids = text.encoder->encode(ss.str().substr(40000, 40000));
    constexpr int64_t kWindow = 512, kWindows = 4;
    ASSERT_GE(int64_t(ids.size()), kWindow * kWindows + 1);
    std::vector<std::vector<int32_t>> windows;
    for (int64_t w = 0; w < kWindows; ++w)
        windows.emplace_back(ids.begin() + w * kWindow, ids.begin() + (w + 1) * kWindow + 1);

    const LogitsFn cpu_t = cpu_logits_fn(teacher), cpu_s = cpu_logits_fn(*student);
    const LogitsFn gpu_t = gpu::make_gpu_logits_fn(teacher, kWindow),
                   gpu_s = gpu::make_gpu_logits_fn(*student, kWindow);
    const HeldoutMetrics a = heldout_metrics(cpu_t, cpu_s, windows, c.vocab_size);
    const HeldoutMetrics b = heldout_metrics(gpu_t, gpu_s, windows, c.vocab_size);
    std::printf(
        "cpu: ppl %.3f teacher %.3f kl %.4f top1 %.4f\ngpu: ppl %.3f teacher %.3f kl %.4f top1 %.4f\n", a.ppl,
        a.teacher_ppl, a.kl, a.top1, b.ppl, b.teacher_ppl, b.kl, b.top1);
    EXPECT_EQ(a.tokens, kWindow * kWindows);
    EXPECT_EQ(b.tokens, a.tokens);
    EXPECT_NEAR(b.teacher_ppl, a.teacher_ppl, 0.02 * a.teacher_ppl);
    EXPECT_NEAR(b.ppl, a.ppl, 0.02 * a.ppl);
    EXPECT_NEAR(b.kl, a.kl, 0.02 + 0.1 * a.kl);
    EXPECT_NEAR(b.top1, a.top1, 0.03);
    EXPECT_LT(b.kl_ci.lo, a.kl_ci.hi);  // the intervals overlap
    EXPECT_LT(a.kl_ci.lo, b.kl_ci.hi);
    // The teacher against itself on the GPU: KL 0, agreement 1.
    const HeldoutMetrics self = heldout_metrics(gpu_t, gpu_t, windows, c.vocab_size);
    EXPECT_NEAR(self.kl, 0.0, 1e-9);
    EXPECT_DOUBLE_EQ(self.top1, 1.0);
}

}  // namespace
}  // namespace hydra::gputest
