// Gated DeltaNet gates on the GPU (mirror of ops/cpu/gdn_gates.h, gdn.md §1.1 step 3), one scalar per
// (token, value head), from the bf16 a / b projection outputs into the fp32 inputs of gdn_chunk:
//   g    = -exp(A_log) * softplus(a + dt_bias)   (softplus(x) = x above 20, as fla)   log decay <= 0
//   beta = s * sigmoid(b),  s = 2 when allow_neg_eigval else 1
// Layouts: a, b, da, db: (N, HV) bf16, token rows ab_stride / dab_stride elements apart (0 = HV; lets them
// live in a fused projection output); A_log, dt_bias, dA_log, ddt_bias: (HV) fp32; g, beta, dg, dbeta:
// (N, HV) fp32 contiguous. fp32 arithmetic.
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// g, beta OVERWRITTEN.
void gdn_gates_forward(float* g, float* beta, const bf16* a, const bf16* b, int64_t ab_stride, const float* A_log,
                       const float* dt_bias, int64_t N, int64_t HV, bool allow_neg_eigval,
                       cudaStream_t stream = nullptr);

// da = dg * -exp(A_log) * sigmoid(a + dt_bias) (1 above the shortcut), db = dbeta * s * sig(b) (1 - sig(b)),
// both OVERWRITTEN. dA_log += sum_n dg * g, ddt_bias += sum_n dg * dg/d(a + dt_bias), ACCUMULATED
// (null = frozen; deterministic: fixed token blocks summed in order, scratch from cudaMallocAsync).
void gdn_gates_backward(bf16* da, bf16* db, int64_t dab_stride, float* dA_log, float* ddt_bias, const float* dg,
                        const float* dbeta, const bf16* a, const bf16* b, int64_t ab_stride, const float* A_log,
                        const float* dt_bias, int64_t N, int64_t HV, bool allow_neg_eigval,
                        cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
