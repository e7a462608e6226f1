// cuBLAS GEMMs for the GPU training step: a context (handle, workspace, stream), a row-major GEMM
// with bf16 operands and fp32 compute (CUBLAS_COMPUTE_32F, tensor cores), its strided-batched form,
// and the linear layer in HF layout (W (out, in) row-major) forward and backward.
//
// Row-major <-> column-major mapping. cuBLAS is column-major; a row-major matrix X (r, c) with
// leading dimension ld is the column-major matrix X^T (c, r) with the same ld. So the row-major
//   C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C
// is the column-major C^T (N, M) = alpha * op(B)^T @ op(A)^T + beta * C^T, i.e. one call
//   cublasGemmEx(opB, opA, N, M, K, alpha, B, ldb, A, lda, beta, C, ldc)
// with the same transpose flags (trans_a: A is stored (K, M) row-major; trans_b: B stored (N, K)).
// Leading dimensions are the row-major ones (elements between consecutive rows).
//
// Dtypes: A and B bf16; C bf16 (rounded once from the fp32 accumulator) or fp32. beta != 0 with a
// bf16 C reads C as bf16. Dimensions are checked (>= 0, ld >= row length, fits cuBLAS's int);
// M, N or K == 0 are allowed (K == 0: C = beta * C). Every call is checked (CUBLAS_CHECK) and
// asynchronous on the context's stream.
//
// Engine: cuBLASLt (cublasLtMatmul), one cached plan per shape / leading dimensions / pointer alignment.
// The first call of a shape asks cuBLASLt's heuristic for up to 8 algorithms and, unless the stream is
// capturing a CUDA graph or HYDRA_GEMM_TUNE=0, times each (1 + 3 runs, CUDA events) and keeps the
// fastest: at the training step's odd shapes (K = 576, N = 192 ...) the heuristic's first choice is not
// always the fastest. The timing runs write a scratch output (or, with beta == 0, the real output, which
// the call then overwrites), so the call's result is unchanged. HYDRA_GEMM_LOG=1 prints each choice.
// A process may pick other algorithms in another run (timing noise), so results can differ in the last
// bits between processes; HYDRA_GEMM_TUNE=0 makes the choice fixed. Where cuBLASLt has no algorithm
// (or K == 0) the call goes to cublasGemmEx.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// cuBLAS handle bound to one stream, with its own workspace (so kernels on that stream never share
// cuBLAS's default workspace with another stream). Not copyable; one per stream / thread.
class BlasContext {
public:
    explicit BlasContext(cudaStream_t stream = nullptr, size_t workspace_bytes = size_t(32) << 20);
    ~BlasContext();
    BlasContext(const BlasContext&) = delete;
    BlasContext& operator=(const BlasContext&) = delete;

    cublasHandle_t handle() const { return handle_; }
    cublasLtHandle_t lt() const { return lt_; }
    cudaStream_t stream() const { return stream_; }
    void set_stream(cudaStream_t stream);
    void* workspace() const { return workspace_; }
    size_t workspace_bytes() const { return workspace_bytes_; }

    struct Plans;  // the per-shape cuBLASLt plans (gemm.cu)
    Plans& plans() { return *plans_; }

  private:
    cublasHandle_t handle_ = nullptr;
    cublasLtHandle_t lt_ = nullptr;
    cudaStream_t stream_ = nullptr;
    void* workspace_ = nullptr;
    size_t workspace_bytes_ = 0;
    std::unique_ptr<Plans> plans_;
};

// Row-major C (M, N) = alpha * op(A) @ op(B) + beta * C (see the file comment).
void gemm_bf16(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_bf16(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, bf16* C, int64_t ldc);
// D (M, N) = alpha * op(A) @ op(B) + beta * C with fp32 C read from one buffer and D written to another
// (same leading dimension ldc; C == D is the call above): a residual add without copying the residual.
void gemm_bf16(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const bf16* A, int64_t lda, const bf16* B, int64_t ldb, float beta, const float* C, float* D,
               int64_t ldc);

// `batch` independent GEMMs of the same shape; matrix b of A starts at A + b * stride_a (elements),
// likewise B and C. Strides may be 0 (a shared operand).
void gemm_bf16_batched(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const bf16* A, int64_t lda, int64_t stride_a, const bf16* B, int64_t ldb, int64_t stride_b,
                       float beta, float* C, int64_t ldc, int64_t stride_c, int64_t batch);
void gemm_bf16_batched(BlasContext& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const bf16* A, int64_t lda, int64_t stride_a, const bf16* B, int64_t ldb, int64_t stride_b,
                       float beta, bf16* C, int64_t ldc, int64_t stride_c, int64_t batch);

// ---- Linear layer, HF layout: X (N, in), W (out, in), Y (N, out), all row-major contiguous ----
// (no bias: the models here have none on the GEMM path; ops/cpu/linear.h semantics otherwise)

// Y (N, out) = X @ W^T, bf16 Y OVERWRITTEN.
void linear_forward(BlasContext& ctx, const bf16* X, const bf16* W, int64_t N, int64_t in, int64_t out, bf16* Y);
// Y (N, out) = beta * Y + X @ W^T in fp32: beta = 1 adds into the fp32 residual stream, 0 overwrites.
void linear_forward(BlasContext& ctx, const bf16* X, const bf16* W, int64_t N, int64_t in, int64_t out, float* Y,
                    float beta);

// dX (N, in) = dY (N, out) @ W: bf16 dX OVERWRITTEN.
void linear_backward_dx(BlasContext& ctx, const bf16* dY, const bf16* W, int64_t N, int64_t in, int64_t out,
                        bf16* dX);
// dX (N, in) = beta * dX + dY @ W in fp32 (beta = 1: ACCUMULATE, 0: overwrite).
void linear_backward_dx(BlasContext& ctx, const bf16* dY, const bf16* W, int64_t N, int64_t in, int64_t out,
                        float* dX, float beta);
// dW (out, in) += dY^T (out, N) @ X (N, in), fp32 ACCUMULATED (the gradient arena's slice of W).
void linear_backward_dw(BlasContext& ctx, const bf16* dY, const bf16* X, int64_t N, int64_t in, int64_t out,
                        float* dW);

}  // namespace hydra::cuda
