// Options and defaults shared by the subcommands (see commands.h).
#include <chrono>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/parse_number.h"
#include "core/threading.h"
#include "model/weight_quantizer.h"

namespace hydra::cli {

std::string default_model_path() {
    if (const char* env = std::getenv("HYDRA_MODEL"); env && *env) return env;
    return std::string(HYDRA_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

void add_threads_option(CLI::App& cmd, int& threads) {
    cmd.add_option("-t,--threads", threads, "CPU threads (default: all cores)")->check(CLI::Range(0, 1024));
}

void apply_threads(int threads) { set_num_threads(threads); }

void add_weight_quantization_option(CLI::App& cmd, std::string& mode) {
    cmd.add_option(
           "--quantize-weights", mode,
           "CPU decoding from Q8_0 copies of the f32 linear weights (none | q8_0; a GGUF's own quantized "
           "weights are used anyway)")
        ->check(CLI::IsMember({"none", "q8_0"}))
        ->capture_default_str();
}

void apply_weight_quantization(LlamaModel& model, const std::string& mode) {
    if (mode != "q8_0") return;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t n = quantize_linear_weights(model);
    fmt::print(stderr, "quantized {} linear weights to Q8_0 for decoding in {:.1f} s\n", n,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

CLI::Validator at_least(int64_t min) {
    return CLI::Validator(
        [min](std::string& text) -> std::string {
            const std::optional<int64_t> v = parse_int64(text);
            if (!v) return "must be an integer >= " + std::to_string(min) + ", got '" + text + "'";
            if (*v < min) return "must be at least " + std::to_string(min) + ", got " + text;
            return "";
        },
        "INT>=" + std::to_string(min));
}

}  // namespace hydra::cli
