// Model directories written by hydra (converted hybrids, exported teachers): model.safetensors under
// HF names, config.json (HF config + a "hydra" object holding the HybridPlan and provenance) and the
// tokenizer files, written atomically. load_model reads them back (model/model_loader.h).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "model/llama_model.h"

namespace hydra {

class SafetensorsShards;

// `hydra_extra` is merged into config.json["hydra"] next to "plan"; `files` (name -> content, e.g.
// tokenizer.json) are written alongside. Throws hydra::Error naming `dir`; an existing directory is
// replaced only once the new one is complete.
void save_model_directory(const std::string& dir, const LlamaModel& model, const nlohmann::json& hydra_extra,
                          const std::map<std::string, std::string>& files = {});

// Refuses (hydra::Error naming `where`) a config whose sizes claim more parameters than the weight
// files hold, before anything is allocated for it: every plan keeps the embedding, each layer's
// output projection and SwiGLU MLP, so those alone bound the count from below.
void check_weights_cover_config(const ModelConfig& config, const SafetensorsShards& weights,
                                const std::string& where);

}  // namespace hydra
