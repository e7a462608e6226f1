// cuBLAS bf16 GEMMs (fp32 compute) and the HF-layout linear layer on them (see gemm.h for the
// row-major <-> column-major mapping).
#include "ops/cuda/gemm.h"

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::cuda {

BlasContext::BlasContext(cudaStream_t stream, size_t workspace_bytes)
    : stream_(stream), workspace_bytes_(workspace_bytes) {
    CUBLAS_CHECK(cublasCreate(&handle_));
    CUBLAS_CHECK(cublasSetStream(handle_, stream_));
    // Pointer mode host (alpha/beta from the host), default math (bf16 inputs go to tensor cores).
    CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    if (workspace_bytes_ > 0) {
        CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
        CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, workspace_bytes_));
    }
}

BlasContext::~BlasContext() {
    if (handle_) cublasDestroy(handle_);
    if (workspace_) cudaFree(workspace_);
}

void BlasContext::set_stream(cudaStream_t stream) {
    stream_ = stream;
    CUBLAS_CHECK(cublasSetStream(handle_, stream_));
    // setting the stream resets cuBLAS's workspace to its default one: install ours again
    if (workspace_) CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, workspace_bytes_));
}

namespace {

void check_dims(const char* what, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                int64_t ldc, int64_t batch) {
    HYDRA_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, "{}: negative dimension (M={}, N={}, K={}, batch={})", what,
                M, N, K, batch);
    HYDRA_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && batch <= INT_MAX && lda <= INT_MAX &&
                    ldb <= INT_MAX && ldc <= INT_MAX,
                "{}: dimension beyond cuBLAS's int range (M={}, N={}, K={}, lda={}, ldb={}, ldc={})", what, M, N, K,
                lda, ldb, ldc);
    // row-major: A is (M, K) or, transposed, stored (K, M); B is (K, N) or stored (N, K)
    const int64_t a_row = ta ? M : K, b_row = tb ? K : N;
    HYDRA_CHECK(lda >= std::max<int64_t>(a_row, 1) && ldb >= std::max<int64_t>(b_row, 1) &&
                    ldc >= std::max<int64_t>(N, 1),
                "{}: leading dimension too small (lda={} < {}, ldb={} < {} or ldc={} < {})", what, lda, a_row, ldb,
                b_row, ldc, N);
}

void gemm_impl(BlasContext& ctx, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const bf16* A,
               int64_t lda, int64_t sa, const bf16* B, int64_t ldb, int64_t sb, float beta, void* C,
               cudaDataType_t ctype, int64_t ldc, int64_t sc, int64_t batch, const char* what) {
    check_dims(what, ta, tb, M, N, K, lda, ldb, ldc, batch);
    if (M == 0 || N == 0 || batch == 0) return;
    // column-major: C^T (N, M) = op(B)^T (N, K) @ op(A)^T (K, M)
    const cublasOperation_t opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1) {
        CUBLAS_CHECK(cublasGemmEx(ctx.handle(), opB, opA, int(N), int(M), int(K), &alpha, B, CUDA_R_16BF, int(ldb), A,
                                  CUDA_R_16BF, int(lda), &beta, C, ctype, int(ldc), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    } else {
        CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.handle(), opB, opA, int(N), int(M), int(K), &alpha, B,
                                                CUDA_R_16BF, int(ldb), sb, A, CUDA_R_16BF, int(lda), sa, &beta, C,
                                                ctype, int(ldc), sc, int(batch), CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT));
    }
}

}  // namespace

void gemm_bf16(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, CUDA_R_32F, ldc, 0, 1,
              "gemm_bf16");
}

void gemm_bf16(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, bf16* C, int64_t ldc) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, CUDA_R_16BF, ldc, 0, 1,
              "gemm_bf16");
}

void gemm_bf16_batched(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const bf16* A, int64_t lda, int64_t stride_a, const bf16* B, int64_t ldb, int64_t stride_b,
                       float beta, float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, CUDA_R_32F, ldc,
              stride_c, batch, "gemm_bf16_batched");
}

void gemm_bf16_batched(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const bf16* A, int64_t lda, int64_t stride_a, const bf16* B, int64_t ldb, int64_t stride_b,
                       float beta, bf16* C, int64_t ldc, int64_t stride_c, int64_t batch) {
    gemm_impl(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, CUDA_R_16BF, ldc,
              stride_c, batch, "gemm_bf16_batched");
}

// ---- linear ------------------------------------------------------------------------------------------

void linear_forward(BlasContext& ctx, const bf16* X, const bf16* W, int64_t N, int64_t in, int64_t out, bf16* Y) {
    // Y (N, out) = X (N, in) @ W^T, W stored (out, in)
    gemm_bf16(ctx, false, true, N, out, in, 1.0f, X, in, W, in, 0.0f, Y, out);
}

void linear_forward(BlasContext& ctx, const bf16* X, const bf16* W, int64_t N, int64_t in, int64_t out, float* Y,
                    float beta) {
    gemm_bf16(ctx, false, true, N, out, in, 1.0f, X, in, W, in, beta, Y, out);
}

void linear_backward_dx(BlasContext& ctx, const bf16* dY, const bf16* W, int64_t N, int64_t in, int64_t out,
                        bf16* dX) {
    // dX (N, in) = dY (N, out) @ W (out, in)
    gemm_bf16(ctx, false, false, N, in, out, 1.0f, dY, out, W, in, 0.0f, dX, in);
}

void linear_backward_dx(BlasContext& ctx, const bf16* dY, const bf16* W, int64_t N, int64_t in, int64_t out,
                        float* dX, float beta) {
    gemm_bf16(ctx, false, false, N, in, out, 1.0f, dY, out, W, in, beta, dX, in);
}

void linear_backward_dw(BlasContext& ctx, const bf16* dY, const bf16* X, int64_t N, int64_t in, int64_t out,
                        float* dW) {
    // dW (out, in) += dY^T (out, N) @ X (N, in); dY stored (N, out) = transposed operand
    gemm_bf16(ctx, true, false, out, in, N, 1.0f, dY, out, X, in, 1.0f, dW, in);
}

}  // namespace hydra::cuda
