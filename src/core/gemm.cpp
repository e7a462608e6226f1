// OpenBLAS-backed GEMM/GEMV wrappers (see gemm.h).
#include "core/gemm.h"

#include <cblas.h>

#include <atomic>
#include <climits>
#include <vector>

#include "core/error.h"
#include "core/half.h"

namespace hydra {

namespace {
// BLAS takes 32-bit sizes (blasint); larger matrices would silently wrap.
void check_blas_dims(int64_t m, int64_t n, int64_t k) {
    HYDRA_ASSERT(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX,
                 "GEMM size ({}, {}, {}) exceeds the BLAS int range", m, n, k);
}
CBLAS_TRANSPOSE op(bool t) {
    return t ? CblasTrans : CblasNoTrans;
}

std::atomic<bool> g_bf16_rounding{false};

// rows x cols of a row-major matrix with leading dimension ld, rounded to bf16, packed (leading dim cols)
std::vector<float> rounded_bf16(const float* a, int64_t rows, int64_t cols, int64_t ld) {
    std::vector<float> out(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
            out[size_t(r * cols + c)] = bf16_to_f32(f32_to_bf16(a[r * ld + c]));
    return out;
}

// y (rows, cols; leading dimension ld) rounded to bf16 in place
void round_bf16(float* y, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) y[r * ld + c] = bf16_to_f32(f32_to_bf16(y[r * ld + c]));
}
}  // namespace

void set_gemm_bf16_rounding(bool on) {
    g_bf16_rounding.store(on);
}
bool gemm_bf16_rounding() {
    return g_bf16_rounding.load();
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    check_blas_dims(M, N, K);
    if (g_bf16_rounding.load(std::memory_order_relaxed) && M > 0 && N > 0 && K > 0) {
        // op(A) is stored (ta ? K : M) x (ta ? M : K), op(B) (tb ? N : K) x (tb ? K : N)
        const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
        const std::vector<float> a16 = rounded_bf16(A, ar, ac, lda), b16 = rounded_bf16(B, br, bc, ldb);
        cblas_sgemm(CblasRowMajor, op(ta), op(tb), blasint(M), blasint(N), blasint(K), alpha, a16.data(),
                    blasint(ac), b16.data(), blasint(bc), beta, C, blasint(ldc));
        if (beta == 0.f) round_bf16(C, M, N, ldc);
        return;
    }
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
    if (g_bf16_rounding.load(std::memory_order_relaxed) && M > 0 && K > 0) {
        const std::vector<float> a16 = rounded_bf16(A, M, K, K), x16 = rounded_bf16(x, 1, K, K);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(M), blasint(K), alpha, a16.data(), blasint(K),
                    x16.data(), 1, beta, y, 1);
        if (beta == 0.f) round_bf16(y, 1, M, M);
        return;
    }
    cblas_sgemv(CblasRowMajor, CblasNoTrans, blasint(M), blasint(K), alpha, A, blasint(K), x, 1, beta, y, 1);
}

void gemv(int64_t M, int64_t K, double alpha, const double* A, const double* x, double beta, double* y) {
    check_blas_dims(M, 1, K);
    cblas_dgemv(CblasRowMajor, CblasNoTrans, blasint(M), blasint(K), alpha, A, blasint(K), x, 1, beta, y, 1);
}

}  // namespace hydra
