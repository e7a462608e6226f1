// Import of llama-family GGUF files (llama, qwen2, qwen3 architectures) into a LlamaModel:
// hyper-parameters from `<arch>.*` metadata, every tensor dequantized to f32, GGUF names mapped to
// HF names, and llama's q/k row permutation undone so RoPE is NEOX for every source.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "io/gguf.h"
#include "model/llama_model.h"

namespace hydra {

// Reads the ModelConfig from GGUF metadata. Throws naming the file and the missing/bad key.
ModelConfig config_from_gguf(const GgufFile& gguf);

// Loads all weights (dequantized). `type_histogram`, if given, receives tensor counts per ggml type.
// With `keep_quantized`, matrices in a type quant_gemv supports also keep their original blocks for
// decode (LlamaModel::attach_quantized).
std::unique_ptr<LlamaModel> load_llama_from_gguf(const GgufFile& gguf,
                                                 std::map<std::string, int>* type_histogram = nullptr,
                                                 bool keep_quantized = true);

// Undo llama.cpp's q/k permutation in place on an [n_head * Dh, cols] row-major matrix (or a bias
// with cols == 1): HF row j*(Dh/2)+i = GGUF row 2i+j within each head (engines.md §2.7).
void unpermute_qk_rows(float* rows, int64_t n_head, int64_t head_dim, int64_t cols);

}  // namespace hydra
