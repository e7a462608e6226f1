// Per-head in-place RMSNorm on bf16 rows (see head_rmsnorm.h): one warp per (token, head).
#include "gpu/head_rmsnorm.h"

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

__global__ void head_rmsnorm_kernel(__nv_bfloat16* x, int64_t stride, const float* __restrict__ w, int64_t T, int H,
                                    int Dh, float eps) {
    const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (row >= T * H) return;
    __nv_bfloat16* p = x + (row / H) * stride + (row % H) * Dh;
    float ss = 0.f;
    for (int d = lane; d < Dh; d += 32) {
        const float v = __bfloat162float(p[d]);
        ss += v * v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float r = rsqrtf(ss / float(Dh) + eps);
    for (int d = lane; d < Dh; d += 32) p[d] = __float2bfloat16_rn(__bfloat162float(p[d]) * r * w[d]);
}

}  // namespace

void head_rmsnorm_inplace(__nv_bfloat16* x, int64_t token_stride, const float* w, int64_t T, int64_t H, int64_t Dh,
                          float eps, cudaStream_t stream) {
    if (T <= 0 || H <= 0) return;
    const int64_t threads = T * H * 32;
    head_rmsnorm_kernel<<<unsigned((threads + 255) / 256), 256, 0, stream>>>(x, token_stride, w, T, int(H), int(Dh),
                                                                             eps);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::gpu
