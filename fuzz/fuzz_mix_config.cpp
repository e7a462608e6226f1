// libFuzzer target for corpus mix files (train/mix_config.h), JSON or TOML, against a three-source
// manifest: parse_mix_weights must either return one finite, non-negative weight per source with some
// weight on a source that has training tokens, or throw hydra::Error. Anything else (a crash, a
// sanitizer report, a nlohmann, toml++ or std exception) is a bug.
// Build and run: tools/fuzz.sh fuzz_mix_config 300   (seeds: fuzz/seeds/mix_config)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "train/corpus_manifest.h"
#include "train/mix_config.h"

namespace {

hydra::CorpusManifest manifest() {
    hydra::CorpusManifest m;
    m.tokenizer = "fuzz", m.vocab_size = 100, m.eos_id = 0, m.train_tokens = 300, m.heldout_tokens = 30;
    m.sources = {{"python-docs", 1, 0, 100, 0, 10},
                 {"gcide", 1, 100, 300, 10, 30},
                 {"linux-source", 1, 300, 300, 30, 30}};
    return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const hydra::CorpusManifest m = manifest();
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        const std::vector<double> w = hydra::parse_mix_weights(text, "fuzz/mix", m);
        if (w.size() != m.sources.size()) __builtin_trap();
        double trainable = 0;
        for (size_t i = 0; i < w.size(); ++i) {
            if (!std::isfinite(w[i]) || w[i] < 0) __builtin_trap();
            if (m.sources[i].train_end > m.sources[i].train_begin) trainable += w[i];
        }
        if (!(trainable > 0)) __builtin_trap();
    } catch (const hydra::Error&) {
    }
    return 0;
}
