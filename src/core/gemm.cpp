// OpenBLAS-backed GEMM wrappers (see gemm.h).
#include "core/gemm.h"

#include <cblas.h>

namespace hydra {

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(M),
                blasint(N), blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
}

void linear_f32(float* out, const float* x, const float* W, int64_t T, int64_t K, int64_t N, bool accumulate) {
    if (T == 1) {  // decode: a matrix-vector product streams W once
        cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(N), blasint(K), 1.0f, W, blasint(K), x, 1,
                    accumulate ? 1.0f : 0.0f, out, 1);
        return;
    }
    gemm_f32(false, true, T, N, K, 1.0f, x, K, W, K, accumulate ? 1.0f : 0.0f, out, N);
}

}  // namespace hydra
