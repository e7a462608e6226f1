// libFuzzer target for the "hydra.plan" object of a converted model's config.json (model/hybrid_plan.h),
// which comes with a model from anywhere: HybridPlan::from_json against a 2-layer, 6-head, 2-KV-group
// Llama config must either return a plan whose every layer holds each head exactly once, whose FA heads'
// KV-group map and windows are in range and whose cache sizes are positive, or throw hydra::Error.
// Anything else (a crash, a sanitizer report, a nlohmann or std exception) is a bug.
// Build and run: tools/fuzz.sh fuzz_hybrid_plan 300   (seeds: fuzz/seeds/hybrid_plan)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/bounded_parse.h"
#include "model/hf_config.h"
#include "model/hybrid_plan.h"
#include "model/model_config.h"

namespace {

std::optional<hydra::ModelConfig> g_config;

void check_accepted(const hydra::HybridPlan& p, const hydra::ModelConfig& c) {
    if (int64_t(p.layers.size()) != c.num_layers) __builtin_trap();
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const hydra::LayerPlan& lp = p.layers[size_t(l)];
        std::vector<int> seen(size_t(c.num_heads), 0);
        for (int32_t h : lp.fa_heads) {
            if (h < 0 || h >= c.num_heads) __builtin_trap();
            ++seen[size_t(h)];
        }
        for (int32_t h : lp.la_heads) {
            if (h < 0 || h >= c.num_heads) __builtin_trap();
            ++seen[size_t(h)];
        }
        for (int n : seen)
            if (n != 1) __builtin_trap();
        const std::vector<int32_t> groups = p.fa_kv_groups(c, l), index = p.fa_kv_index(c, l);
        if (index.size() != lp.fa_heads.size()) __builtin_trap();
        for (int32_t i : index)
            if (i < 0 || size_t(i) >= groups.size()) __builtin_trap();
        for (int32_t w : p.fa_windows(l))
            if (w < 0) __builtin_trap();
    }
    if (p.total_fa_heads() + p.total_la_heads() != c.num_layers * c.num_heads) __builtin_trap();
    if (p.kv_bytes_per_token(c, 2) < 0 || p.state_bytes(c) < 0) __builtin_trap();
    (void)p.ratio_summary();
    // what a model directory writes back must read back
    (void)hydra::HybridPlan::from_json(p.to_json(), c, "fuzz/round-trip");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* path = HYDRA_SOURCE_DIR "/fuzz/seeds/hf_config/tiny_llama.json";
    try {
        g_config = hydra::parse_hf_config(
            hydra::read_file_limited(path, hydra::kMaxConfigBytes, "the config"), path);
    } catch (const hydra::Error& e) {
        std::fprintf(stderr, "fuzz_hybrid_plan: cannot load %s: %s\n", path, e.what());
        std::abort();
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const nlohmann::json j = hydra::parse_json_bounded(text, "fuzz/config.json hydra.plan");
        check_accepted(hydra::HybridPlan::from_json(j, *g_config, "fuzz/config.json hydra.plan"), *g_config);
    } catch (const hydra::Error&) {
    }
    return 0;
}
