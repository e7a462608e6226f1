// Model directory writer (see model_directory.h).
#include "model/model_directory.h"

#include <vector>

#include "io/atomic_dir.h"
#include "model/hf_config.h"
#include "io/safetensors.h"

namespace hydra {

void save_model_directory(const std::string& dir, const LlamaModel& model, const nlohmann::json& hydra_extra,
                          const std::map<std::string, std::string>& files) {
    write_directory_atomically(dir, model_dir_kind(), [&](const std::filesystem::path& tmp) {
        const ParamArena& params = model.params();
        std::vector<SafetensorsEntry> weights;
        for (size_t i = 0; i < params.entries().size(); ++i)
            weights.push_back({params.entries()[i].name, params.get(i)});
        write_safetensors((tmp / "model.safetensors").string(), weights, {{"format", "pt"}});
        nlohmann::json config = hf_config_to_json(model.config());
        nlohmann::json hydra = hydra_extra.is_object() ? hydra_extra : nlohmann::json::object();
        hydra["plan"] = model.plan().to_json();
        config["hydra"] = hydra;
        write_text_file(tmp / "config.json", config.dump(2) + "\n");
        for (const auto& [name, content] : files) write_text_file(tmp / name, content);
    });
}

void check_weights_cover_config(const ModelConfig& c, const SafetensorsShards& weights,
                                const std::string& where) {
    // In double: a hostile config's products overflow int64.
    const double C = double(c.hidden_size), L = double(c.num_layers);
    const double claimed = double(c.vocab_size) * C + L * (3.0 * C * double(c.intermediate_size) +
                                                           double(c.num_heads) * double(c.head_dim) * C);
    double held = 0;
    for (const std::string& name : weights.names()) held += double(weights.tensor(name).numel);
    HYDRA_CHECK(
        claimed <= held,
        "{}: config.json describes a model of at least {:.0f} parameters (hidden_size {}, {} layers, "
        "intermediate_size {}, vocab_size {}), but the weight files hold only {:.0f} values; the config "
        "does not belong to these weights",
        where, claimed, c.hidden_size, c.num_layers, c.intermediate_size, c.vocab_size, held);
}

}  // namespace hydra
