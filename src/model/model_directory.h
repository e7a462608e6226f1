// Model directories written by hydra (converted hybrids, exported teachers): model.safetensors under
// HF names, config.json (HF config + a "hydra" object holding the HybridPlan and provenance) and the
// tokenizer files, written atomically. load_model reads them back (model/model_loader.h).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "model/llama_model.h"

namespace hydra {

// `hydra_extra` is merged into config.json["hydra"] next to "plan"; `files` (name -> content, e.g.
// tokenizer.json) are written alongside. Throws hydra::Error naming `dir`; an existing directory is
// replaced only once the new one is complete.
void save_model_directory(const std::string& dir, const LlamaModel& model, const nlohmann::json& hydra_extra,
                          const std::map<std::string, std::string>& files = {});

}  // namespace hydra
