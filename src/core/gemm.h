// Dense f32 matrix products on the CPU through OpenBLAS (row-major everywhere).
#pragma once

#include <cstdint>

namespace hydra {

// C (M, N) = alpha * op(A) * op(B) + beta * C, row-major, with op = transpose when the flag is set.
// A is (M, K) or, transposed, (K, M); B is (K, N) or, transposed, (N, K).
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The linear layer: out (T, N) = x (T, K) @ W^T with W (N, K) in PyTorch [out, in] layout;
// `accumulate` adds into out instead of overwriting it.
void linear_f32(float* out, const float* x, const float* W, int64_t T, int64_t K, int64_t N, bool accumulate = false);

}  // namespace hydra
