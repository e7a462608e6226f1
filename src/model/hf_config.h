// Import of a Hugging Face config.json (model_type llama, qwen2, qwen3) into a ModelConfig, and the
// inverse. In model/ (not io/) because it produces and reads model/ types; io/ stays below model/.
// Fields and defaults follow research/engines.md §4; RoPE scaling (rope_scaling / rope_parameters) as
// model/rope_scaling.h reads it; anything we cannot run faithfully (longrope and other RoPE types,
// sliding windows, MLP biases, activations other than SiLU) is an error, not a guess.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace hydra {

// Reads and validates `config_json_path`. Errors name the file, the key and what was expected.
ModelConfig load_hf_config(const std::string& config_json_path);

// Same, from JSON text; `source` names it in errors and its parent directory names the model.
ModelConfig parse_hf_config(const std::string& json_text, const std::string& source);

// The HF config.json object describing `config` (model_type llama/qwen2/qwen3, as transformers
// writes it), so our checkpoints load in transformers and in load_hf_config alike.
nlohmann::json hf_config_to_json(const ModelConfig& config);

}  // namespace hydra
