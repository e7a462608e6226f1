// Reference (plain, unoptimised) quantizers from f32 to ggml block formats, written from the formulas
// in shared/research/engines.md §2.4. Used by tests for round trips and for re-quantization
// experiments. Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 follow the classic "ref" rules (absmax or min/max per block);
// the K-quants use a simple valid scale choice (sub-block scales rounded up so every value is in
// range), not llama.cpp's error-minimising search, so their error is somewhat higher.
#pragma once

#include <cstdint>
#include <vector>

#include "io/ggml_types.h"

namespace hydra {

// Types quantize_row_ref accepts: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
bool can_quantize_ref(GgmlType type);

// Quantizes n floats (a multiple of the block size) into ggml_row_bytes(type, n) bytes at dst.
void quantize_row_ref(GgmlType type, const float* src, void* dst, int64_t n);

// Convenience: returns the bytes.
std::vector<uint8_t> quantize_ref(GgmlType type, const float* src, int64_t n);

}  // namespace hydra
