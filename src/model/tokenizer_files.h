// tokenizer_files_of: what a model made from another one (a conversion, a pipeline variant) carries so
// that it loads alone in every command (generate, serve, eval, the next stage): the tokenizer and chat
// template copied from a model directory, or written from a GGUF file's vocabulary.
#pragma once

#include <map>
#include <string>

#include "model/model_loader.h"

namespace hydra {

// File name -> contents: tokenizer.json, tokenizer_config.json and chat_template.jinja where `source_path`
// (the model directory `source` was loaded from) has them; for a GGUF source, tokenizer.json and
// tokenizer_config.json written from its vocabulary. Empty when the source has no tokenizer.
std::map<std::string, std::string> tokenizer_files_of(const std::string& source_path,
                                                      const LoadedModel& source);

}  // namespace hydra
