// `hydra demo`'s steps (pipeline/demo_runner.h) at a micro size on a tiny byte-level teacher trained
// here: every step runs through the same code as the real demo on SmolLM2, the report shows the six
// parts, the held-out KL falls over the recovery, the hybrid's long-context cache is an eighth of the
// teacher's, a second run resumes without redoing anything, and
// --from recomputes a step. Also: the latest GPU report is found by its date among result folders.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/atomic_dir.h"
#include "pipeline/demo_report.h"
#include "pipeline/demo_runner.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json read_json(const fs::path& p) {
    return json::parse(read_text_file(p));
}

class Demo : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        if (!fs::exists(std::string(HYDRA_SOURCE_DIR) + "/.cache/prose/austen_persuasion.txt")) return;
        root_ = fs::temp_directory_path() / ("hydra_demo_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        fs::create_directories(root_);
        // 4 layers x 2 KV groups: 7:1 keeps exactly one of the 8 groups full attention.
        TrainConfig t = TrainConfig::preset("test-micro");
        t.num_layers = 4;
        t.seq_len = 256;
        t.steps = t.schedule_steps = 30;
        t.lr = 3e-3;
        t.threads = 1;
        t.sources = {"austen_northangerabbey.txt"};
        t.shard_dir = (root_ / "teacher_shards").string();
        run_training(t, (root_ / "teacher").string(), std::nullopt, std::nullopt, {});
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        if (!root_.empty()) fs::remove_all(root_, ec);
    }
    void SetUp() override {
        if (root_.empty()) GTEST_SKIP() << "prose cache missing (run tools/setup.sh)";
    }
    // The demo's settings at micro size: one scoring pair, one sample per ablation condition, a few
    // training steps of 2 x 32 tokens.
    static PipelineConfig micro() {
        PipelineConfig c = demo_config((root_ / "teacher").string());
        c.score_lengths = {224};  // inside the teacher's 256 positions, answer included
        c.score_samples = 1;
        c.ablation_samples = 1;
        c.calib_tokens = 64;
        c.heldout_tokens = 256;
        for (TrainConfig* s : {&c.align, &c.distill}) {
            s->sources = {"austen_northangerabbey.txt"};
            s->seq_len = 32;
            s->batch_size = 2;
            s->threads = 1;
            s->lr = 3e-3;
        }
        // The tiny teacher's heads output nearly constant vectors, so the demo's LA offsets would start the
        // conversion within 0.004 nats of it and leave the recovery nothing to show: without them the
        // start is far and the steps must close part of the distance.
        EXPECT_TRUE(c.variants.at(0).la_bias);  // the demo's own default
        c.variants.at(0).la_bias = false;
        c.align.steps = c.align.schedule_steps = 8;
        c.align.save_every = 4;
        c.distill.steps = c.distill.schedule_steps = 8;
        c.distill.save_every = 4;
        return c;
    }
    static fs::path root_;
};

fs::path Demo::root_;

TEST_F(Demo, StepsReportAndResume) {
    const fs::path out = root_ / "run";
    const PipelineConfig cfg = micro();
    const DemoResult r = run_demo(cfg, out.string(), "", {});
    ASSERT_TRUE(fs::exists(r.report_path));

    // 1. scores of every head
    const json scores = read_json(out / "scores.json");
    EXPECT_EQ(scores["format"], "hydra-head-scores");
    EXPECT_TRUE(scores["methods"].contains("attribution"));
    // 2. the causal check: intact, top-scored and three random eighths on the same samples
    const json ab = read_json(out / "ablation.json");
    EXPECT_EQ(ab["heads_ablated"].get<int64_t>(), 2);  // 4 layers x 4 heads / 8
    EXPECT_TRUE(ab.contains("none") && ab.contains("top_scored"));
    EXPECT_EQ(ab["random"].size(), 3u);
    EXPECT_FALSE(fs::exists(out / "ablation.partial.json"));
    // 3. the 7:1 hybrid keeps one of 8 KV groups: an eighth of the teacher's KV cache
    const json cv = read_json(out / "conversion.json");
    EXPECT_EQ(cv["fa_kv_groups"].get<int64_t>(), 1);
    EXPECT_EQ(cv["kv_bytes_per_token_hybrid"].get<int64_t>() * 8,
              cv["kv_bytes_per_token_teacher"].get<int64_t>());
    EXPECT_TRUE(fs::exists(out / "hybrid" / "config.json"));
    // 4. held-out KL on the same tokens before and after the recovery: it falls
    const json ag = read_json(out / "agreement.json");
    for (const char* k : {"converted", "align", "distill"}) {
        ASSERT_TRUE(ag.contains(k)) << k;
        EXPECT_EQ(ag[k]["tokens"].get<int64_t>(), ag["converted"]["tokens"].get<int64_t>()) << k;
        EXPECT_GT(ag[k]["tokens"].get<int64_t>(), 100) << k;
    }
    EXPECT_LT(ag["distill"]["kl"].get<double>(), ag["converted"]["kl"].get<double>());
    EXPECT_GT(ag["converted"]["kl"].get<double>(), 0.0);
    // 5. the cost of one long sequence: the hybrid's cache holds an eighth of the teacher's K / V
    const json co = read_json(out / "cost.json");
    const int64_t context = co["context"].get<int64_t>(), steps = co["decode_tokens"].get<int64_t>();
    EXPECT_GT(context, 100);
    EXPECT_GT(steps, 0);
    for (const char* k : {"teacher", "hybrid"}) {
        EXPECT_GT(co[k]["prefill_seconds"].get<double>(), 0.0) << k;
        EXPECT_GT(co[k]["decode_tokens_per_second"].get<double>(), 0.0) << k;
    }
    const int64_t kv_t = co["teacher"]["kv_bytes_per_token"].get<int64_t>();
    EXPECT_EQ(co["hybrid"]["kv_bytes_per_token"].get<int64_t>() * 8, kv_t);
    EXPECT_EQ(co["teacher"]["cache_bytes"].get<int64_t>(), kv_t * (context + steps));  // no recurrent state
    EXPECT_LT(co["hybrid"]["cache_bytes"].get<int64_t>(), co["teacher"]["cache_bytes"].get<int64_t>());
    // the report shows all six parts and each step's wall time
    const std::string md = read_text_file(r.report_path);
    for (const char* h :
         {"## 1. Head scores", "## 2. The causal check", "## 3. Conversion 7:1", "## 4. A short recovery",
          "## 5. What a long context costs", "## 6. The full-budget run", "## Wall time per step"})
        EXPECT_NE(md.find(h), std::string::npos) << h;
    const json timings = read_json(out / "timings.json");
    for (const char* k :
         {"score", "ablation", "convert", "align", "distill", "kl/converted", "kl/distill", "cost"})
        EXPECT_TRUE(timings.contains(k)) << k;

    // A second run resumes: nothing is recomputed (no step's result is rewritten).
    const auto stamp = [&](const fs::path& p) { return fs::last_write_time(p); };
    const auto t_scores = stamp(out / "scores.json"), t_ab = stamp(out / "ablation.json"),
               t_hybrid = stamp(out / "hybrid" / "config.json"), t_ag = stamp(out / "agreement.json"),
               t_distill = stamp(out / "distill" / "state.json"), t_cost = stamp(out / "cost.json");
    run_demo(cfg, out.string(), "", {});
    EXPECT_EQ(stamp(out / "scores.json"), t_scores);
    EXPECT_EQ(stamp(out / "ablation.json"), t_ab);
    EXPECT_EQ(stamp(out / "hybrid" / "config.json"), t_hybrid);
    EXPECT_EQ(stamp(out / "agreement.json"), t_ag);
    EXPECT_EQ(stamp(out / "distill" / "state.json"), t_distill);
    EXPECT_EQ(stamp(out / "cost.json"), t_cost);
    EXPECT_EQ(read_json(out / "agreement.json"), ag);

    // --from distill recomputes stage 2 (same settings, same data: the same KL) and nothing before it.
    run_demo(cfg, out.string(), "distill", {});
    EXPECT_EQ(stamp(out / "hybrid" / "config.json"), t_hybrid);
    EXPECT_NE(stamp(out / "distill" / "state.json"), t_distill);
    EXPECT_NE(stamp(out / "cost.json"), t_cost);  // a step after it
    EXPECT_NEAR(read_json(out / "agreement.json")["distill"]["kl"].get<double>(),
                ag["distill"]["kl"].get<double>(), 1e-6);

    EXPECT_THROW(run_demo(cfg, out.string(), "nope", {}), Error);
}

TEST(DemoReport, LatestGpuReportByDate) {
    const fs::path root = fs::temp_directory_path() / ("hydra_gpu_reports_" + std::to_string(::getpid()));
    fs::remove_all(root);
    auto make = [&](const std::string& name, const std::string& device, const std::string& date) {
        fs::create_directories(root / name);
        write_text_file(root / name / "pipeline_config.json", json{{"device", device}}.dump());
        write_text_file(root / name / "report.md", "# HydraHead pipeline report: x\n\n" + date +
                                                       " UTC; output directory `x`.\n\n## Results\n\n| a | " +
                                                       name + " |\n|---|---|\n\n## Per task\n\n| no |\n");
    };
    EXPECT_FALSE(latest_gpu_report(root.string()).has_value());
    make("old_gpu", "cuda", "2026-11-01 10:00");
    make("new_gpu", "cuda", "2026-11-29 23:46");
    make("newest_cpu", "cpu", "2026-12-01 08:00");  // not a GPU run
    const auto ref = latest_gpu_report(root.string());
    ASSERT_TRUE(ref.has_value());
    EXPECT_EQ(fs::path(ref->path).parent_path().filename(), "new_gpu");
    EXPECT_EQ(ref->date, "2026-11-29 23:46 UTC");
    EXPECT_EQ(ref->results, "| a | new_gpu |\n|---|---|\n");  // the Results table only
    fs::remove_all(root);
    // The checkout's own results hold at least one GPU pipeline report.
    EXPECT_TRUE(latest_gpu_report(std::string(HYDRA_SOURCE_DIR) + "/docs/results").has_value());
}

}  // namespace
}  // namespace hydra
