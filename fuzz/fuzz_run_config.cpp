// libFuzzer target for training and pipeline config files (train/train_config.h, pipeline/pipeline_config.h),
// TOML or JSON as `hydra train CONFIG` / `hydra pipeline CONFIG` read them: the first input byte picks TOML
// or JSON and the train or pipeline config, the rest is the file. Parsing (depth-bounded, io/bounded_parse.h:
// our own TOML depth scan before toml++), applying onto a preset and validating must either give a config
// that serialises and applies again to the same JSON, or throw hydra::Error. Anything else (a crash, a
// sanitizer report, a toml++, nlohmann or std exception) is a bug.
// Build and run: tools/fuzz.sh fuzz_run_config 300   (seeds: fuzz/seeds/run_config)
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/bounded_parse.h"
#include "pipeline/pipeline_config.h"
#include "train/train_config.h"

namespace {

template <typename Config>
void apply_and_check(Config c, const nlohmann::json& file) {
    c.apply(file, "fuzz/config");
    c.validate();
    const nlohmann::json out = c.to_json();
    // what `hydra` writes as the run's config must read back as the same config
    Config again = c;
    again.apply(out, "fuzz/round-trip");
    if (again.to_json() != out) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    const bool toml = data[0] & 1, pipeline = data[0] & 2;
    try {
        const nlohmann::json file = toml ? hydra::parse_toml_bounded(text, "fuzz/config.toml")
                                         : hydra::parse_json_bounded(text, "fuzz/config.json");
        if (pipeline)
            apply_and_check(hydra::PipelineConfig::preset("tiny-cpu"), file);
        else
            apply_and_check(hydra::TrainConfig::preset("tiny-cpu"), file);
    } catch (const hydra::Error&) {
    }
    return 0;
}
