// libFuzzer target for opening a token-shard directory (train/token_shards.h open_token_shards), the
// `--shards` of `hydra ppl --teacher` and `hydra analyze`, a pipeline's eval.heldout_shards and every
// training stage's data: a directory a user points at, or one unpacked from another machine, so its
// index.json and shard files are outside input. Input layout: a little-endian u16 n, then n bytes of
// index.json, a little-endian u16 m, then m bytes of train_00000.bin and the rest as heldout_00000.bin.
// open_token_shards must either throw hydra::Error or return splits whose every token is readable and inside
// the vocabulary, with the sizes the index states; the held-out windows of `hydra ppl` are then cut without
// error. Anything else (a crash, a sanitizer report, a JSON or std exception, a read past a file) is a bug.
// Build and run: tools/fuzz.sh fuzz_token_shards 300   (seeds: fuzz/seeds/token_shards)
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/heldout_metrics.h"
#include "train/token_shards.h"

namespace fs = std::filesystem;

namespace {

fs::path g_dir;  // the scratch directory, removed at exit

void write_file(const fs::path& p, const uint8_t* data, size_t size) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
}

void check_split(const hydra::TokenSplit& split, int32_t vocab) {
    std::vector<int32_t> buf(4096);
    for (int64_t at = 0; at < split.size(); at += int64_t(buf.size())) {
        const int64_t n = std::min<int64_t>(int64_t(buf.size()), split.size() - at);
        split.read(at, n, buf.data());
        for (int64_t i = 0; i < n; ++i)
            if (buf[size_t(i)] < 0 || buf[size_t(i)] >= vocab) __builtin_trap();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (g_dir.empty()) {
        g_dir = fs::temp_directory_path() / ("fuzz_token_shards_" + std::to_string(getpid()));
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(g_dir, ec);
        });
    }
    if (size < 3) return 0;
    const size_t n = std::min<size_t>(size_t(data[0]) | size_t(data[1]) << 8, size - 2);
    const uint8_t* index = data + 2;
    const uint8_t* rest = index + n;
    size_t rest_size = size - 2 - n;
    size_t cut = 0;
    if (rest_size >= 2) {
        cut = std::min<size_t>(size_t(rest[0]) | size_t(rest[1]) << 8, rest_size - 2);
        rest += 2, rest_size -= 2;
    }
    std::error_code ec;
    fs::remove_all(g_dir, ec);
    fs::create_directories(g_dir);
    write_file(g_dir / "index.json", index, n);
    write_file(g_dir / "train_00000.bin", rest, cut);
    write_file(g_dir / "heldout_00000.bin", rest + cut, rest_size - cut);
    try {
        const hydra::TokenShards s = hydra::open_token_shards(g_dir.string());
        if (s.vocab_size <= 0) __builtin_trap();
        check_split(s.train, s.vocab_size);
        check_split(s.heldout, s.vocab_size);
        if (s.heldout.size() >= 2) {
            const auto windows = hydra::heldout_windows(s.heldout, 16, 64);
            int64_t covered = 0;
            for (const auto& w : windows) covered += int64_t(w.size()) - 1;
            if (covered != std::min<int64_t>(64, s.heldout.size() - 1)) __builtin_trap();
        }
    } catch (const hydra::Error&) {
    }
    return 0;
}
