// Loading MODEL for a subcommand with a one-line report on stderr (format, size, time).
#pragma once

#include <string>

#include "model/model_loader.h"

namespace hydra::cli {

// Loads the model; with `verbose`, prints e.g. "loaded SmolLM2 (gguf, 134.5M params) in 0.9 s".
LoadedModel load_model_reported(const std::string& path, bool verbose = true);

}  // namespace hydra::cli
