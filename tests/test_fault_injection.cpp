// Fault injection into checkpoint saves, in the spirit of SQLite's I/O-error and crash tests: a
// training run resumed from step 2 saves its step-4 checkpoint while a hook (io/fault_injection.h)
// intervenes at every create, write, fsync, rename and remove of that save, one point at a time,
// every point (not a sample):
//   - error mode: the point fails (ENOSPC for writes, EIO otherwise). The run either fails with the
//     step-2 checkpoint byte-identical, or (a point after the new copy is in place) succeeds;
//   - crash mode: the file tree is copied exactly as it is before the point, which is what a kill
//     at that moment leaves on disk (the lock file included, its holder gone).
// Either way a plain resume afterwards must end with the checkpoint of an uninterrupted run, bit
// for bit, with no leftover next to it, and nothing outside the output directory touched.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "io/fault_injection.h"
#include "temp_dir.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using test::slurp;

std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// The files whose bytes a resumed run must reproduce (log.jsonl holds wall-clock rates).
const char* const kCompared[] = {"model.safetensors", "optim.safetensors", "state.json", "config.json"};

class FaultInjection : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!fs::exists(std::string(HYDRA_SOURCE_DIR) + "/.cache/prose/austen_persuasion.txt"))
            GTEST_SKIP() << "prose cache missing (run tools/setup.sh)";
        root_ = fs::temp_directory_path() / ("hydra_fault_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        fs::create_directories(root_ / "out");
        // Files next to the output directory and elsewhere that no save may touch.
        std::ofstream(root_ / "out" / "important.txt") << "beside the checkpoint";
        fs::create_directories(root_ / "elsewhere");
        std::ofstream(root_ / "elsewhere" / "notes.md") << "notes";
        sentinel_mtime_ = mtime(root_ / "out" / "important.txt");
    }
    void TearDown() override {
        set_io_hook({});
        std::error_code ec;
        fs::remove_all(root_, ec);
    }
    static int64_t mtime(const fs::path& p) {
        struct stat st {};
        ::stat(p.c_str(), &st);
        return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    }
    // One layer, tiny widths: the fewest tensors (so points) that still exercise every file.
    TrainConfig tiny(int64_t steps) {
        TrainConfig c = TrainConfig::preset("test-micro");
        c.shard_dir = (root_ / "shards").string();
        c.threads = 1;
        c.num_layers = 1;
        c.hidden_size = 16;
        c.num_heads = 2;
        c.num_kv_heads = 1;
        c.intermediate_size = 32;
        c.seq_len = 16;
        c.batch_size = 1;
        c.steps = steps;
        c.save_every = 2;
        c.eval_every = 1000;
        return c;
    }
    // Resumes out/run to step 4 with no hook and checks the result against the uninterrupted run.
    void resume_and_check(const std::string& label) {
        const fs::path run = root_ / "out" / "run";
        const std::string err = [&]() -> std::string {
            try {
                run_training(TrainConfig(), run.string(), run.string(), 4, {});
            } catch (const Error& e) {
                return e.what();
            }
            return "";
        }();
        ASSERT_EQ(err, "") << label;
        for (const char* f : kCompared) EXPECT_EQ(slurp(run / f), reference_[f]) << label << ": " << f;
        EXPECT_EQ(names_in(root_ / "out"), (std::vector<std::string>{"important.txt", "run"})) << label;
        EXPECT_EQ(slurp(root_ / "out" / "important.txt"), "beside the checkpoint") << label;
        EXPECT_EQ(mtime(root_ / "out" / "important.txt"), sentinel_mtime_) << label;
        EXPECT_EQ(slurp(root_ / "elsewhere" / "notes.md"), "notes") << label;
    }
    // out/run := the step-2 checkpoint.
    void restore_base() {
        fs::remove_all(root_ / "out" / "run");
        for (const auto& e : fs::directory_iterator(root_ / "out"))
            if (e.path().filename() != "important.txt") fs::remove_all(e.path());
        fs::copy(root_ / "base", root_ / "out" / "run", fs::copy_options::recursive);
    }
    // A hook's check that every operation stays in the output directory, its save siblings, or
    // (fsync only) the folder holding them.
    bool inside_output(IoOp op, const std::string& path) const {
        const std::string out = (root_ / "out").string(), run = out + "/run";
        if (op == IoOp::Fsync && path == out) return true;
        return path == run || path.rfind(run + "/", 0) == 0 || path.rfind(run + ".tmp-", 0) == 0 ||
               path.rfind(run + ".old-", 0) == 0;
    }

    fs::path root_;
    int64_t sentinel_mtime_ = 0;
    std::map<std::string, std::string> reference_;
};

TEST_F(FaultInjection, EveryIoPointOfASaveFailsOrCrashesSafely) {
    // The uninterrupted run, and the step-2 checkpoint every trial resumes from.
    run_training(tiny(4), (root_ / "ref").string(), std::nullopt, std::nullopt, {});
    for (const char* f : kCompared) reference_[f] = slurp(root_ / "ref" / f);
    run_training(tiny(2), (root_ / "base").string(), std::nullopt, std::nullopt, {});

    // Count the points of the step-4 save (the resumed run's only save) and check their paths.
    std::vector<std::pair<IoOp, std::string>> points;
    restore_base();
    set_io_hook([&](IoOp op, const std::string& path, const std::string&) {
        points.emplace_back(op, path);
        return 0;
    });
    run_training(TrainConfig(), (root_ / "out" / "run").string(), (root_ / "out" / "run").string(), 4, {});
    set_io_hook({});
    const int64_t n = int64_t(points.size());
    std::map<std::string, int> per_op;
    for (const auto& [op, path] : points) {
        per_op[io_op_name(op)]++;
        EXPECT_TRUE(inside_output(op, path)) << io_op_name(op) << " " << path;
    }
    std::printf("fault injection: %lld I/O points in one checkpoint save:", static_cast<long long>(n));
    for (const auto& [op, count] : per_op) std::printf(" %s %d", op.c_str(), count);
    std::printf("\n");
    ASSERT_GE(n, 40);
    for (const char* op : {"create", "write", "fsync", "rename", "remove"}) EXPECT_GT(per_op[op], 0) << op;

    // Error mode: point i fails.
    int failed_runs = 0;
    for (int64_t i = 0; i < n; ++i) {
        restore_base();
        int64_t seen = 0;
        set_io_hook([&](IoOp op, const std::string&, const std::string&) {
            return seen++ == i ? (op == IoOp::Write ? ENOSPC : EIO) : 0;
        });
        bool threw = false;
        try {
            run_training(TrainConfig(), (root_ / "out" / "run").string(), (root_ / "out" / "run").string(), 4,
                         {});
        } catch (const Error& e) {
            threw = true;
            EXPECT_NE(std::string(e.what()).find("previous checkpoint kept"), std::string::npos)
                << i << ": " << e.what();
        }
        set_io_hook({});
        if (threw) {
            ++failed_runs;
            for (const char* f : kCompared)
                EXPECT_EQ(slurp(root_ / "out" / "run" / f), slurp(root_ / "base" / f))
                    << "point " << i << ": " << f;
        }
        resume_and_check("error at point " + std::to_string(i) + " (" + io_op_name(points[size_t(i)].first) +
                         ")");
        if (HasFailure()) return;
    }

    // Crash mode: the tree as it is just before each point, then a resume of each.
    restore_base();
    const fs::path snaps = root_ / "snaps";
    fs::create_directories(snaps);
    int64_t at = 0;
    set_io_hook([&](IoOp, const std::string&, const std::string&) {
        fs::copy(root_ / "out", snaps / std::to_string(at++), fs::copy_options::recursive);
        return 0;
    });
    run_training(TrainConfig(), (root_ / "out" / "run").string(), (root_ / "out" / "run").string(), 4, {});
    set_io_hook({});
    ASSERT_EQ(at, n);
    for (int64_t i = 0; i < n; ++i) {
        fs::remove_all(root_ / "out");
        fs::copy(snaps / std::to_string(i), root_ / "out", fs::copy_options::recursive);
        sentinel_mtime_ = mtime(root_ / "out" / "important.txt");  // the copy is a new file
        resume_and_check("crash before point " + std::to_string(i) + " (" +
                         io_op_name(points[size_t(i)].first) + " " + points[size_t(i)].second + ")");
        if (HasFailure()) return;
    }
    std::printf(
        "fault injection: %lld error trials (%d failed the save, previous checkpoint intact; the rest "
        "failed after the new copy was in place), %lld crash trials; all resumed bit-exact\n",
        static_cast<long long>(n), failed_runs, static_cast<long long>(n));
}

}  // namespace
}  // namespace hydra
