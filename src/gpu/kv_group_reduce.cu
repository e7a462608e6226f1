// Per-group sum of per-head dK / dV (see kv_group_reduce.h): one thread per output element.
#include "gpu/kv_group_reduce.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::gpu {

namespace {

__global__ void reduce_heads_by_group_kernel(__nv_bfloat16* __restrict__ dst,
                                             const __nv_bfloat16* __restrict__ src,
                                             const int32_t* __restrict__ kv_index, int64_t N, int n_fa,
                                             int n_kv, int D) {
    const int64_t total = N * n_kv * D;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int d = int(i % D);
        const int g = int((i / D) % n_kv);
        const int64_t n = i / (int64_t(D) * n_kv);
        const __nv_bfloat16* s = src + n * n_fa * D + d;
        float acc = 0.f;
        for (int h = 0; h < n_fa; ++h)
            if (kv_index[h] == g) acc += __bfloat162float(s[int64_t(h) * D]);
        dst[i] = __float2bfloat16_rn(acc);
    }
}

}  // namespace

void reduce_heads_by_group(__nv_bfloat16* dst, const __nv_bfloat16* src, const int32_t* kv_index, int64_t N,
                           int64_t n_fa, int64_t n_kv, int64_t D, cudaStream_t stream) {
    if (N <= 0 || n_kv <= 0 || D <= 0) return;
    constexpr int kThreads = 256;
    reduce_heads_by_group_kernel<<<cuda::detail::grid_for(N * n_kv * D, kThreads), kThreads, 0, stream>>>(
        dst, src, kv_index, N, int(n_fa), int(n_kv), int(D));
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::gpu
