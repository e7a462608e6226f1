// Quantized copies of a model's linear weights for decoding on the CPU: a model read from safetensors (a
// converted or trained hybrid) has f32 weights only, and a single-token step streams every one of them, 4
// bytes a weight. Q8_0 (ggml's block of 32 int8 with one f16 scale, 34 bytes) is a quarter of that, and the
// decoder layer's single-row products then take the integer-dot GEMVs (ops/cpu/quant_gemv_q8.h), as a
// quantized GGUF teacher's do. Inference only: the copies do not follow later changes of the f32 weights.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "model/llama_model.h"

namespace hydra {

// W (rows, cols) f32, cols a multiple of 32, as Q8_0 rows: per block of 32, d = max |w| / 127 (stored as
// f16), q = round(w / d) in [-127, 127]; a block of zeros gets d = 0. Throws hydra::Error naming `what` on
// another shape or a non-finite weight.
QuantizedWeight quantize_q8_0(const Tensor& W, const std::string& what);

// Attaches a Q8_0 copy to every linear weight of `model` that has none (FA and LA projections, MLP, LM head)
// and whose input width is a multiple of 32. Returns how many it attached.
int64_t quantize_linear_weights(LlamaModel& model);

}  // namespace hydra
