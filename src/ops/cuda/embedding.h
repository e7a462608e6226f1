// Token embedding on the GPU (mirror of ops/cpu/embedding.h): the forward gathers table rows into the
// fp32 residual stream, the backward scatter-adds the residual gradient into the fp32 table gradient.
//
// Layouts (row-major, contiguous): ids: (N) int32 on the device; table: (V, C); x, dx: (N, C) fp32;
// dtable: (V, C) fp32. Ids must lie in [0, V) (the caller validates them on the host, as the CPU train
// step does); a row whose id is outside is written as NaN by the forward and skipped by the backward.
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// x[n, :] = float(table[ids[n], :]), x OVERWRITTEN.
void embedding_forward(float* x, const int32_t* ids, const bf16* table, int64_t N, int64_t V, int64_t C,
                       cudaStream_t stream = nullptr);
// The same from an fp32 table (e.g. the fp32 master weights).
void embedding_forward(float* x, const int32_t* ids, const float* table, int64_t N, int64_t V, int64_t C,
                       cudaStream_t stream = nullptr);

// dtable[ids[n], :] += dx[n, :], ACCUMULATED (fp32 atomics: a token repeated in the batch sums its rows
// in an unspecified order, so the low bits of such rows may differ run to run).
void embedding_backward(float* dtable, const float* dx, const int32_t* ids, int64_t N, int64_t V, int64_t C,
                        cudaStream_t stream = nullptr);

// The same sums in a fixed order: `groups` is train/token_groups.h's packed grouping of the batch's ids
// ((3 N + 2) int32 on the device); one block per group adds the group's rows to its table row in position
// order, starting from the row's value, as the CPU's embedding_backward does (the same bits). For the
// deterministic training step (HYDRA_DETERMINISTIC=1).
void embedding_backward_grouped(float* dtable, const float* dx, const int32_t* groups, int64_t N, int64_t C,
                                cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
