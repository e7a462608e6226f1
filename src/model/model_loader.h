// load_model: opens whatever a user passes as MODEL (a .gguf file or a Hugging Face directory with
// config.json + safetensors + tokenizer.json) and returns the weights, the tokenizer vocabulary and
// a description of where they came from.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "model/llama_model.h"
#include "tokenizer/tokenizer_vocab.h"

namespace hydra {

struct LoadedModel {
    std::unique_ptr<LlamaModel> model;
    std::optional<TokenizerVocab> vocab;  // absent when the source ships no tokenizer
    std::string source;                   // the path given
    std::string format;                   // "gguf" | "hf-safetensors"
    std::map<std::string, int> tensor_types;  // source tensor count per storage type
};

// Throws hydra::Error with a message naming the path and what is wrong or missing.
LoadedModel load_model(const std::string& path);

// Only the tokenizer of MODEL (GGUF metadata or tokenizer.json), without reading any weights.
std::optional<TokenizerVocab> load_vocab(const std::string& path);

}  // namespace hydra
