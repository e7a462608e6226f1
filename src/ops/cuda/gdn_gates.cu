// Gated DeltaNet gates on the GPU (see gdn_gates.h): g and beta from the bf16 projection outputs,
// one thread per (token, value head). The backward gives thread (p, h) the tokens of part p, so the
// dA_log / ddt_bias column sums reduce deterministically (layer_util.cuh).
#include "ops/cuda/gdn_gates.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kThreads = 256;
using detail::kSoftplusThreshold;
using detail::softplus_;

__device__ __forceinline__ float softplus_grad_(float x) {
    return x > kSoftplusThreshold ? 1.f : 1.f / (1.f + expf(-x));
}

__global__ void k_gates_forward(float* __restrict__ g, float* __restrict__ beta, const bf16* __restrict__ a,
                                const bf16* __restrict__ b, int64_t abs_, const float* __restrict__ A_log,
                                const float* __restrict__ dt_bias, int64_t N, int64_t HV, float s) {
    const int64_t total = N * HV;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t n = k / HV, h = k - n * HV;
        g[k] = detail::gdn_log_decay(__bfloat162float(a[n * abs_ + h]), A_log[h], dt_bias[h]);
        beta[k] = s * detail::sigmoidf_(__bfloat162float(b[n * abs_ + h]));
    }
}

// partials: (nparts, 2 HV): [p, h] = sum dg g (dA_log), [p, HV + h] = sum da (ddt_bias).
__global__ void k_gates_backward(bf16* __restrict__ da, bf16* __restrict__ db, int64_t dabs, float* __restrict__ partials,
                                 const float* __restrict__ dg, const float* __restrict__ dbeta,
                                 const bf16* __restrict__ a, const bf16* __restrict__ b, int64_t abs_,
                                 const float* __restrict__ A_log, const float* __restrict__ dt_bias, int64_t N,
                                 int64_t HV, float s, int64_t rpp, int64_t nparts) {
    const int64_t total = nparts * HV;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t p = k / HV, h = k - p * HV;
        const float A = expf(A_log[h]), bias = dt_bias[h];
        float sum_A = 0.f, sum_dt = 0.f;
        const int64_t n0 = p * rpp, n1 = min(N, n0 + rpp);
        for (int64_t n = n0; n < n1; ++n) {
            const int64_t i = n * HV + h;
            const float x = __bfloat162float(a[n * abs_ + h]) + bias;
            const float grad = dg[i];
            const float d = grad * (-A) * softplus_grad_(x);
            sum_A += grad * (-A * softplus_(x));
            sum_dt += d;
            da[n * dabs + h] = __float2bfloat16_rn(d);
            const float sg = detail::sigmoidf_(__bfloat162float(b[n * abs_ + h]));
            db[n * dabs + h] = __float2bfloat16_rn(dbeta[i] * s * sg * (1.f - sg));
        }
        if (partials) {
            partials[p * 2 * HV + h] = sum_A;
            partials[p * 2 * HV + HV + h] = sum_dt;
        }
    }
}

}  // namespace

void gdn_gates_forward(float* g, float* beta, const bf16* a, const bf16* b, int64_t ab_stride, const float* A_log,
                       const float* dt_bias, int64_t N, int64_t HV, bool allow_neg_eigval, cudaStream_t stream) {
    if (N <= 0 || HV <= 0) return;
    if (ab_stride == 0) ab_stride = HV;
    HYDRA_CUDA_REQUIRE(ab_stride >= HV, "gdn_gates_forward: row stride below HV");
    k_gates_forward<<<detail::grid_for(N * HV, kThreads), kThreads, 0, stream>>>(
        g, beta, a, b, ab_stride, A_log, dt_bias, N, HV, allow_neg_eigval ? 2.f : 1.f);
    CUDA_CHECK(cudaGetLastError());
}

void gdn_gates_backward(bf16* da, bf16* db, int64_t dab_stride, float* dA_log, float* ddt_bias, const float* dg,
                        const float* dbeta, const bf16* a, const bf16* b, int64_t ab_stride, const float* A_log,
                        const float* dt_bias, int64_t N, int64_t HV, bool allow_neg_eigval, cudaStream_t stream) {
    if (N <= 0 || HV <= 0) return;
    if (ab_stride == 0) ab_stride = HV;
    if (dab_stride == 0) dab_stride = HV;
    HYDRA_CUDA_REQUIRE(ab_stride >= HV && dab_stride >= HV, "gdn_gates_backward: row stride below HV");
    const int64_t rpp = detail::rows_per_part(N), np = detail::num_parts(N);
    const bool params = dA_log || ddt_bias;
    detail::Scratch part(params ? size_t(np * 2 * HV) : 0, stream);
    k_gates_backward<<<detail::grid_for(np * HV, kThreads), kThreads, 0, stream>>>(
        da, db, dab_stride, part.get(), dg, dbeta, a, b, ab_stride, A_log, dt_bias, N, HV,
        allow_neg_eigval ? 2.f : 1.f, rpp, np);
    CUDA_CHECK(cudaGetLastError());
    if (dA_log) detail::accumulate_partials(dA_log, part.get(), np, HV, 2 * HV, stream);
    if (ddt_bias) detail::accumulate_partials(ddt_bias, part.get() + HV, np, HV, 2 * HV, stream);
    part.release();
}

}  // namespace hydra::cuda
