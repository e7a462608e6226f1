// Held-out KL / top-1 agreement / perplexity (eval/heldout_metrics.h) on the GPU.
// 1. The device-side statistics (gpu/window_stats.h through make_gpu_window_stats_fn) against the host's
//    window_stats of the same GPU logits, on a small random teacher and its 3:1 hybrid (no files needed):
//    the same numbers up to summation order (1e-9 relative), and the teacher against itself KL 0, top-1 1.
// 2. The GPU forward (gpu/gpu_logits.h) against the CPU forward, on the real default model and its 7:1
// conversion (skipped when the model or the prose cache is absent): 4 windows of 512 tokens of prose. The
// statistics are computed on the host by the same code for both, so the paths differ by the forward's
// rounding only (bf16 GEMM operands against fp32): perplexities within 2%, KL within 0.02 nats + 10%, top-1
// agreement within 0.03, and the intervals overlap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/rng.h"
#include "eval/heldout_metrics.h"
#include "eval/model_text_encoder.h"
#include "eval/text_sources.h"
#include "gpu/gpu_logits.h"
#include "gpu_train_common.h"
#include "model/hybrid_conversion.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "model_paths.h"

namespace hydra::gputest {
namespace {

TEST(GpuHeldoutMetrics, DeviceStatisticsEqualHostStatisticsOfTheSameLogits) {
    ModelConfig c = bench::smollm2_135m_config();
    c.num_layers = 4;
    c.vocab_size = 4099;  // not a multiple of the block width: the strided tails are exercised
    LlamaModel teacher(c);
    bench::randomise(teacher, 7);
    PlanRequest req = bench::plan_request(c, "3:1", "kv", FusionKind::ScaleNorm, 3);
    auto student = convert_to_hybrid(teacher, build_plan(c, req), ConversionOptions{});
    bench::randomise(*student, 8);
    constexpr int64_t kWindow = 200, kWindows = 3;
    Rng rng(11);
    std::vector<std::vector<int32_t>> windows(kWindows);
    for (auto& w : windows)
        for (int64_t i = 0; i <= kWindow; ++i) w.push_back(int32_t(rng.next_u64() % uint64_t(c.vocab_size)));

    const LogitsFn gt = gpu::make_gpu_logits_fn(teacher, kWindow),
                   gs = gpu::make_gpu_logits_fn(*student, kWindow);
    const HeldoutMetrics host = heldout_metrics(gt, gs, windows, c.vocab_size);
    const HeldoutMetrics dev =
        heldout_metrics(gpu::make_gpu_window_stats_fn(teacher, student.get(), kWindow), windows);
    std::printf(
        "host: kl %.9f top1 %.6f ppl %.6f teacher %.6f\ndev:  kl %.9f top1 %.6f ppl %.6f teacher %.6f\n",
        host.kl, host.top1, host.ppl, host.teacher_ppl, dev.kl, dev.top1, dev.ppl, dev.teacher_ppl);
    EXPECT_EQ(dev.tokens, kWindow * kWindows);
    EXPECT_GT(host.kl, 1e-3);  // random models: the statistics are not trivially zero
    EXPECT_NEAR(dev.kl, host.kl, 1e-9 * host.kl + 1e-12);
    EXPECT_DOUBLE_EQ(dev.top1, host.top1);
    EXPECT_NEAR(dev.ppl, host.ppl, 1e-9 * host.ppl);
    EXPECT_NEAR(dev.teacher_ppl, host.teacher_ppl, 1e-9 * host.teacher_ppl);
    const HeldoutMetrics self =
        heldout_metrics(gpu::make_gpu_window_stats_fn(teacher, nullptr, kWindow), windows);
    EXPECT_NEAR(self.kl, 0.0, 1e-9);
    EXPECT_DOUBLE_EQ(self.top1, 1.0);
    EXPECT_NEAR(self.ppl, host.teacher_ppl, 1e-9 * host.teacher_ppl);
    // A token outside the vocabulary is refused before anything runs on the device.
    auto bad = windows;
    bad[0][5] = int32_t(c.vocab_size);
    EXPECT_THROW(heldout_metrics(gpu::make_gpu_window_stats_fn(teacher, nullptr, kWindow), bad), Error);
}

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
    // The unrecovered student's perplexity is ~1e6 (mean NLL ~14 nats): bf16 rounding moves its large
    // logits, and its NLL, in proportion, so compare the mean NLL (log ppl) relative to its size.
    EXPECT_NEAR(std::log(b.ppl), std::log(a.ppl), 0.02 + 0.01 * std::log(a.ppl));
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
