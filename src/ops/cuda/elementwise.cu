// Element-wise GPU helpers (see elementwise.h) and the shared deterministic partial-sum reduction of
// layer_util.cuh. Grid-stride loops, one element per thread step; all of these are memory-bound.
#include "ops/cuda/elementwise.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

using detail::grid_for;

__global__ void k_f32_to_bf16(bf16* __restrict__ dst, const float* __restrict__ src, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}
__global__ void k_bf16_to_f32(float* __restrict__ dst, const bf16* __restrict__ src, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}
template <typename T>
__global__ void k_add_to_f32(float* __restrict__ y, const T* __restrict__ x, int64_t n, float scale) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] += scale * detail::to_f(x[i]);
}
__global__ void k_bias_add(bf16* __restrict__ y, const float* __restrict__ bias, int64_t N, int64_t F, int64_t stride) {
    const int64_t total = N * F;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t n = i / F, f = i - n * F;
        bf16* p = y + n * stride + f;
        *p = __float2bfloat16_rn(__bfloat162float(*p) + bias[f]);
    }
}
// partials[p, f] = sum of dy[n, f] over the rows n of part p.
__global__ void k_bias_partials(float* __restrict__ partials, const bf16* __restrict__ dy, int64_t N, int64_t F,
                                int64_t stride, int64_t rpp, int64_t nparts) {
    const int64_t total = nparts * F;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t p = i / F, f = i - p * F;
        const int64_t n0 = p * rpp, n1 = min(N, n0 + rpp);
        float s = 0.f;
        for (int64_t n = n0; n < n1; ++n) s += __bfloat162float(dy[n * stride + f]);
        partials[i] = s;
    }
}
// Block (32 columns x kSegs segments): thread (x, y) sums, in part order and in double, the parts of segment y
// (a fixed contiguous range) for column x; the kSegs segment sums are then added in segment order. The order
// is fixed, so the result is deterministic; the parts of one column are read by kSegs threads at once
// instead of one (a single thread per column left most of the card idle and the loads in one chain).
constexpr int kSegs = 32;
__global__ void k_accumulate_partials(float* __restrict__ dst, const float* __restrict__ partials, int64_t nparts,
                                      int64_t C, int64_t ld) {
    __shared__ double seg_sum[kSegs][33];
    const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
    const int64_t per = (nparts + kSegs - 1) / kSegs, p0 = threadIdx.y * per, p1 = min(nparts, p0 + per);
    double s = 0;
    if (c < C) {
#pragma unroll 8
        for (int64_t p = p0; p < p1; ++p) s += double(partials[p * ld + c]);
    }
    seg_sum[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t = 0;
        for (int y = 0; y < kSegs; ++y) t += seg_sum[y][threadIdx.x];
        dst[c] += float(t);
    }
}
__global__ void k_gather_heads(bf16* __restrict__ dst, const bf16* __restrict__ src, const int32_t* __restrict__ heads,
                               int64_t N, int64_t H_src, int64_t n_sel, int64_t D) {
    const int64_t total = N * n_sel * D;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t d = i % D, r = i / D, j = r % n_sel, n = r / n_sel;
        dst[i] = src[(n * H_src + heads[j]) * D + d];
    }
}
__global__ void k_scatter_heads(bf16* __restrict__ dst, const bf16* __restrict__ src, const int32_t* __restrict__ heads,
                                int64_t N, int64_t H_dst, int64_t n_sel, int64_t D, bool accumulate) {
    const int64_t total = N * n_sel * D;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t d = i % D, r = i / D, j = r % n_sel, n = r / n_sel;
        bf16* p = dst + (n * H_dst + heads[j]) * D + d;
        *p = accumulate ? __float2bfloat16_rn(__bfloat162float(*p) + __bfloat162float(src[i])) : src[i];
    }
}

constexpr int kThreads = 256;

}  // namespace

namespace detail {
void accumulate_partials(float* dst, const float* partials, int64_t nparts, int64_t C, int64_t ld,
                         cudaStream_t stream) {
    if (!dst || C <= 0 || nparts <= 0) return;
    const dim3 block(32, kSegs);
    k_accumulate_partials<<<unsigned((C + 31) / 32), block, 0, stream>>>(dst, partials, nparts, C, ld);
    CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

void cast_f32_to_bf16(bf16* dst, const float* src, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    k_f32_to_bf16<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}
void cast_bf16_to_f32(float* dst, const bf16* src, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    k_bf16_to_f32<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}
void add_to_f32(float* y, const bf16* x, int64_t n, float scale, cudaStream_t stream) {
    if (n <= 0) return;
    k_add_to_f32<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, x, n, scale);
    CUDA_CHECK(cudaGetLastError());
}
void add_to_f32(float* y, const float* x, int64_t n, float scale, cudaStream_t stream) {
    if (n <= 0) return;
    k_add_to_f32<<<grid_for(n, kThreads), kThreads, 0, stream>>>(y, x, n, scale);
    CUDA_CHECK(cudaGetLastError());
}
void bias_add(bf16* y, const float* bias, int64_t N, int64_t F, int64_t stride, cudaStream_t stream) {
    if (N <= 0 || F <= 0) return;
    if (stride == 0) stride = F;
    HYDRA_CUDA_REQUIRE(stride >= F, "bias_add: row stride below the row width");
    k_bias_add<<<grid_for(N * F, kThreads), kThreads, 0, stream>>>(y, bias, N, F, stride);
    CUDA_CHECK(cudaGetLastError());
}
void bias_backward(float* dbias, const bf16* dy, int64_t N, int64_t F, int64_t stride, cudaStream_t stream) {
    if (!dbias || N <= 0 || F <= 0) return;
    if (stride == 0) stride = F;
    HYDRA_CUDA_REQUIRE(stride >= F, "bias_backward: row stride below the row width");
    const int64_t rpp = detail::rows_per_part(N), np = detail::num_parts(N);
    detail::Scratch part(size_t(np * F), stream);
    k_bias_partials<<<grid_for(np * F, kThreads), kThreads, 0, stream>>>(part.get(), dy, N, F, stride, rpp, np);
    CUDA_CHECK(cudaGetLastError());
    detail::accumulate_partials(dbias, part.get(), np, F, F, stream);
    part.release();
}
void gather_heads(bf16* dst, const bf16* src, const int32_t* heads, int64_t N, int64_t H_src, int64_t n_sel, int64_t D,
                  cudaStream_t stream) {
    if (N <= 0 || n_sel <= 0 || D <= 0) return;
    k_gather_heads<<<grid_for(N * n_sel * D, kThreads), kThreads, 0, stream>>>(dst, src, heads, N, H_src, n_sel, D);
    CUDA_CHECK(cudaGetLastError());
}
void scatter_heads(bf16* dst, const bf16* src, const int32_t* heads, int64_t N, int64_t H_dst, int64_t n_sel,
                   int64_t D, bool accumulate, cudaStream_t stream) {
    if (N <= 0 || n_sel <= 0 || D <= 0) return;
    k_scatter_heads<<<grid_for(N * n_sel * D, kThreads), kThreads, 0, stream>>>(dst, src, heads, N, H_dst, n_sel, D,
                                                                                accumulate);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
