// Matrix-vector products on ggml-quantized weights (Q4_1, Q8_0) with 8-bit activations and integer
// dot products, as llama.cpp decodes. The activation row is quantized once per input to blocks of 32
// int8 values with one float scale (Q8Activations) and shared by every GEMV that reads that input
// (q/k/v, gate/up). A block then contributes
//   Q8_0: d_w * d_x * sum(q_w q_x)
//   Q4_1: d_w * d_x * sum(q_w q_x) + m_w * s_x          (s_x = d_x * sum(q_x))
// i.e. the exact dot of the dequantized weights with the dequantized activations, the integer sums
// being exact. The f32-activation kernels (quant_gemv.h) remain the reference.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "io/ggml_types.h"

namespace hydra::cpu {

// A row of K activations (K a multiple of 32) as K/32 blocks: x[k] ~= d[k/32] * q[k].
struct Q8Activations {
    int64_t K = 0;
    std::vector<int8_t> q;  // (K), in [-127, 127]
    std::vector<float> d;   // (K/32) scale: max |x| of the block / 127
    std::vector<float> s;   // (K/32) d * sum of the block's q (Q4_1's min term)
};

// Quantizes x (K) into `out` (buffers grow only, so a reused object allocates nothing).
void quantize_activations_q8(Q8Activations& out, const float* x, int64_t K);

// One GEMV of a batch that reads the same activations: y (N) = W (N, K) @ x (+ bias (N) when given).
struct Q8GemvTask {
    float* y = nullptr;
    GgmlType type = GgmlType::Q4_1;
    const uint8_t* W = nullptr;  // N rows of ggml_row_bytes(type, K) bytes
    int64_t N = 0;
    const float* bias = nullptr;
};

// Runs all tasks in one parallel region (rows of all tasks split evenly over the threads), so that
// the projections of one input cost one fork/join.
void quant_gemv_q8(std::span<const Q8GemvTask> tasks, const Q8Activations& x);

// y (N) = W (N, K) @ x, one task.
void quant_gemv_q8(float* y, GgmlType type, const uint8_t* W, const Q8Activations& x, int64_t N);

namespace detail {
// Rows [r0, r1) of one weight matrix against x, by the portable scalar code or by the widest SIMD
// path this build targets (AVX512-VNNI, AVX-VNNI or AVX2; the scalar code when none). Both compute the
// same exact integer block sums; only the float accumulation of the scaled sums is ordered differently.
void q8_rows_scalar(float* y, GgmlType type, const uint8_t* W, const Q8Activations& x, int64_t r0,
                    int64_t r1);
void q8_rows_simd(float* y, GgmlType type, const uint8_t* W, const Q8Activations& x, int64_t r0, int64_t r1);
// Name of the path q8_rows_simd takes in this build ("avx512vnni", "avxvnni", "avx2", "scalar").
const char* q8_simd_path();
}  // namespace detail

}  // namespace hydra::cpu
