// Never lose a user's files (issue 37): output paths that are not hydra directories are refused,
// trailing slashes and relative paths work, one writer per directory (a lock naming the holder),
// a save cut at any step is recovered on the next resume or load, and deep or oversized inputs and
// meaningless config values are clear errors instead of crashes or silent nonsense. Each test runs
// the public entry points (run_training, save_checkpoint, save_model_directory, load_model,
// TrainConfig) on the test-micro preset, so it takes seconds.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/hf_config.h"
#include "model/llama_model.h"
#include "model/model_directory.h"
#include "model/model_loader.h"
#include "temp_dir.h"
#include "tiny_model.h"
#include "train/adamw.h"
#include "train/checkpoint.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using test::slurp;

bool prose_present() {
    return fs::exists(std::string(HYDRA_SOURCE_DIR) + "/.cache/prose/austen_persuasion.txt");
}

void spit(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// The error message of `f`, or "" when it does not throw hydra::Error.
template <typename F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// Names in `dir` (files and folders), sorted.
std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// A JSON text nesting `depth` objects: {"a":{"a":...{}...}}.
std::string deep_json(int64_t depth) {
    std::string s;
    s.reserve(size_t(depth) * 6 + 2);
    for (int64_t i = 0; i < depth; ++i) s += "{\"a\":";
    s += "{}";
    for (int64_t i = 0; i < depth; ++i) s += "}";
    return s;
}

class SafeOutput : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("hydra_safe_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        fs::create_directories(root_);
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(root_, ec);
    }
    void need_prose() {
        if (!prose_present()) GTEST_SKIP() << "prose cache missing (run tools/setup.sh)";
    }
    TrainConfig micro(int64_t steps = 4) {
        TrainConfig c = TrainConfig::preset("test-micro");
        c.shard_dir = (root_ / "shards").string();
        c.threads = 1;
        c.steps = steps;
        c.save_every = 2;
        c.eval_every = 1000;
        return c;
    }
    fs::path root_;
};

// --- output paths -------------------------------------------------------------------------------

TEST_F(SafeOutput, TrainRefusesADirectoryOfOtherFiles) {
    need_prose();
    const fs::path out = root_ / "mine";
    spit(out / "important.txt", "do not delete");
    spit(out / "sub" / "notes.md", "notes");
    const std::string err =
        error_of([&] { run_training(micro(), out.string(), std::nullopt, std::nullopt, {}); });
    EXPECT_TRUE(contains(err, "not a hydra checkpoint")) << err;
    EXPECT_TRUE(contains(err, "--force")) << err;
    EXPECT_EQ(slurp(out / "important.txt"), "do not delete");
    EXPECT_EQ(slurp(out / "sub" / "notes.md"), "notes");
}

TEST_F(SafeOutput, TrainRefusesARegularFile) {
    need_prose();
    const fs::path out = root_ / "file.txt";
    spit(out, "a file");
    const std::string err =
        error_of([&] { run_training(micro(), out.string(), std::nullopt, std::nullopt, {}); });
    EXPECT_TRUE(contains(err, "not a hydra checkpoint")) << err;
    EXPECT_EQ(slurp(out), "a file");
}

TEST_F(SafeOutput, SaveCheckpointAndModelDirectoryNeverReplaceForeignFiles) {
    LlamaModel model(test::tiny_checkpoint_config());
    AdamW opt(AdamWConfig{}, model.params().numel());
    const fs::path foreign = root_ / "foreign";
    spit(foreign / "important.txt", "keep");
    EXPECT_TRUE(contains(error_of([&] { save_checkpoint(foreign.string(), model, opt, TrainState{}, {}); }),
                         "not a hydra checkpoint"));
    EXPECT_TRUE(contains(error_of([&] { save_model_directory(foreign.string(), model, {}); }),
                         "not a hydra model directory"));
    EXPECT_EQ(slurp(foreign / "important.txt"), "keep");
    // The kinds are not interchangeable: a converted model never replaces a checkpoint and back.
    const fs::path ck = root_ / "ck", md = root_ / "md";
    save_checkpoint(ck.string(), model, opt, TrainState{}, {{"train_config", TrainConfig().to_json()}});
    save_model_directory(md.string(), model, {});
    EXPECT_TRUE(
        contains(error_of([&] { save_model_directory(ck.string(), model, {}); }), "is a hydra checkpoint"));
    EXPECT_TRUE(contains(error_of([&] { save_checkpoint(md.string(), model, opt, TrainState{}, {}); }),
                         "is a hydra model directory"));
    EXPECT_TRUE(fs::exists(ck / "optim.safetensors"));
    // Each kind replaces itself, and an empty directory is fine.
    save_checkpoint(ck.string(), model, opt, TrainState{}, {{"train_config", TrainConfig().to_json()}});
    save_model_directory(md.string(), model, {});
    fs::create_directories(root_ / "empty");
    save_model_directory((root_ / "empty").string(), model, {});
    EXPECT_TRUE(fs::exists(root_ / "empty" / "model.safetensors"));
}

TEST_F(SafeOutput, TrailingSlashesAndRelativePathsWork) {
    need_prose();
    TrainConfig c = micro(4);
    run_training(c, (root_ / "ref").string(), std::nullopt, std::nullopt, {});
    c.steps = 2;
    run_training(c, (root_ / "run").string() + "/", std::nullopt, std::nullopt, {});
    EXPECT_TRUE(fs::exists(root_ / "run" / "model.safetensors"));
    // Relative --out and --resume with trailing slashes, from another working directory.
    const fs::path cwd = fs::current_path();
    fs::current_path(root_);
    const std::string err =
        error_of([&] { run_training(TrainConfig(), "run/", std::string("./run/"), 4, {}); });
    fs::current_path(cwd);
    EXPECT_EQ(err, "");
    EXPECT_EQ(slurp(root_ / "run" / "model.safetensors"), slurp(root_ / "ref" / "model.safetensors"));
    EXPECT_EQ(entries(root_), (std::vector<std::string>{"ref", "run", "shards"}));
}

// --- one writer per directory ------------------------------------------------------------------

// A child process trains into `out` and parks inside its first step's callback until the parent
// writes a byte to `release`; the parent then starts a second run on the same directory.
TEST_F(SafeOutput, ASecondWriterFailsAtOnceNamingTheHolder) {
    need_prose();
    TrainConfig c = micro(50);
    run_training(micro(2), (root_ / "warm").string(), std::nullopt, std::nullopt, {});  // shards built once
    const fs::path out = root_ / "busy";
    int ready[2], release[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(release), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        try {
            run_training(c, out.string(), std::nullopt, std::nullopt, [&](const StepLog&) {
                char b = 1;
                (void)!::write(ready[1], &b, 1);
                (void)!::read(release[0], &b, 1);
                ::_exit(0);
            });
        } catch (...) {
        }
        ::_exit(3);
    }
    char b = 0;
    ASSERT_EQ(::read(ready[0], &b, 1), 1);
    const std::string err =
        error_of([&] { run_training(micro(2), out.string(), std::nullopt, std::nullopt, {}); });
    (void)!::write(release[1], &b, 1);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(contains(err, "PID " + std::to_string(child))) << err;
    // The child died holding the lock: the next run takes the directory over.
    EXPECT_EQ(error_of([&] { run_training(micro(2), out.string(), std::nullopt, std::nullopt, {}); }), "");
    EXPECT_TRUE(fs::exists(out / "state.json"));
    EXPECT_FALSE(fs::exists(root_ / "busy.lock"));
}

// --- crash-consistent swap ---------------------------------------------------------------------

// A kill between the two renames of the swap leaves only "<dir>.old-<pid>" and "<dir>.tmp-<pid>";
// resume picks the newer complete copy and is bit-exact; leftovers are cleaned.
TEST_F(SafeOutput, ResumeRecoversASwapCutBetweenItsTwoRenames) {
    need_prose();
    TrainConfig c = micro(6);
    run_training(c, (root_ / "ref").string(), std::nullopt, std::nullopt, {});
    c.steps = 4;
    run_training(c, (root_ / "newer").string(), std::nullopt, std::nullopt, {});
    c.steps = 2;
    run_training(c, (root_ / "run").string(), std::nullopt, std::nullopt, {});
    fs::rename(root_ / "run", root_ / "run.old-999999");
    fs::rename(root_ / "newer", root_ / "run.tmp-999999");
    fs::create_directories(root_ / "run.tmp-999998");  // an earlier save cut while filling
    spit(root_ / "run.tmp-999998" / "model.safetensors.tmp.999998", "partial");
    const std::string err = error_of(
        [&] { run_training(TrainConfig(), (root_ / "run").string(), (root_ / "run").string(), 6, {}); });
    EXPECT_EQ(err, "");
    EXPECT_EQ(slurp(root_ / "run" / "model.safetensors"), slurp(root_ / "ref" / "model.safetensors"));
    EXPECT_EQ(slurp(root_ / "run" / "optim.safetensors"), slurp(root_ / "ref" / "optim.safetensors"));
    EXPECT_EQ(entries(root_), (std::vector<std::string>{"ref", "run", "shards"}));
}

TEST_F(SafeOutput, LoadFindsAModelDirectoryWhoseSwapWasCut) {
    LlamaModel model(test::tiny_checkpoint_config());
    model.params().data()[0] = 0.5f;
    save_model_directory((root_ / "m").string(), model, {});
    fs::rename(root_ / "m", root_ / "m.old-999999");
    fs::copy(root_ / "m.old-999999", root_ / "m.tmp-999999");
    LoadedModel loaded = load_model((root_ / "m").string());
    EXPECT_EQ(loaded.model->params().data()[0], 0.5f);
    EXPECT_EQ(entries(root_), (std::vector<std::string>{"m"}));
}

// --- bounded input -----------------------------------------------------------------------------

TEST_F(SafeOutput, DeepTrainConfigsAreClearErrors) {
    spit(root_ / "deep.json", deep_json(20000));
    EXPECT_TRUE(
        contains(error_of([&] { load_config_file((root_ / "deep.json").string()); }), "nests deeper"));
    std::string toml = "[a";
    for (int i = 0; i < 20000; ++i) toml += ".a";
    spit(root_ / "deep.toml", toml + "]\nx = 1\n");
    EXPECT_TRUE(
        contains(error_of([&] { load_config_file((root_ / "deep.toml").string()); }), "nests deeper"));
    // apply() on an already parsed deep object (an API caller) is an error too, not a recursion.
    const nlohmann::json deep = nlohmann::json::parse(deep_json(20000));
    TrainConfig c;
    EXPECT_TRUE(contains(error_of([&] { c.apply(deep, "api"); }), "api"));
}

TEST_F(SafeOutput, DeepModelConfigIsAClearError) {
    LlamaModel model(test::tiny_checkpoint_config());
    save_model_directory((root_ / "m").string(), model, {});
    std::string text = slurp(root_ / "m" / "config.json");
    const size_t at = text.find("\"hydra\": {");  // the hydra section nests 200,000 deep
    ASSERT_NE(at, std::string::npos);
    text.insert(at + 10, "\"deep\": " + deep_json(200000) + ",\n  ");
    spit(root_ / "m" / "config.json", text);
    EXPECT_TRUE(contains(error_of([&] { load_model((root_ / "m").string()); }), "nests deeper"));
    EXPECT_TRUE(contains(error_of([&] { parse_hf_config(text, "config.json"); }), "nests deeper"));
}

TEST_F(SafeOutput, DeepCheckpointConfigOnResumeIsAClearError) {
    need_prose();
    run_training(micro(2), (root_ / "run").string(), std::nullopt, std::nullopt, {});
    std::string text = slurp(root_ / "run" / "config.json");
    text.insert(text.find("\"hydra\": {") + 10, "\"deep\": " + deep_json(200000) + ",\n  ");
    spit(root_ / "run" / "config.json", text);
    const std::string err = error_of(
        [&] { run_training(TrainConfig(), (root_ / "run").string(), (root_ / "run").string(), 4, {}); });
    EXPECT_TRUE(contains(err, "nests deeper")) << err;
}

TEST_F(SafeOutput, OversizedConfigFilesAreRefused) {
    spit(root_ / "big.json", "{\"run\": {\"steps\": 5}}" + std::string(size_t(20) << 20, ' '));
    EXPECT_TRUE(contains(error_of([&] { load_config_file((root_ / "big.json").string()); }), "larger than"));
}

// --- values checked for meaning ----------------------------------------------------------------

TEST_F(SafeOutput, MeaninglessRunValuesAreRefused) {
    TrainConfig c;
    c.eval_batches = 0;
    EXPECT_TRUE(contains(error_of([&] { c.validate(); }), "run.eval_batches"));
    c = TrainConfig();
    c.threads = -3;
    EXPECT_TRUE(contains(error_of([&] { c.validate(); }), "run.threads"));
    c = TrainConfig();
    c.warmup_steps = -1;
    EXPECT_TRUE(contains(error_of([&] { c.validate(); }), "optim.warmup_steps"));
}

TEST_F(SafeOutput, CorruptStateStepsAreRefused) {
    need_prose();
    run_training(micro(4), (root_ / "run").string(), std::nullopt, std::nullopt, {});
    const std::string good = slurp(root_ / "run" / "state.json");
    for (const int64_t bad : {int64_t(-5), int64_t(1000000), int64_t(2)}) {
        nlohmann::json st = nlohmann::json::parse(good);
        st["step"] = bad;
        spit(root_ / "run" / "state.json", st.dump(2));
        const std::string err = error_of(
            [&] { run_training(TrainConfig(), (root_ / "run").string(), (root_ / "run").string(), 6, {}); });
        EXPECT_TRUE(contains(err, "state.json")) << bad << ": " << err;
        EXPECT_TRUE(contains(err, "step")) << bad << ": " << err;
    }
    // Asking a checkpoint at step 4 to stop at step 2 is an error, not a silent "finished".
    spit(root_ / "run" / "state.json", good);
    EXPECT_TRUE(contains(error_of([&] {
                             run_training(TrainConfig(), (root_ / "run").string(), (root_ / "run").string(),
                                          2, {});
                         }),
                         "already at step 4"));
}

TEST_F(SafeOutput, MessagesNameOnlyCheckpointsThatExist) {
    need_prose();
    TrainConfig c = micro(10);
    c.init_std = 1e30;  // every step is non-finite: the run stops before its first save
    c.max_bad_steps = 1;
    const std::string err =
        error_of([&] { run_training(c, (root_ / "nan").string(), std::nullopt, std::nullopt, {}); });
    EXPECT_TRUE(contains(err, "non-finite")) << err;
    EXPECT_FALSE(contains(err, "is intact")) << err;
    EXPECT_TRUE(contains(err, "no checkpoint")) << err;
    // A first save that fails has no previous checkpoint to keep.
    LlamaModel model(test::tiny_checkpoint_config());
    AdamW opt(AdamWConfig{}, model.params().numel());
    rlimit old{};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit tiny = old;
    tiny.rlim_cur = 4096;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &tiny), 0);
    const std::string save_err =
        error_of([&] { save_checkpoint((root_ / "first").string(), model, opt, TrainState{}, {}); });
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_FALSE(save_err.empty());
    EXPECT_FALSE(contains(save_err, "previous checkpoint kept")) << save_err;
    EXPECT_FALSE(fs::exists(root_ / "first" / "model.safetensors"));
}

TEST_F(SafeOutput, ConfigSizesAreCheckedAgainstTheWeightsBeforeAllocating) {
    LlamaModel model(test::tiny_checkpoint_config());
    save_model_directory((root_ / "m").string(), model, {});
    nlohmann::json cfg = nlohmann::json::parse(slurp(root_ / "m" / "config.json"));
    cfg["hidden_size"] = 16384;  // 64 layers of 16K x 53K MLPs: about 170 G parameters
    cfg["intermediate_size"] = 53248;
    cfg["num_hidden_layers"] = 64;
    cfg["num_attention_heads"] = 128;
    cfg["num_key_value_heads"] = 8;
    cfg["head_dim"] = 128;
    cfg["hydra"].erase("plan");
    spit(root_ / "m" / "config.json", cfg.dump(2));
    const std::string err = error_of([&] { load_model((root_ / "m").string()); });
    EXPECT_TRUE(contains(err, "weight files hold")) << err;
}

}  // namespace
}  // namespace hydra
