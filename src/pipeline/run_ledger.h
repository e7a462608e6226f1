// RunLedger: what a resumable run (`hydra pipeline`, `hydra demo`) keeps in its output directory besides
// its steps' results: the directory itself, the configuration as run (OUT/<name>_config.json) and the
// wall time of each step (OUT/timings.json: step -> {seconds[, tokens]}), rewritten after every step so a
// resumed run still reports the steps it skips. Its step lines go to stderr as "== ...".
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace hydra {

class RunLedger {
  public:
    // Creates `out_dir`, writes `config` to OUT/<config_name>_config.json and reads the timings of an
    // earlier run there (none when missing or unreadable).
    RunLedger(const std::filesystem::path& out_dir, const std::string& config_name,
              const nlohmann::json& config);

    const std::filesystem::path& out() const { return out_; }
    // Records a step's wall time (and the tokens it processed, where that means something).
    void record(const std::string& step, double seconds, std::optional<int64_t> tokens = std::nullopt);
    bool has(const std::string& step) const { return timings_.contains(step); }
    const nlohmann::json& timings() const { return timings_; }
    // One progress line of the run on stderr.
    static void say(const std::string& line);

  private:
    std::filesystem::path out_;
    nlohmann::json timings_;
};

}  // namespace hydra
