// GPU decode ms/token, eager launches against CUDA graphs (bench/gpu_decode_timing.h), at a few cache
// lengths: for each MODEL and, for teachers, its 7:1 conversion (random kv groups, seed 1), or without MODEL
// random weights at SmolLM2-135M's shape (teacher and 7:1 hybrid; speed does not depend on the weights).
// Both greedy streams of a cell must be equal and the graphs must have run (exit 1 otherwise); the logits'
// parity with eager decode and with the CPU is the GPU test suite's (tests/gpu/test_forward.cpp).
//
//   gpu_decode_bench [--lengths 1024,8192,32768] [--steps 200] [--warmup 10] [MODEL...]
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "eval/eval_runner.h"
#include "gpu_decode_timing.h"
#include "gpu_train_common.h"
#include "model/hybrid_conversion.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"

using namespace hydra;

namespace {

using Models = std::vector<std::pair<std::string, std::unique_ptr<LlamaModel>>>;

// The 7:1 hybrid of `teacher`: converted from it, or with random weights of the same shape.
void add_hybrid(Models& models, const LlamaModel& teacher, const std::string& name, bool random_weights) {
    const ModelConfig& c = teacher.config();
    const HybridPlan plan = build_plan(c, bench::plan_request(c, "7:1", "kv", FusionKind::ScaleNorm, 1));
    std::unique_ptr<LlamaModel> h;
    if (random_weights) {
        h = std::make_unique<LlamaModel>(c, &plan);
        bench::randomise(*h, 22);
    } else {
        h = convert_to_hybrid(teacher, plan, ConversionOptions{});
    }
    models.emplace_back(fmt::format("{} 7:1 hybrid ({})", name, plan.ratio_summary()), std::move(h));
}

Models load_models(const std::vector<std::string>& paths) {
    Models models;
    if (paths.empty()) {
        auto teacher = std::make_unique<LlamaModel>(bench::smollm2_135m_config());
        bench::randomise(*teacher, 21);
        const std::string name = "SmolLM2-135M shape (random weights)";
        add_hybrid(models, *teacher, name, true);
        models.emplace(models.begin(), name + " teacher", std::move(teacher));
        return models;
    }
    for (const std::string& p : paths) {
        LoadedModel m = load_model(p);
        const std::string name = std::filesystem::path(p).filename().string();
        const bool teacher = m.model->plan().is_all_fa();
        models.emplace_back(name, std::move(m.model));
        if (teacher) add_hybrid(models, *models.back().second, name, false);
    }
    return models;
}

}  // namespace

int main(int argc, char** argv) {
    std::string lengths = "1024,8192,32768";
    int64_t steps = 200, warmup = 10;
    std::vector<std::string> paths;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fmt::print(stderr, "{} needs a value\n", a);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--lengths")
            lengths = next();
        else if (a == "--steps")
            steps = std::stoll(next());
        else if (a == "--warmup")
            warmup = std::stoll(next());
        else if (a.rfind("--", 0) == 0) {
            fmt::print(stderr,
                       "usage: gpu_decode_bench [--lengths 1024,8192,32768] [--steps 200] [--warmup 10] "
                       "[MODEL...]\n");
            return 2;
        } else
            paths.push_back(a);
    }
    try {
        int failed = 0;
        std::vector<bench::DecodeTimingRow> rows;
        for (const auto& [name, model] : load_models(paths)) {
            fmt::print("== decode timing: {} (plan {})\n", name, model->plan().ratio_summary());
            for (const bench::DecodeTimingRow& r :
                 bench::time_decode(*model, name, parse_lengths(lengths), steps, warmup)) {
                if (r.equal != r.compared || !(r.graph_ms > 0)) {
                    fmt::print("FAIL: {} at {} positions: greedy {}/{} equal, graph {:.3f} ms/token\n",
                               r.model, r.positions, r.equal, r.compared, r.graph_ms);
                    ++failed;
                }
                rows.push_back(r);
            }
        }
        bench::print_decode_table(rows, steps);
        return failed == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
}
