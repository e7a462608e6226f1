// Element-wise GPU helpers (see elementwise.h) and the shared deterministic partial-sum reduction of
// layer_util.cuh. Grid-stride loops, one element per thread step; all of these are memory-bound.
#include "ops/cuda/elementwise.h"

#include <algorithm>

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
// Deterministic column sums of the partials in two kernels. Stage 1: block (column tile tx, group g) of
// 32 columns x kSegs threads; thread (x, y) sums, in part order and in double, the parts of segment
// g * kSegs + y (a fixed contiguous range of parts), and the block adds its kSegs segment sums in order into
// stage[g][c]. Stage 2: dst[c] += the groups' sums in group order. The group count is a function of
// (nparts, C) only, so the order of every addition is fixed and the result deterministic; the groups give
// the first stage enough blocks to load from most multiprocessors (one block per 32 columns alone used
// 18 of 132 at C = 576, ~10 us per call at 4096 parts).
constexpr int kSegs = 32;
__global__ void k_partials_stage1(double* __restrict__ stage, const float* __restrict__ partials,
                                  int64_t nparts, int64_t C, int64_t ld, int groups) {
    __shared__ double seg_sum[kSegs][33];
    const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
    const int g = blockIdx.y;
    const int64_t nseg = int64_t(groups) * kSegs, per = (nparts + nseg - 1) / nseg;
    const int64_t p0 = min(nparts, (int64_t(g) * kSegs + threadIdx.y) * per), p1 = min(nparts, p0 + per);
    double s = 0;
    if (c < C) {
#pragma unroll 4
        for (int64_t p = p0; p < p1; ++p) s += double(partials[p * ld + c]);
    }
    seg_sum[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        double t = 0;
        for (int y = 0; y < kSegs; ++y) t += seg_sum[y][threadIdx.x];
        stage[int64_t(g) * C + c] = t;
    }
}
__global__ void k_partials_stage2(float* __restrict__ dst, const double* __restrict__ stage, int64_t C,
                                  int groups) {
    const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (c >= C) return;
    double t = 0;
    for (int g = 0; g < groups; ++g) t += stage[int64_t(g) * C + c];
    dst[c] += float(t);
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
    const int64_t tiles = (C + 31) / 32;
    // about 256 first-stage blocks, at most one segment of parts per thread row (from nparts and C only)
    const int groups = int(std::clamp<int64_t>((256 + tiles - 1) / tiles, 1,
                                               std::max<int64_t>(1, (nparts + kSegs - 1) / kSegs)));
    Scratch stage(size_t(2 * groups * C), stream);  // groups x C doubles
    double* st = reinterpret_cast<double*>(stage.get());
    k_partials_stage1<<<dim3(unsigned(tiles), unsigned(groups)), dim3(32, kSegs), 0, stream>>>(
        st, partials, nparts, C, ld, groups);
    CUDA_CHECK(cudaGetLastError());
    k_partials_stage2<<<unsigned((C + 255) / 256), 256, 0, stream>>>(dst, st, C, groups);
    CUDA_CHECK(cudaGetLastError());
    stage.release();
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
