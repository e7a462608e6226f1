// The three HydraHead transfer stages through `hydra train` (run_training) on a micro teacher: a
// teacher is pretrained, converted to a 3:1 head-level hybrid, then aligned (stage 1), distilled
// (stage 2) and fine-tuned on longer sequences (stage 3). Each stage: the loss falls, frozen
// parameters stay bit-identical, and a stage cut in two and resumed equals an uninterrupted one.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/hybrid_conversion.h"
#include "model/model_directory.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "temp_dir.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using test::slurp;

std::vector<double> losses(const fs::path& log) {
    std::vector<double> out;
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line);
        if (j["loss"].is_number()) out.push_back(j["loss"].get<double>());
    }
    return out;
}

double mean(const std::vector<double>& v, size_t begin, size_t end) {
    double s = 0;
    for (size_t i = begin; i < end; ++i) s += v[i];
    return s / double(end - begin);
}

class Stages : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        if (!fs::exists(std::string(HYDRA_SOURCE_DIR) + "/.cache/prose/austen_persuasion.txt")) return;
        root_ = fs::temp_directory_path() / ("hydra_stages_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        fs::create_directories(root_);
        TrainConfig t = base();
        t.steps = 40;
        run_training(t, (root_ / "teacher").string(), std::nullopt, std::nullopt, {});
        LoadedModel teacher = load_model((root_ / "teacher").string());
        PlanRequest r;
        r.select = "random";
        r.granularity = "head";
        r.ratio = parse_ratio("3:1", "test");
        r.gdn.chunk_size = 16;
        ConversionOptions o;
        for (int i = 0; i < 32; ++i) o.calibration_tokens.push_back(int32_t(32 + (i * 7) % 90));
        auto hybrid = convert_to_hybrid(*teacher.model, build_plan(teacher.model->config(), r), o);
        save_model_directory((root_ / "hybrid").string(), *hybrid, {});
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        if (!root_.empty()) fs::remove_all(root_, ec);
    }
    void SetUp() override {
        if (root_.empty()) GTEST_SKIP() << "prose cache missing (run tools/setup.sh)";
    }
    static TrainConfig base() {
        TrainConfig c = TrainConfig::preset("test-micro");
        c.shard_dir = (root_ / "shards").string();
        c.threads = 1;
        return c;
    }
    TrainConfig stage(const std::string& kind) {
        TrainConfig c = base();
        c.stage = kind;
        c.init = (root_ / "hybrid").string();
        c.teacher = (root_ / "teacher").string();
        c.steps = 16;
        c.schedule_steps = 16;
        c.lr = 3e-3;
        c.eval_every = 8;
        c.save_every = 4;
        if (kind == "align") c.trainable = {"*.linear_attn.*", "*.fusion.*"};
        if (kind == "distill") {
            c.ce_weight = 0.0;
            c.kl_weight = 1.0;
        }
        if (kind == "longctx") {
            c.seq_len = 64;  // twice stage 2's
            c.ce_weight = 1.0;
            c.kl_weight = 0.5;
            c.kl_max_position = 32;
        }
        return c;
    }
    // Runs the stage, checks that the loss falls and that frozen tensors did not move.
    void check_stage(const std::string& kind) {
        const TrainConfig c = stage(kind);
        const fs::path out = root_ / kind;
        run_training(c, out.string(), std::nullopt, std::nullopt, {});
        const std::vector<double> l = losses(out / "log.jsonl");
        ASSERT_EQ(l.size(), 16u);
        EXPECT_LT(mean(l, 12, 16), mean(l, 0, 4)) << kind;
        LoadedModel before = load_model((root_ / "hybrid").string());
        LoadedModel after = load_model(out.string());
        const ParamArena& a = before.model->params();
        const ParamArena& b = after.model->params();
        ASSERT_EQ(a.numel(), b.numel());
        int moved = 0, frozen_checked = 0;
        for (const ArenaEntry& e : a.entries()) {
            const bool same = std::memcmp(a.get(e.name).f32(), b.get(e.name).f32(), a.get(e.name).nbytes()) == 0;
            const bool trainable = kind != "align" || e.name.find("linear_attn") != std::string::npos ||
                                   e.name.find("fusion") != std::string::npos;
            if (!trainable) {
                EXPECT_TRUE(same) << kind << ": frozen " << e.name << " changed";
                ++frozen_checked;
            }
            moved += !same;
        }
        EXPECT_GT(moved, 0);
        if (kind == "align") {
            EXPECT_GT(frozen_checked, 10);
        }
    }
    static fs::path root_;
};

fs::path Stages::root_;

TEST_F(Stages, AlignLossFallsAndOnlyMixersMove) { check_stage("align"); }
TEST_F(Stages, DistillLossFalls) { check_stage("distill"); }
TEST_F(Stages, LongContextLossFalls) { check_stage("longctx"); }

TEST_F(Stages, ResumedStageEqualsUninterrupted) {
    TrainConfig c = stage("distill");
    c.steps = 8;
    run_training(c, (root_ / "full").string(), std::nullopt, std::nullopt, {});
    c.steps = 4;
    run_training(c, (root_ / "half").string(), std::nullopt, std::nullopt, {});
    run_training(TrainConfig(), (root_ / "half").string(), (root_ / "half").string(), int64_t(8), {});
    EXPECT_EQ(slurp(root_ / "full" / "model.safetensors"), slurp(root_ / "half" / "model.safetensors"));
}

TEST_F(Stages, StageConfigErrors) {
    TrainConfig c = stage("distill");
    c.init.clear();
    EXPECT_THROW(c.validate(), Error);
    c = stage("align");
    c.teacher.clear();
    EXPECT_THROW(c.validate(), Error);
    c = stage("distill");
    c.set("stage.kind", "distil", "test");
    EXPECT_THROW(c.validate(), Error);
    EXPECT_THROW(c.set("stage.kinds", "distill", "test"), Error);
}

}  // namespace
}  // namespace hydra
