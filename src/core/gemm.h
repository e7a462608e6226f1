// Dense matrix products on the CPU through OpenBLAS (row-major everywhere): the one BLAS wrapper
// the project uses. float -> sgemm/sgemv, double -> dgemm/dgemv (gradient checks).
#pragma once

#include <cstdint>

namespace hydra {

// C (M, N) = alpha * op(A) * op(B) + beta * C, with op = transpose when the flag is set.
// A is (M, K) or, transposed, (K, M); B is (K, N) or, transposed, (N, K). Sizes must fit BLAS ints.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double* A,
          int64_t lda, const double* B, int64_t ldb, double beta, double* C, int64_t ldc);

// bf16 storage, emulated for reference tolerances: while on, the float gemm / gemv round their operands
// (A, B, x) to bf16 before the product and, when the product overwrites its output (beta == 0), the output
// after it (the accumulation stays fp32; an accumulating product, beta != 0, keeps an fp32 output), as the
// GPU's bf16 GEMMs read their operands and store most fresh products. Process-wide (OpenMP workers call gemm
// too); the GPU training-step parity test switches it on to measure how far bf16 storage moves the CPU's own
// gradients (its tolerance). Off by default.
void set_gemm_bf16_rounding(bool on);
bool gemm_bf16_rounding();

// y (M) = alpha * A (M, K) @ x (K) + beta * y: a matrix-vector product streams A once (decode).
void gemv(int64_t M, int64_t K, float alpha, const float* A, const float* x, float beta, float* y);
void gemv(int64_t M, int64_t K, double alpha, const double* A, const double* x, double beta, double* y);

}  // namespace hydra
