// Plain-loop stand-in for core/gemm.cpp (hydra::gemm / hydra::gemv without OpenBLAS), linked only by
// tools/device_build.sh so the CUDA parity program can build its CPU reference on a GPU machine that has
// no BLAS. Same row-major semantics as core/gemm.h; correct, not fast: rows of C are split over OpenMP threads
// and that is all (the LM-head loss references of cuda_train_ops_parity take ~100 GFLOP through it).
// (Named .cc so the CMake bench glob, bench/*.cpp, does not take it for a program.)
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/gemm.h"

namespace hydra {

namespace {

template <typename T>
void gemm_t(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
            int64_t ldb, T beta, T* C, int64_t ldc) {
    // rows of C are independent: split them over the OpenMP threads (each row computed as before)
#pragma omp parallel if (M * N * K >= (int64_t(1) << 22))
    {
    std::vector<T> row(size_t(N > 0 ? N : 1));
    std::vector<T> bcol(size_t(K > 0 ? K : 1));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) row[size_t(j)] = 0;
        if (!tb) {
            // row_i += a_ik * B[k, :]
            for (int64_t k = 0; k < K; ++k) {
                const T a = ta ? A[k * lda + i] : A[i * lda + k];
                if (a == T(0)) continue;
                const T* b = B + k * ldb;
                for (int64_t j = 0; j < N; ++j) row[size_t(j)] += a * b[j];
            }
        } else {
            const T* a = A + i * lda;
            if (ta)
                for (int64_t k = 0; k < K; ++k) bcol[size_t(k)] = A[k * lda + i];
            for (int64_t j = 0; j < N; ++j) {
                const T* b = B + j * ldb;
                T s = 0;
                if (ta)
                    for (int64_t k = 0; k < K; ++k) s += bcol[size_t(k)] * b[k];
                else
                    for (int64_t k = 0; k < K; ++k) s += a[k] * b[k];
                row[size_t(j)] = s;
            }
        }
        T* c = C + i * ldc;
        if (beta == T(0))
            for (int64_t j = 0; j < N; ++j) c[j] = alpha * row[size_t(j)];
        else
            for (int64_t j = 0; j < N; ++j) c[j] = alpha * row[size_t(j)] + beta * c[j];
    }
    }  // omp parallel
}

template <typename T>
void gemv_t(int64_t M, int64_t K, T alpha, const T* A, const T* x, T beta, T* y) {
    for (int64_t i = 0; i < M; ++i) {
        T s = 0;
        for (int64_t k = 0; k < K; ++k) s += A[i * K + k] * x[k];
        y[i] = beta == T(0) ? alpha * s : alpha * s + beta * y[i];
    }
}

}  // namespace

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
    gemm_t(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
    gemm_t(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void gemv(int64_t M, int64_t K, float alpha, const float* A, const float* x, float beta, float* y) {
    gemv_t(M, K, alpha, A, x, beta, y);
}
void gemv(int64_t M, int64_t K, double alpha, const double* A, const double* x, double beta, double* y) {
    gemv_t(M, K, alpha, A, x, beta, y);
}

}  // namespace hydra
