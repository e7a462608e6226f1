// Matrix-vector products straight on ggml-quantized weights (Q4_1, Q8_0) with f32 activations.
// Decoding one token streams every weight once, so it is memory-bound: reading the original
// 4.5/8.5-bit blocks instead of their f32 dequantization moves 4-7x fewer bytes. The weights are
// the same numbers (w = d*q + m exactly), so results differ from the f32 path only by rounding.
#pragma once

#include <cstdint>

#include "io/ggml_types.h"

namespace hydra::cpu {

// True when quant_gemv has a kernel for this type.
bool quant_gemv_supported(GgmlType type);

// y (N) = W (N, K) @ x (K). W: N rows of ggml_row_bytes(type, K) bytes; K a multiple of 32.
// `accumulate` adds into y.
void quant_gemv(float* y, GgmlType type, const uint8_t* W, const float* x, int64_t N, int64_t K,
                bool accumulate = false);

}  // namespace hydra::cpu
