// Per-position held-out statistics on the device (see window_stats.h): one block per position. Three
// passes over the two rows: argmax and maximum, the sums of exp(x - max), then the KL terms; every
// thread accumulates its strided slice in double (as the CPU reference does) and the block reduces.
#include "gpu/window_stats.h"

#include <cfloat>
#include <climits>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ void better(float& v, int& i, float v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) v = v2, i = i2;
}

// Block-wide (value, index) maximum, lowest index on ties; every thread gets the result.
__device__ void block_argmax(float& v, int& i, float* sv, int* si) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) sv[warp] = v, si[warp] = i;
    __syncthreads();
    v = -INFINITY, i = INT_MAX;
    for (int w = 0; w < kThreads / 32; ++w) better(v, i, sv[w], si[w]);
}

// Block-wide sum of two doubles; every thread gets the result.
__device__ void block_sum2(double& a, double& b, double* sa, double* sb) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        a += __shfl_xor_sync(0xffffffffu, a, o), b += __shfl_xor_sync(0xffffffffu, b, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) sa[warp] = a, sb[warp] = b;
    __syncthreads();
    a = 0, b = 0;
    for (int w = 0; w < kThreads / 32; ++w) a += sa[w], b += sb[w];
}

__global__ void __launch_bounds__(kThreads)
    window_stats_kernel(double* __restrict__ out, const float* __restrict__ teacher,
                        const float* __restrict__ student, const int32_t* __restrict__ next, int V) {
    __shared__ float sv[kThreads / 32];
    __shared__ int si[kThreads / 32];
    __shared__ double sa[kThreads / 32], sb[kThreads / 32];
    const int64_t row = blockIdx.x;
    const float* a = teacher + row * V;
    const float* s = student + row * V;

    float ma = -INFINITY, ms = -INFINITY;
    int ia = INT_MAX, is = INT_MAX;
    for (int v = threadIdx.x; v < V; v += kThreads) {
        better(ma, ia, a[v], v);
        better(ms, is, s[v], v);
    }
    block_argmax(ma, ia, sv, si);
    block_argmax(ms, is, sv, si);

    double za = 0, zs = 0;
    for (int v = threadIdx.x; v < V; v += kThreads) {
        za += exp(double(a[v]) - ma);
        zs += exp(double(s[v]) - ms);
    }
    block_sum2(za, zs, sa, sb);
    const double lza = log(za) + ma, lzs = log(zs) + ms;

    double k = 0, unused = 0;
    for (int v = threadIdx.x; v < V; v += kThreads) {
        const double la = double(a[v]) - lza;
        k += exp(la) * (la - (double(s[v]) - lzs));
    }
    block_sum2(k, unused, sa, sb);
    if (threadIdx.x == 0) {
        const int32_t t = next[row];
        double* o = out + row * 4;
        o[0] = k > 0 ? k : 0.0;  // rounding can leave -1e-12 for identical distributions
        o[1] = ia == is ? 1.0 : 0.0;
        o[2] = lzs - double(s[t]);
        o[3] = lza - double(a[t]);
    }
}

}  // namespace

void window_stats_rows(double* out, const float* teacher, const float* student, const int32_t* next,
                       int64_t n, int64_t V, cudaStream_t stream) {
    HYDRA_CHECK(n >= 1 && V >= 1 && V < (int64_t(1) << 31),
                "window_stats_rows: bad shape ({} rows, {} columns)", n, V);
    window_stats_kernel<<<dim3(unsigned(n)), kThreads, 0, stream>>>(out, teacher, student, next, int(V));
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::gpu
