// Argmax over one logits row (see argmax.h): one block of 1024 threads, each scans a strided slice
// (ascending, so it keeps its first maximum), then a (value, index) reduction that prefers the larger
// value and, on equal values, the smaller index.
#include "gpu/argmax.h"

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) v = v2, i = i2;
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(int32_t* out, const float* __restrict__ x, int n) {
    float v = -INFINITY;
    int idx = n;  // larger than any real index: loses every tie
    for (int i = threadIdx.x; i < n; i += kThreads)
        if (x[i] > v || idx == n) v = x[i], idx = i;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        better(v, idx, v2, i2);
    }
    __shared__ float sv[kThreads / 32];
    __shared__ int si[kThreads / 32];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sv[warp] = v, si[warp] = idx;
    __syncthreads();
    if (warp == 0) {
        v = sv[lane], idx = si[lane];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
            const int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
            better(v, idx, v2, i2);
        }
        if (lane == 0) *out = idx;
    }
}

}  // namespace

void argmax_f32(int32_t* out, const float* x, int64_t n, cudaStream_t stream) {
    HYDRA_ASSERT(n >= 1 && n < (int64_t(1) << 31), "argmax_f32: n = {}", n);
    argmax_kernel<<<1, kThreads, 0, stream>>>(out, x, int(n));
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::gpu
