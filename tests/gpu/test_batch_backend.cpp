// The GPU serving backend (gpu/gpu_batch_backend.h) against the one-sequence GPU forward (gpu/gpu_forward.h),
// which tests/gpu/test_forward.cpp checks against the CPU reference:
//   - B = 5 sequences of different lengths (1, 17, 40, 64, 100: a decode row at position 0, prompts through
//     the prefill path, lengths on and off block boundaries) prefilled in ONE step, then 32 batched decode
//     steps fed the reference's greedy tokens: every row's logits within max(2e-2, 2 x the CPU's bf16
//     floor) relative RMS (cpu_logits_floor.h) of GpuForward's for the same sequence alone, and the same
//     top-1 token wherever the
//     reference's top-1 leads its runner-up by more than 1% of the largest |logit| (random weights have
//     near ties; the real teacher must agree at every step, i.e. identical greedy streams);
//   - CUDA graphs against eager: the same scenario (rows joining mid-way, so the batch bucket changes) with
//     graphs on and off gives the same logits (1e-5 of the largest |logit|) and identical greedy streams; the
//     graphs ran;
//   - snapshot + restore: a prefix snapshot at a block boundary, its slot released, restored into a fresh
//     slot: the continuation is identical (1e-6) to the original's; two slots restored from it and run on
//     different tokens do not disturb each other or the snapshot; every block is back after all is dropped;
//   - blocks: release / acquire reuses them; reserve is all-or-nothing and fails cleanly on a full pool;
//     positions past the context and unreserved steps are errors;
//   - chunked prefill (a prompt in two chunks, the second at pos0 > 0) against one prefill.
// Models: random weights at SmolLM2's head shape (Dh 64, 9 q / 3 KV heads, 4 layers): teacher, kv-granular
// 1:1 hybrid, head-granular 7:1 hybrid (uneven KV groups), a Qwen-style teacher (q/k bias and norm); the
// graph check also at SmolLM2-135M's full shape (teacher and 7:1 hybrid); the real model at $HYDRA_MODEL
// (teacher and its 7:1 conversion) when present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "cpu_logits_floor.h"
#include "eval/model_text_encoder.h"
#include "eval/text_sources.h"
#include "gpu/gdn_state_slots.h"
#include "gpu/gpu_batch_backend.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu/paged_kv_pool.h"
#include "gpu_train_common.h"
#include "parity.h"
#include "model/hybrid_conversion.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "model_paths.h"
#include "serve/batch_backend.h"

namespace hydra::gputest {

namespace {

constexpr double kTol = 2e-2;       // bf16 operands: the suite's model-level tolerance
constexpr double kExact = 1e-6;     // the same kernels on the same inputs
constexpr double kGraphTol = 1e-5;  // graphs against eager: test_forward.cpp's bound (of the largest |logit|)
constexpr int64_t kGen = 32;

using serve::StepRow;

// ||a - ref|| / ||ref|| over n logits (parity.h; infinite where an element is not finite)
double rel(const float* a, const float* ref, int64_t n) {
    return rel_rms(a, ref, size_t(n)).value;
}

int32_t argmax_of(const float* x, int64_t n) {
    return int32_t(std::max_element(x, x + n) - x);
}

// Top-1 lead over the runner-up, relative to the largest |logit|.
double margin_of(const float* x, int64_t n) {
    float a = -INFINITY, b = -INFINITY, m = 0;
    for (int64_t i = 0; i < n; ++i) {
        m = std::max(m, std::fabs(x[i]));
        if (x[i] > a)
            b = a, a = x[i];
        else if (x[i] > b)
            b = x[i];
    }
    return double(a - b) / std::max(double(m), 1e-30);
}

std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = int32_t(rng.uniform() * double(V - 1));
    return t;
}

std::unique_ptr<LlamaModel> synthetic(const std::string& kind, uint64_t seed) {
    ModelConfig c = bench::smollm2_heads_synthetic_config();
    if (kind == "qwen") c.attention_bias = true, c.qk_norm = true;
    std::optional<HybridPlan> plan;
    if (kind == "kv_1to1")
        plan = build_plan(c, bench::plan_request(c, "1:1", "kv", FusionKind::ScaleNorm, 7));
    if (kind == "head_7to1")
        plan = build_plan(c, bench::plan_request(c, "7:1", "head", FusionKind::ScaleNorm, 7));
    auto m = std::make_unique<LlamaModel>(c, plan ? &*plan : nullptr);
    bench::randomise(*m, seed, /*unit_logits=*/false);
    return m;
}

gpu::GpuBatchOptions small_options(int64_t max_slots = 8, int64_t context = 256) {
    gpu::GpuBatchOptions o;
    o.max_slots = max_slots, o.context = context, o.block_size = 16;
    o.cache_bytes = size_t(256) << 20;
    return o;
}

// Each sequence alone through GpuForward: the prompt's last logits, then kGen greedy steps; the logits of
// every step (kGen + 1, V) and the greedy tokens (kGen).
struct Reference {
    std::vector<std::vector<float>> logits;
    std::vector<int32_t> tokens;
};
Reference reference(gpu::GpuForward& fwd, const std::vector<int32_t>& prompt, int64_t capacity) {
    gpu::GpuCache cache(fwd.model(), capacity);
    Reference r;
    r.logits.push_back(fwd.forward_last_logits(cache, prompt));
    const int64_t V = fwd.model().config().vocab_size;
    for (int64_t i = 0; i < kGen; ++i) {
        const int32_t tok = argmax_of(r.logits.back().data(), V);
        r.tokens.push_back(tok);
        r.logits.push_back(fwd.forward_last_logits(cache, std::span<const int32_t>(&tok, 1)));
    }
    return r;
}

// B sequences prefilled in one step, then kGen batched decode steps fed the reference's tokens; every row
// against its reference. strict: top-1 equal at every step (identical greedy streams).
void expect_batched_matches_forward(const LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                    bool strict, int64_t context = 256) {
    const int64_t V = model.config().vocab_size, B = int64_t(prompts.size());
    gpu::GpuTrainModel gm(model, false);
    gpu::GpuForward fwd(gm);
    std::vector<Reference> refs;
    for (const auto& p : prompts) refs.push_back(reference(fwd, p, int64_t(p.size()) + kGen + 1));

    gpu::GpuBatchBackend be(gm, small_options(8, context));
    std::vector<int32_t> slots;
    for (int64_t b = 0; b < B; ++b) {
        slots.push_back(be.acquire());
        ASSERT_GE(slots.back(), 0);
        ASSERT_TRUE(be.reserve(slots.back(), int64_t(prompts[size_t(b)].size()) + kGen));
    }
    std::vector<StepRow> rows(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) rows[size_t(b)] = {slots[size_t(b)], prompts[size_t(b)], 1};
    std::vector<float> lg;
    be.step(rows, lg);
    ASSERT_EQ(int64_t(lg.size()), B * V);
    double worst = 0;
    int64_t decisive = 0, agree = 0, all_agree = 0, steps = 0;
    auto compare = [&](int64_t b, const float* got, const std::vector<float>& ref) {
        const double r = rel(got, ref.data(), V);
        worst = std::max(worst, r);
        const bool same = argmax_of(got, V) == argmax_of(ref.data(), V);
        all_agree += same, ++steps;
        // A lead is clear when it exceeds 4 x this step's difference (relative RMS x the logits' RMS), the
        // tie band of the forward tests: an unrecovered hybrid's bf16 rounding moves its flat logits by more
        // than a fixed 0.01.
        double ms = 0;
        for (int64_t i = 0; i < V; ++i) ms += double(ref[size_t(i)]) * double(ref[size_t(i)]);
        const double band = std::max(1e-2, 4 * r * std::sqrt(ms / double(V)));
        if (margin_of(ref.data(), V) > band) decisive += 1, agree += same;
        (void)b;
    };
    for (int64_t b = 0; b < B; ++b) compare(b, lg.data() + b * V, refs[size_t(b)].logits[0]);
    for (int64_t i = 0; i < kGen; ++i) {
        std::vector<int32_t> toks(static_cast<size_t>(B));
        for (int64_t b = 0; b < B; ++b) {
            toks[size_t(b)] = refs[size_t(b)].tokens[size_t(i)];
            rows[size_t(b)] = {slots[size_t(b)], std::span<const int32_t>(&toks[size_t(b)], 1), 1};
        }
        be.step(rows, lg);
        for (int64_t b = 0; b < B; ++b) compare(b, lg.data() + b * V, refs[size_t(b)].logits[size_t(i + 1)]);
    }
    for (int64_t b = 0; b < B; ++b)
        EXPECT_EQ(be.pos(slots[size_t(b)]), int64_t(prompts[size_t(b)].size()) + kGen);
    std::printf(
        "batched (B=%lld) vs one-sequence GPU forward, prefill + %lld steps: worst rel RMS %.3e; top-1 "
        "equal %lld/%lld (decisive %lld/%lld)\n",
        (long long)B, (long long)kGen, worst, (long long)all_agree, (long long)steps, (long long)agree,
        (long long)decisive);
    // two orders of bf16 rounding: the tolerance scales with how far bf16 weights move the CPU's own logits
    // on the longest prompt and its continuation (cpu_logits_floor.h)
    size_t longest = 0;
    for (size_t b = 0; b < prompts.size(); ++b)
        if (prompts[b].size() > prompts[longest].size()) longest = b;
    std::vector<int32_t> seq = prompts[longest];
    seq.insert(seq.end(), refs[longest].tokens.begin(), refs[longest].tokens.end());
    const double floor = cpu_logits_floor(model, seq).worst, tol = std::max(kTol, 2 * floor);
    std::printf("bf16 floor of the CPU logits %.3e: tolerance %.3e\n", floor, tol);
    EXPECT_LT(worst, tol) << "batched logits against the one-sequence forward";
    EXPECT_EQ(agree, decisive) << "top-1 differs where the reference's lead is clear";
    if (strict) {
        EXPECT_EQ(all_agree, steps) << "greedy streams differ";
    }
}

// One scenario for graphs against eager: 3 sequences prefilled, 2 more join after 10 steps (buckets 4 -> 8),
// all decode greedily from their own logits. Every step's logits, and the streams.
struct Run {
    std::vector<float> logits;
    std::vector<int32_t> tokens;
};
Run run_scenario(gpu::GpuBatchBackend& be, int64_t V) {
    const std::vector<int64_t> lens = {23, 48, 1, 70, 33};
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < lens.size(); ++i) prompts.push_back(random_tokens(lens[i], V, 500 + i));
    Run run;
    std::vector<int32_t> slots, next;
    auto join = [&](size_t i) {
        const int32_t s = be.acquire();
        HYDRA_CHECK(s >= 0 && be.reserve(s, lens[i] + 2 * kGen), "scenario: no room");
        std::vector<float> lg;
        const StepRow row{s, prompts[i], 1};
        be.step(std::span<const StepRow>(&row, 1), lg);
        run.logits.insert(run.logits.end(), lg.begin(), lg.end());
        slots.push_back(s);
        next.push_back(argmax_of(lg.data(), V));
    };
    for (size_t i = 0; i < 3; ++i) join(i);
    for (int64_t step = 0; step < kGen; ++step) {
        if (step == 10)
            for (size_t i = 3; i < lens.size(); ++i) join(i);
        std::vector<StepRow> rows;
        for (size_t b = 0; b < slots.size(); ++b)
            rows.push_back({slots[b], std::span<const int32_t>(&next[b], 1), 1});
        std::vector<float> lg;
        be.step(rows, lg);
        run.logits.insert(run.logits.end(), lg.begin(), lg.end());
        for (size_t b = 0; b < slots.size(); ++b) {
            run.tokens.push_back(next[b]);
            next[b] = argmax_of(lg.data() + b * size_t(V), V);
        }
    }
    for (int32_t s : slots) be.release(s);
    return run;
}

void expect_graphs_match_eager(const LlamaModel& model) {
    const int64_t V = model.config().vocab_size;
    gpu::GpuTrainModel gm(model, false);
    gpu::GpuBatchBackend be(gm, small_options(8, 256));
    be.set_cuda_graphs(false);
    const Run eager = run_scenario(be, V);
    be.set_cuda_graphs(true);
    const auto before = be.graph_stats();
    const Run graphs = run_scenario(be, V);
    const auto after = be.graph_stats();
    ASSERT_EQ(eager.logits.size(), graphs.logits.size());
    double max_abs = 0, max_ref = 0;
    for (size_t i = 0; i < eager.logits.size(); ++i) {
        max_abs = std::max(max_abs, std::fabs(double(graphs.logits[i]) - double(eager.logits[i])));
        max_ref = std::max(max_ref, std::fabs(double(eager.logits[i])));
    }
    std::printf("batched graphs vs eager: max |diff| %.3e of max |logit| %.3g; %lld captures, %lld replays\n",
                max_abs, max_ref, (long long)(after.captures - before.captures),
                (long long)(after.replays - before.replays));
    EXPECT_LE(max_abs, kGraphTol * max_ref) << "graph logits differ from eager";
    EXPECT_EQ(eager.tokens, graphs.tokens) << "greedy streams differ";
    EXPECT_GE(after.replays - before.replays, kGen) << "the graphs did not run every decode step";
    EXPECT_EQ(after.fallbacks, 0) << "graph capture failed (eager fallback)";
}

// Steps `toks` one at a time on `slot`; the logits (n, V).
std::vector<float> continue_with(gpu::GpuBatchBackend& be, int32_t slot, const std::vector<int32_t>& toks) {
    std::vector<float> all, lg;
    for (const int32_t& t : toks) {
        const StepRow row{slot, std::span<const int32_t>(&t, 1), 1};
        be.step(std::span<const StepRow>(&row, 1), lg);
        all.insert(all.end(), lg.begin(), lg.end());
    }
    return all;
}

void expect_snapshot_restore(const LlamaModel& model) {
    const int64_t V = model.config().vocab_size;
    gpu::GpuTrainModel gm(model, false);
    gpu::GpuBatchBackend be(gm, small_options(8, 256));
    ASSERT_EQ(be.snapshot_granularity(), 16);
    const int64_t free0 = be.kv_pool().free_blocks();
    const std::vector<int32_t> prompt = random_tokens(48, V, 77), cont = random_tokens(8, V, 78),
                               other = random_tokens(8, V, 79);
    const int32_t a = be.acquire();
    ASSERT_TRUE(be.reserve(a, 64));
    std::vector<float> lg;
    const StepRow row{a, prompt, 1};
    be.step(std::span<const StepRow>(&row, 1), lg);
    std::shared_ptr<const serve::PrefixSnapshot> snap = be.snapshot(a);
    EXPECT_EQ(snap->pos, 48);
    EXPECT_GT(snap->bytes, size_t(0));
    const std::vector<float> want = continue_with(be, a, cont);
    be.release(a);  // the snapshot keeps its blocks alive

    const int32_t b = be.acquire();
    ASSERT_TRUE(be.reserve(b, 64));  // reserved before the restore: the restore keeps the reservation
    be.restore(b, *snap);
    EXPECT_EQ(be.pos(b), 48);
    const std::vector<float> got = continue_with(be, b, cont);
    const double r1 = rel(got.data(), want.data(), int64_t(want.size()));
    std::printf("snapshot + restore: continuation rel RMS %.3e\n", r1);
    EXPECT_LE(r1, kExact) << "a restored slot continues differently";

    // two restored slots on different tokens in the same steps, then a third alone: no interference
    const int32_t c = be.acquire(), d = be.acquire();
    be.restore(c, *snap);
    be.restore(d, *snap);
    ASSERT_TRUE(be.reserve(c, 64));
    ASSERT_TRUE(be.reserve(d, 64));
    std::vector<float> got_d;
    for (size_t i = 0; i < cont.size(); ++i) {
        const StepRow rows[2] = {{c, std::span<const int32_t>(&other[i], 1), 1},
                                 {d, std::span<const int32_t>(&cont[i], 1), 1}};
        be.step(rows, lg);
        got_d.insert(got_d.end(), lg.begin() + V, lg.end());
    }
    const double r2 = rel(got_d.data(), want.data(), int64_t(want.size()));
    be.release(b), be.release(c), be.release(d);
    const int32_t e = be.acquire();
    ASSERT_TRUE(be.reserve(e, 64));
    be.restore(e, *snap);
    const std::vector<float> got_e = continue_with(be, e, cont);
    const double r3 = rel(got_e.data(), want.data(), int64_t(want.size()));
    std::printf("two restored slots side by side: rel RMS %.3e (bf16 tolerance); restored again alone %.3e\n",
                r2, r3);
    EXPECT_LT(r2, kTol) << "restored slots interfere";
    EXPECT_LE(r3, kExact) << "running restored slots changed the snapshot";
    be.release(e);
    snap.reset();
    EXPECT_EQ(be.kv_pool().free_blocks(), free0) << "blocks leaked";
    EXPECT_EQ(be.usage().used_bytes, size_t(0));
}

}  // namespace

// ---- synthetic models ----

class GpuBatchBackendSynthetic : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuBatchBackendSynthetic, MatchesOneSequenceForward) {
    const auto model = synthetic(GetParam(), 1100);
    std::printf("plan %s\n", model->plan().ratio_summary().c_str());
    std::vector<std::vector<int32_t>> prompts;
    const std::vector<int64_t> lens = {1, 17, 40, 64, 100};
    for (size_t i = 0; i < lens.size(); ++i) prompts.push_back(random_tokens(lens[i], 260, 40 + i));
    expect_batched_matches_forward(*model, prompts, false);
}

TEST_P(GpuBatchBackendSynthetic, GraphsMatchEager) {
    expect_graphs_match_eager(*synthetic(GetParam(), 1200));
}

TEST_P(GpuBatchBackendSynthetic, SnapshotRestoreContinuesIdentically) {
    expect_snapshot_restore(*synthetic(GetParam(), 1300));
}

INSTANTIATE_TEST_SUITE_P(GpuBatchBackend, GpuBatchBackendSynthetic,
                         ::testing::Values("teacher", "kv_1to1", "head_7to1", "qwen"));

TEST(GpuBatchBackend, BlocksReuseAndFullPool) {
    const auto model = synthetic("kv_1to1", 1400);
    gpu::GpuTrainModel gm(*model, false);
    gpu::GpuBatchOptions o = small_options(4, 128);
    // 8 blocks per sequence of 128; the pool: the scratch block + 12
    o.cache_bytes = size_t(5) * size_t(gpu::GdnStateSlots::slot_floats_for(gm)) * sizeof(float) +
                    13 * gpu::PagedKvPool::block_bytes(gm, 16);
    gpu::GpuBatchBackend be(gm, o);
    ASSERT_EQ(be.kv_pool().free_blocks(), 12);
    const int32_t a = be.acquire(), b = be.acquire();
    ASSERT_TRUE(be.reserve(a, 128));
    EXPECT_EQ(be.kv_pool().free_blocks(), 4);
    const serve::CacheUsage u = be.usage();
    EXPECT_FALSE(be.reserve(b, 128)) << "a reservation larger than the free blocks";
    EXPECT_EQ(be.kv_pool().free_blocks(), 4) << "a failed reservation took blocks";
    EXPECT_EQ(be.usage().used_bytes, u.used_bytes);
    EXPECT_TRUE(be.reserve(b, 64));
    EXPECT_EQ(be.kv_pool().free_blocks(), 0);
    EXPECT_FALSE(be.reserve(b, 65));
    EXPECT_TRUE(be.reserve(b, 60)) << "a smaller reservation than held";
    EXPECT_THROW(be.reserve(a, 129), Error) << "past the context";
    // a step past the reservation is an error, and runs nothing
    const std::vector<int32_t> p65 = random_tokens(65, 260, 5);
    std::vector<float> lg;
    const StepRow bad{b, p65, 1};
    EXPECT_THROW(be.step(std::span<const StepRow>(&bad, 1), lg), Error);
    EXPECT_EQ(be.pos(b), 0);
    be.release(a);
    EXPECT_EQ(be.kv_pool().free_blocks(), 8);
    ASSERT_TRUE(be.reserve(b, 128)) << "released blocks are reused";
    EXPECT_EQ(be.kv_pool().free_blocks(), 4);
    // the reused blocks hold a correct sequence
    const std::vector<int32_t> p = random_tokens(100, 260, 6);
    const StepRow row{b, p, 1};
    be.step(std::span<const StepRow>(&row, 1), lg);
    gpu::GpuForward fwd(gm);
    gpu::GpuCache cache(gm, 128);
    const std::vector<float> ref = fwd.forward_last_logits(cache, p);
    EXPECT_LT(rel(lg.data(), ref.data(), 260), kTol);
    // slots run out cleanly
    EXPECT_GE(be.acquire(), 0);
    EXPECT_GE(be.acquire(), 0);
    EXPECT_GE(be.acquire(), 0);
    EXPECT_EQ(be.acquire(), -1);
}

TEST(GpuBatchBackend, ChunkedPrefillMatchesOnePrefill) {
    for (const char* kind : {"teacher", "kv_1to1"}) {
        const auto model = synthetic(kind, 1500);
        gpu::GpuTrainModel gm(*model, false);
        gpu::GpuForward fwd(gm);
        const std::vector<int32_t> p = random_tokens(80, 260, 9), q = random_tokens(30, 260, 10);
        gpu::GpuCache cache(gm, 128);
        const std::vector<float> ref = fwd.forward_all_logits(cache, p);
        gpu::GpuCache cache_q(gm, 128);
        const std::vector<float> ref_q = fwd.forward_last_logits(cache_q, q);
        gpu::GpuBatchBackend be(gm, small_options(4, 128));
        const int32_t s = be.acquire(), t = be.acquire();
        ASSERT_TRUE(be.reserve(s, 80));
        ASSERT_TRUE(be.reserve(t, 30));
        std::vector<float> lg;
        const std::span<const int32_t> ps(p);
        const StepRow first{s, ps.first(32), 0};
        be.step(std::span<const StepRow>(&first, 1), lg);
        EXPECT_TRUE(lg.empty());
        // the second chunk (pos0 = 32) beside another sequence's whole prompt
        const StepRow rows[2] = {{s, ps.subspan(32), 48}, {t, q, 1}};
        be.step(rows, lg);
        ASSERT_EQ(lg.size(), size_t(49 * 260));
        const double r = rel(lg.data(), ref.data() + 32 * 260, 48 * 260);
        const double rq = rel(lg.data() + 48 * 260, ref_q.data(), 260);
        std::printf("%s: chunked prefill vs one prefill: rel RMS %.3e; the other row %.3e\n", kind, r, rq);
        EXPECT_LT(r, kTol);
        EXPECT_LT(rq, kTol);
        EXPECT_EQ(be.pos(s), 80);
    }
}

// ---- SmolLM2-135M's full shape ----

TEST(GpuBatchBackendGraphs, Smollm2ShapeTeacherAndHybrid7to1) {
    const ModelConfig c = bench::smollm2_135m_config();
    LlamaModel t(c);
    bench::randomise(t, 21);
    expect_graphs_match_eager(t);
    const HybridPlan plan = build_plan(c, bench::plan_request(c, "7:1", "kv", FusionKind::ScaleNorm, 1));
    LlamaModel h(c, &plan);
    bench::randomise(h, 22);
    expect_graphs_match_eager(h);
}

// ---- the real model ----

TEST(GpuBatchBackend, RealModelTeacherAndHybrid7to1) {
    if (!test::default_model_present())
        GTEST_SKIP() << "the model is not at " << test::default_model_path() << " (set HYDRA_MODEL)";
    const std::string path = test::default_model_path();
    const std::string text_file = default_prose_dir() + "/austen_emma.txt";
    if (!std::filesystem::exists(text_file)) GTEST_SKIP() << "the prose cache is not at " << text_file;
    LoadedModel m = load_model(path);
    const ModelText text = model_text_for(path, m.vocab, m.model->config().eos_token_ids);
    std::ifstream f(text_file, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string prose = ss.str();
    // prompts: BOS + prose from four places in the book (past the front matter), 37..150 tokens
    std::vector<std::vector<int32_t>> prompts;
    const std::vector<int64_t> lens = {37, 64, 100, 150};
    for (size_t i = 0; i < lens.size(); ++i) {
        std::vector<int32_t> p;
        if (text.bos_id >= 0) p.push_back(text.bos_id);
        const size_t at = std::min<size_t>(20000 + 7000 * i, prose.size() / 2);
        for (int32_t id : text.encoder->encode(prose.substr(at, size_t(lens[i]) * 16))) {
            if (int64_t(p.size()) >= lens[i]) break;
            p.push_back(id);
        }
        ASSERT_EQ(int64_t(p.size()), lens[i]) << text_file << ": too few prompt tokens";
        prompts.push_back(std::move(p));
    }
    expect_batched_matches_forward(*m.model, prompts, true, 512);
    if (m.model->plan().is_all_fa()) {
        const ModelConfig& c = m.model->config();
        const auto h = convert_to_hybrid(
            *m.model, build_plan(c, bench::plan_request(c, "7:1", "kv", FusionKind::ScaleNorm, 1)),
            ConversionOptions{});
        // an unrecovered conversion has flatter logits: its decisive steps only
        expect_batched_matches_forward(*h, prompts, false, 512);
        expect_snapshot_restore(*h);
    }
}

}  // namespace hydra::gputest
