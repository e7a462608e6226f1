// Forward pass of the full-attention llama-family decoder on the CPU in fp32, with a KV cache and
// named taps. Prefill and decode are the same call: T new tokens at positions cache.pos() onward.
#pragma once

#include <cstdint>
#include <span>

#include "core/tensor.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "model/taps.h"

namespace hydra {

struct ForwardOptions {
    const Taps* taps = nullptr;  // optional read/overwrite hooks (see taps.h)
    // Single-token steps use the quantized weight copies when the model has them (same weights,
    // fewer bytes; results differ from the f32 path by rounding only). False forces f32 everywhere.
    bool quantized_decode = true;
    // With quantized_decode: quantize the activations of those steps to 8 bits per 32-value block and
    // use integer dot products (ops/cpu/quant_gemv_q8.h), as llama.cpp does: faster, with an error of
    // the order of the activation rounding (~0.2% per block). False keeps the f32 activations (the
    // reference: logits equal to the f32 path up to float rounding).
    bool q8_activations = true;
};

// Runs tokens (T) through the model, appending their keys/values to `cache`, and returns the final
// hidden states after the last RMSNorm: (T, C). Token ids are checked against the vocabulary.
Tensor forward_hidden(const LlamaModel& model, std::span<const int32_t> tokens, KVCache& cache,
                      const ForwardOptions& options = {});

// logits (N, V) = hidden (N, C) @ lm_head^T (quantized lm_head for N == 1 when allowed, with 8-bit
// activations when q8_activations).
Tensor compute_logits(const LlamaModel& model, const Tensor& hidden, bool quantized_decode = false,
                      bool q8_activations = false);

// Convenience: forward_hidden then the logits of the last position only: (V).
Tensor forward_last_logits(const LlamaModel& model, std::span<const int32_t> tokens, KVCache& cache,
                           const ForwardOptions& options = {});

}  // namespace hydra
