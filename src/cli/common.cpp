// Options and defaults shared by the subcommands (see commands.h).
#include <cstdlib>
#include <optional>

#include "cli/commands.h"
#include "core/parse_number.h"
#include "core/threading.h"

namespace hydra::cli {

std::string default_model_path() {
    if (const char* env = std::getenv("HYDRA_MODEL"); env && *env) return env;
    return std::string(HYDRA_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

void add_threads_option(CLI::App& cmd, int& threads) {
    cmd.add_option("-t,--threads", threads, "CPU threads (default: all cores)")->check(CLI::Range(0, 1024));
}

void apply_threads(int threads) { set_num_threads(threads); }

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
