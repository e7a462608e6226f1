// Where tests find the default model and the prose cache (set up by tools/setup.sh).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace hydra::test {

inline std::string default_model_path() {
    if (const char* env = std::getenv("HYDRA_MODEL"); env && *env) return env;
    return std::string(HYDRA_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

inline std::string test_data(const std::string& name) { return std::string(HYDRA_SOURCE_DIR) + "/tests/data/" + name; }

inline bool default_model_present() { return std::filesystem::exists(default_model_path()); }

}  // namespace hydra::test
