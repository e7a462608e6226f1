// OpenBLAS-backed GEMM/GEMV wrappers (see gemm.h).
#include "core/gemm.h"

#include <cblas.h>

#include <climits>

#include "core/error.h"

namespace hydra {

namespace {
// BLAS takes 32-bit sizes (blasint); larger matrices would silently wrap.
void check_blas_dims(int64_t m, int64_t n, int64_t k) {
    HYDRA_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "GEMM size ({}, {}, {}) exceeds the BLAS int range",
                 m, n, k);
}
CBLAS_TRANSPOSE op(bool t) { return t ? CblasTrans : CblasNoTrans; }
}  // namespace

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    check_blas_dims(M, N, K);
    cblas_sgemm(CblasRowMajor, op(ta), op(tb), blasint(M), blasint(N), blasint(K), alpha, A, blasint(lda), B,
                blasint(ldb), beta, C, blasint(ldc));
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
    check_blas_dims(M, N, K);
    cblas_dgemm(CblasRowMajor, op(ta), op(tb), blasint(M), blasint(N), blasint(K), alpha, A, blasint(lda), B,
                blasint(ldb), beta, C, blasint(ldc));
}

void gemv(int64_t M, int64_t K, float alpha, const float* A, const float* x, float beta, float* y) {
    check_blas_dims(M, 1, K);
    cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(M), blasint(K), alpha, A, blasint(K), x, 1, beta, y, 1);
}

void gemv(int64_t M, int64_t K, double alpha, const double* A, const double* x, double beta, double* y) {
    check_blas_dims(M, 1, K);
    cblas_dgemv(CblasRowMajor, CblasNoTrans, blasint(M), blasint(K), alpha, A, blasint(K), x, 1, beta, y, 1);
}

}  // namespace hydra
