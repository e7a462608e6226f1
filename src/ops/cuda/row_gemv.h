// The single-row product of decode: y (N) = alpha * W (N, K) @ x (K) + beta * c (N), bf16 W (HF layout,
// row-major, leading dimension ldw) and x, fp32 accumulation, fp32 or bf16 y. cuBLASLt runs such a GEMM
// (M = 1) on a handful of CTAs, which leaves most SMs idle on a latency-bound decode step; here every warp
// takes two rows and issues all its weight loads before any arithmetic, so the matrix streams through all
// SMs in about one memory round trip.
//
// gemm.h's gemm_bf16 calls row_gemv first and falls back to cuBLASLt when it declines: M != 1, a batch,
// A transposed or B not (the product must be x @ W^T), K not a multiple of 8 or above kRowGemvMaxK,
// x or W not 16-byte aligned, ldw not a multiple of 8, or HYDRA_ROW_GEMV=0. The fp32 sums are ordered
// differently from cuBLAS's, so results differ from it in the last bits (the same every run).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>

namespace hydra::cuda {

constexpr int64_t kRowGemvMaxK = 2048;  // 8 16-byte loads a lane for each of two rows

// Whether row_gemv takes this product (see the file comment). c_type / d_type: CUDA_R_32F or CUDA_R_16BF.
bool row_gemv_applies(bool trans_a, bool trans_b, int64_t M, int64_t K, int64_t batch, const void* x,
                      const void* W, int64_t ldw);

// y = D[0 .. N) = alpha * W @ x + beta * C (C read only when beta != 0; C may be D). Asynchronous on stream.
void row_gemv(cudaStream_t stream, int64_t N, int64_t K, float alpha, const __nv_bfloat16* x,
              const __nv_bfloat16* W, int64_t ldw, float beta, const void* C, void* D, cudaDataType_t type);

}  // namespace hydra::cuda
