// GPU decode ms/token, eager launches against CUDA graphs (bench/gpu_decode_timing.h), at a few cache
// lengths: for each MODEL and, for teachers, its 7:1 conversion (random kv groups, seed 1), or without MODEL
// random weights at SmolLM2-135M's shape (teacher and 7:1 hybrid; speed does not depend on the weights).
// Both greedy streams of a cell must be equal and the graphs must have run (exit 1 otherwise); the logits'
// parity with eager decode and with the CPU is the GPU test suite's (tests/gpu/test_forward.cpp).
//
//   gpu_decode_bench [--lengths 1024,8192,32768] [--steps 200] [--warmup 10] [MODEL...]
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "eval/eval_runner.h"
#include "gpu_decode_timing.h"

using namespace hydra;

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
        for (const auto& [name, model, teacher] : bench::decode_models(paths)) {
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
