// Model directory writer (see model_directory.h).
#include "model/model_directory.h"

#include <vector>

#include "io/atomic_dir.h"
#include "model/hf_config.h"
#include "io/safetensors.h"

namespace hydra {

void save_model_directory(const std::string& dir, const LlamaModel& model, const nlohmann::json& hydra_extra,
                          const std::map<std::string, std::string>& files) {
    write_directory_atomically(dir, "model directory", [&](const std::filesystem::path& tmp) {
        const ParamArena& params = model.params();
        std::vector<SafetensorsEntry> weights;
        for (size_t i = 0; i < params.entries().size(); ++i) weights.push_back({params.entries()[i].name, params.get(i)});
        write_safetensors((tmp / "model.safetensors").string(), weights, {{"format", "pt"}});
        nlohmann::json config = hf_config_to_json(model.config());
        nlohmann::json hydra = hydra_extra.is_object() ? hydra_extra : nlohmann::json::object();
        hydra["plan"] = model.plan().to_json();
        config["hydra"] = hydra;
        write_text_file(tmp / "config.json", config.dump(2) + "\n");
        for (const auto& [name, content] : files) write_text_file(tmp / name, content);
    });
}

}  // namespace hydra
