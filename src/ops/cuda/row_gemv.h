// The few-row products of decode: Y (M, N) = alpha * X (M, K) @ W (N, K)^T + beta * C (M, N) for M <= 8
// (one sequence, or a small batch of them), bf16 W (HF layout, row-major, leading dimension ldw) and X,
// fp32 accumulation, fp32 or bf16 Y. cuBLASLt runs such a GEMM on a handful of CTAs, which leaves most SMs
// idle on a latency-bound decode step; here every warp takes two weight rows and issues all their loads
// before any arithmetic, so the matrix streams through all SMs in about one memory round trip, and each row
// of X is summed against them in the same order whatever M is: a sequence's logits do not depend on how many
// others (up to 8) share its decode step.
//
// gemm.h's gemm_bf16 calls row_gemv first and falls back to cuBLASLt when it declines: M above
// kRowGemvMaxRows, a batch, A transposed or B not (the product must be X @ W^T), K not a multiple of 8 or
// above kRowGemvMaxK, X or W not 16-byte aligned, ldx (M > 1) or ldw not a multiple of 8, or
// HYDRA_ROW_GEMV=0. The fp32 sums are ordered differently from cuBLAS's, so results differ from it in the
// last bits (the same every run).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>

namespace hydra::cuda {

constexpr int64_t kRowGemvMaxK = 2048;  // 8 16-byte loads a lane for each of two rows
constexpr int64_t kRowGemvMaxRows = 4;  // rows of X: decode buckets 1, 2, 4 (at 8 cuBLASLt is faster)

// Whether row_gemv takes this product (see the file comment). c_type / d_type: CUDA_R_32F or CUDA_R_16BF.
bool row_gemv_applies(bool trans_a, bool trans_b, int64_t M, int64_t K, int64_t batch, const void* x,
                      int64_t ldx, const void* W, int64_t ldw);

// D (M, N; leading dimension ldc) = alpha * X @ W^T + beta * C (C: the same layout, read only when
// beta != 0; C may be D). Asynchronous on stream.
void row_gemv(cudaStream_t stream, int64_t M, int64_t N, int64_t K, float alpha, const __nv_bfloat16* x,
              int64_t ldx, const __nv_bfloat16* W, int64_t ldw, float beta, const void* C, void* D,
              int64_t ldc, cudaDataType_t type);

}  // namespace hydra::cuda
