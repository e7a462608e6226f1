// `hydra train` behaviour on the test-micro preset (a 2-layer model on one Austen novel, seconds
// per run): the loss falls, a run cut in two and resumed is byte-identical to an uninterrupted one,
// checkpoints are complete, and bad config keys are clear errors.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/llama_model.h"
#include "model_paths.h"
#include "temp_dir.h"
#include "tiny_model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/train_batch.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using test::slurp;

bool prose_present() { return fs::exists(std::string(HYDRA_SOURCE_DIR) + "/.cache/prose/austen_persuasion.txt"); }

class Trainer : public ::testing::Test {
protected:
    void SetUp() override {
        if (!prose_present()) GTEST_SKIP() << "prose cache missing (run tools/setup.sh)";
        root_ = fs::temp_directory_path() / ("hydra_trainer_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        fs::create_directories(root_);
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(root_, ec);
    }
    TrainConfig micro() {
        TrainConfig c = TrainConfig::preset("test-micro");
        c.shard_dir = (root_ / "shards").string();
        c.threads = 1;  // bit-exactness is per thread count; keep the test independent of the machine
        return c;
    }
    fs::path root_;
};

TEST_F(Trainer, LossFallsAndCheckpointIsComplete) {
    TrainConfig c = micro();
    c.steps = 30;
    c.lr = 1e-2;
    std::vector<double> losses;
    TrainRunResult r = run_training(c, (root_ / "run").string(), std::nullopt, std::nullopt,
                                    [&](const StepLog& s) { losses.push_back(s.loss); });
    ASSERT_EQ(r.final_step, 30);
    ASSERT_EQ(losses.size(), 30u);
    const double first = (losses[0] + losses[1] + losses[2]) / 3, last = (losses[27] + losses[28] + losses[29]) / 3;
    std::printf("test-micro: loss %.3f -> %.3f, held-out %.3f\n", first, last, r.final_heldout_loss.value_or(NAN));
    EXPECT_LT(last, first - 0.5);
    for (const char* f : {"model.safetensors", "optim.safetensors", "config.json", "state.json", "log.jsonl",
                          "loss_curve.png"})
        EXPECT_TRUE(fs::exists(root_ / "run" / f)) << f;
    // The JSONL log has one object per step with step and loss.
    std::ifstream log(root_ / "run" / "log.jsonl");
    std::string line;
    int64_t n = 0;
    while (std::getline(log, line)) {
        auto j = nlohmann::json::parse(line);
        EXPECT_EQ(j.at("step").get<int64_t>(), ++n);
        EXPECT_TRUE(j.contains("loss"));
    }
    EXPECT_EQ(n, 30);
}

TEST_F(Trainer, ResumedRunIsByteIdentical) {
    TrainConfig c = micro();
    c.steps = 12;
    run_training(c, (root_ / "A").string(), std::nullopt, std::nullopt, {});
    c.steps = 5;
    run_training(c, (root_ / "B").string(), std::nullopt, std::nullopt, {});
    EXPECT_NE(slurp(root_ / "A" / "model.safetensors"), slurp(root_ / "B" / "model.safetensors"));
    run_training(TrainConfig(), (root_ / "B").string(), (root_ / "B").string(), 12, {});
    EXPECT_EQ(slurp(root_ / "A" / "model.safetensors"), slurp(root_ / "B" / "model.safetensors"));
    EXPECT_EQ(slurp(root_ / "A" / "optim.safetensors"), slurp(root_ / "B" / "optim.safetensors"));
}

TEST_F(Trainer, NonFiniteStepsAreSkippedThenTheRunStopsClearly) {
    TrainConfig c = micro();
    c.steps = 10;
    c.init_std = 1e30;  // every forward overflows: every step is non-finite
    c.max_bad_steps = 3;
    int64_t skipped = 0;
    try {
        run_training(c, (root_ / "nan").string(), std::nullopt, std::nullopt,
                     [&](const StepLog& s) { skipped += s.skipped; });
        FAIL() << "the run should stop";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("3 consecutive steps had a non-finite loss"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(skipped, 2);  // the third bad step stops the run before it is reported
}

// A save that fails half-way (the file-size limit makes writes fail like a full disk) must throw
// and leave the previous checkpoint byte-identical, with no temporary directory left behind.
TEST_F(Trainer, FailedSaveKeepsThePreviousCheckpoint) {
    LlamaModel model(test::tiny_checkpoint_config());
    AdamW opt(AdamWConfig{}, model.params().numel());
    TrainState st;
    const std::string dir = (root_ / "ck").string();
    save_checkpoint(dir, model, opt, st, nlohmann::json::object());
    const std::string before = slurp(root_ / "ck" / "model.safetensors");
    model.params().data()[0] = 42.0f;  // a different model to save
    rlimit old{};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit tiny = old;
    tiny.rlim_cur = 4096;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tiny), 0);
    bool threw = false;
    try {
        save_checkpoint(dir, model, opt, st, nlohmann::json::object());
    } catch (const Error& e) {
        threw = true;
        EXPECT_NE(std::string(e.what()).find("previous checkpoint kept"), std::string::npos) << e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_TRUE(threw);
    EXPECT_EQ(slurp(root_ / "ck" / "model.safetensors"), before);
    for (const auto& entry : fs::directory_iterator(root_))
        EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
}

TEST(TrainConfigKeys, UnknownAndMistypedKeysAreClearErrors) {
    TrainConfig c;
    try {
        c.apply_override("optim.lrr=0.1");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown key 'optim.lrr'"), std::string::npos) << e.what();
    }
    try {
        c.apply(nlohmann::json::parse(R"({"model": {"num_layers": "four"}})"), "cfg.json");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cfg.json: key 'model.num_layers': expected an integer"),
                  std::string::npos)
            << e.what();
    }
    c.apply_override("optim.schedule=wsd");
    EXPECT_EQ(c.schedule, "wsd");
    c.apply_override("model.num_layers=3");
    EXPECT_EQ(c.num_layers, 3);
    c.num_heads = 5;
    EXPECT_THROW(c.validate(), Error);
    EXPECT_THROW(TrainConfig::preset("huge"), Error);
}

// loss.ce_from_position: the cross-entropy only past a position (a longctx stage past its teacher's window).
TEST(TrainConfigKeys, CrossEntropyFromPosition) {
    TrainConfig c;
    c.seq_len = 8;
    c.apply_override("loss.ce_from_position=5");
    EXPECT_EQ(c.ce_from_position, 5);
    EXPECT_EQ(c.to_json()["loss"]["ce_from_position"], 5);
    EXPECT_NO_THROW(c.validate());
    c.ce_from_position = 8;  // no position left for a CE that weighs something
    EXPECT_THROW(c.validate(), Error);
    c.ce_from_position = -1;
    EXPECT_THROW(c.validate(), Error);

    // rows of 4: positions 0..2 of each row lose their targets, 3 keeps it; a position past the row masks all
    std::vector<int32_t> t = {10, 11, 12, 13, 20, 21, 22, 23};
    ignore_targets_before(t.data(), 2, 4, 3);
    EXPECT_EQ(t, (std::vector<int32_t>{-1, -1, -1, 13, -1, -1, -1, 23}));
    ignore_targets_before(t.data(), 2, 4, 9);
    EXPECT_EQ(t, std::vector<int32_t>(8, -1));
}

TEST(TrainConfigKeys, TomlAndJsonFilesGiveTheSameConfig) {
    const test::TempDir tmp("cfg");
    const fs::path& dir = tmp.path;
    std::ofstream(dir / "a.toml") << "[model]\nnum_layers = 3\n[optim]\nlr = 0.005\nschedule = \"wsd\"\n"
                                     "[data]\nsources = [\"x.txt\", \"y.txt\"]\n";
    std::ofstream(dir / "a.json") << R"({"model": {"num_layers": 3}, "optim": {"lr": 0.005, "schedule": "wsd"},
                                        "data": {"sources": ["x.txt", "y.txt"]}})";
    TrainConfig a, b;
    a.apply(load_config_file((dir / "a.toml").string()), "a.toml");
    b.apply(load_config_file((dir / "a.json").string()), "a.json");
    EXPECT_EQ(a.to_json(), b.to_json());
    EXPECT_EQ(a.num_layers, 3);
    std::ofstream(dir / "bad.toml") << "[model\nnum_layers = 3\n";
    EXPECT_THROW(load_config_file((dir / "bad.toml").string()), Error);
}

}  // namespace
}  // namespace hydra
