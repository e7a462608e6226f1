// libFuzzer target for `hydra corpus unpack` (corpus/corpus_pack.h): a pack file carries a corpus between
// machines, so its every byte is outside input. unpack_corpus on arbitrary bytes must either write a corpus
// directory that reads back (manifest and shards agreeing with what it reports) or throw hydra::Error,
// leaving no output directory. Anything else (a crash, a sanitizer report, a nlohmann or std exception, an
// allocation the input merely claims) is a bug.
// Build and run: tools/fuzz.sh fuzz_corpus_pack 300   (seeds: fuzz/seeds/corpus_pack)
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "corpus/corpus_pack.h"
#include "train/corpus_manifest.h"
#include "train/token_shards.h"

namespace fs = std::filesystem;

namespace {

fs::path g_dir;  // the scratch directory, removed at exit

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (g_dir.empty()) {
        g_dir = fs::temp_directory_path() / ("fuzz_corpus_pack_" + std::to_string(getpid()));
        fs::create_directories(g_dir);
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(g_dir, ec);
        });
    }
    const fs::path& dir = g_dir;
    const fs::path in = dir / "in.pack", out = dir / "out";
    {
        std::ofstream f(in, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    }
    fs::remove_all(out);
    try {
        const hydra::PackReport r = hydra::unpack_corpus(in.string(), out.string(), true);
        const hydra::CorpusManifest m = hydra::read_corpus_manifest(out.string());
        const hydra::TokenShards s = hydra::open_token_shards(out.string());
        if (s.train.size() != r.train_tokens || s.heldout.size() != r.heldout_tokens) __builtin_trap();
        if (m.train_tokens != r.train_tokens || m.heldout_tokens != r.heldout_tokens) __builtin_trap();
    } catch (const hydra::Error&) {
        std::error_code ec;
        if (fs::exists(out, ec)) __builtin_trap();  // a refused pack leaves nothing behind
    }
    return 0;
}
