// libFuzzer target for the small languages of hydra's command line: LA:FA ratios, layer lists, head
// ablation specs, --rope-scaling specs, evaluation lengths ("4k"), task and method lists, and key=value
// overrides of the train and pipeline configs (then validated). The first input byte picks the parser, the
// rest is the argument. Each must either return a value that keeps its documented rules or throw
// hydra::Error; anything else (a crash, a sanitizer report, a std or nlohmann exception) is a bug.
// Build and run: tools/fuzz.sh fuzz_cli_specs 300   (seeds: fuzz/seeds/cli_specs)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/eval_runner.h"
#include "eval/task_registry.h"
#include "interp/score_heads.h"
#include "model/head_ablation.h"
#include "model/plan_builders.h"
#include "model/rope_scaling.h"
#include "pipeline/pipeline_config.h"
#include "train/train_config.h"

namespace {

constexpr int64_t kLayers = 30, kHeads = 9;

void parse(uint8_t which, const std::string& arg) {
    switch (which % 10) {
        case 0: {
            const hydra::Ratio r = hydra::parse_ratio(arg, "--ratio");
            if (r.la < 0 || r.fa < 0 || (r.la == 0 && r.fa == 0)) __builtin_trap();
            if (!(r.fa_fraction() >= 0 && r.fa_fraction() <= 1)) __builtin_trap();
            break;
        }
        case 1:
            (void)hydra::parse_layer_list(arg, "--layers");
            break;
        case 2: {
            static const std::vector<std::vector<double>> scores(size_t(kLayers),
                                                                 std::vector<double>(size_t(kHeads), 0.5));
            for (const hydra::HeadRef& h : hydra::parse_ablation(arg, kLayers, kHeads, &scores))
                if (h.first < 0 || h.first >= kLayers || h.second < 0 || h.second >= kHeads) __builtin_trap();
            break;
        }
        case 3:
            (void)hydra::parse_rope_scaling_spec(arg);
            break;
        case 4:
            for (int64_t L : hydra::parse_lengths(arg))
                if (L <= 0) __builtin_trap();
            break;
        case 5:
            (void)hydra::parse_task_list(arg);
            break;
        case 6:
            (void)hydra::parse_methods(arg);
            break;
        case 7:
            (void)hydra::parse_task_specs(arg);
            break;
        case 8: {
            hydra::TrainConfig c = hydra::TrainConfig::preset("tiny-cpu");
            c.apply_override(arg);
            c.validate();
            (void)c.to_json();
            break;
        }
        default: {
            hydra::PipelineConfig p = hydra::PipelineConfig::preset("tiny-cpu");
            p.apply_override(arg);
            p.validate();
            (void)p.to_json();
            break;
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string arg(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        parse(data[0], arg);
    } catch (const hydra::Error&) {
    }
    return 0;
}
