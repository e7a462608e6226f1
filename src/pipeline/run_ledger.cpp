// A resumable run's output directory, configuration and step timings (see run_ledger.h).
#include "pipeline/run_ledger.h"

#include <fmt/format.h>

#include "pipeline/pipeline_steps.h"

namespace hydra {

RunLedger::RunLedger(const std::filesystem::path& out_dir, const std::string& config_name,
                     const nlohmann::json& config)
    : out_(out_dir) {
    std::filesystem::create_directories(out_);
    write_json(out_ / (config_name + "_config.json"), config);
    timings_ = read_json_or(out_ / "timings.json", nlohmann::json::object());
    if (!timings_.is_object())
        timings_ = nlohmann::json::object();  // not ours: the steps time themselves again
}

void RunLedger::record(const std::string& step, double seconds, std::optional<int64_t> tokens) {
    nlohmann::json entry = {{"seconds", seconds}};
    if (tokens) entry["tokens"] = *tokens;
    timings_[step] = std::move(entry);
    write_json(out_ / "timings.json", timings_);
}

void RunLedger::say(const std::string& line) {
    fmt::print(stderr, "== {}\n", line);
}

}  // namespace hydra
