// Token embedding forward (row gather into the fp32 residual stream) and backward (fp32 atomic
// scatter-add into the table gradient, or fixed-order sums per token id) on the GPU (see embedding.h). One
// block per token row, or per distinct token id.
#include "ops/cuda/embedding.h"

#include <cmath>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void k_embedding_forward(float* __restrict__ x, const int32_t* __restrict__ ids,
                                    const T* __restrict__ table, int64_t V, int64_t C) {
    const int64_t n = blockIdx.x;
    const int32_t id = ids[n];
    float* xr = x + n * C;
    if (id < 0 || id >= V) {
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) xr[c] = NAN;
        return;
    }
    const T* tr = table + int64_t(id) * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) xr[c] = detail::to_f(tr[c]);
}

__global__ void k_embedding_backward(float* __restrict__ dtable, const float* __restrict__ dx,
                                     const int32_t* __restrict__ ids, int64_t V, int64_t C) {
    const int64_t n = blockIdx.x;
    const int32_t id = ids[n];
    if (id < 0 || id >= V) return;
    const float* dr = dx + n * C;
    float* tr = dtable + int64_t(id) * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(tr + c, dr[c]);
}

// Block g: group g of the packed grouping (train/token_groups.h); blocks past the group count return, so a
// grid of N blocks serves any batch (and a captured graph).
__global__ void k_embedding_backward_grouped(float* __restrict__ dtable, const float* __restrict__ dx,
                                             const int32_t* __restrict__ groups, int64_t N, int64_t C) {
    const int32_t g = int32_t(blockIdx.x);
    if (g >= groups[0]) return;
    const int32_t* start = groups + 1;
    const int32_t* order = groups + 1 + (N + 1) + N;
    const int32_t id = groups[1 + (N + 1) + g], k0 = start[g], k1 = start[g + 1];
    float* tr = dtable + int64_t(id) * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = tr[c];
        for (int32_t k = k0; k < k1; ++k) acc += dx[int64_t(order[k]) * C + c];
        tr[c] = acc;
    }
}

template <typename T>
void forward(float* x, const int32_t* ids, const T* table, int64_t N, int64_t V, int64_t C,
             cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    HYDRA_CUDA_REQUIRE(N <= 0x7fffffffLL, "embedding_forward: too many tokens");
    k_embedding_forward<<<unsigned(N), kThreads, 0, stream>>>(x, ids, table, V, C);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void embedding_forward(float* x, const int32_t* ids, const bf16* table, int64_t N, int64_t V, int64_t C,
                       cudaStream_t stream) {
    forward(x, ids, table, N, V, C, stream);
}
void embedding_forward(float* x, const int32_t* ids, const float* table, int64_t N, int64_t V, int64_t C,
                       cudaStream_t stream) {
    forward(x, ids, table, N, V, C, stream);
}

void embedding_backward(float* dtable, const float* dx, const int32_t* ids, int64_t N, int64_t V, int64_t C,
                        cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    HYDRA_CUDA_REQUIRE(N <= 0x7fffffffLL, "embedding_backward: too many tokens");
    k_embedding_backward<<<unsigned(N), kThreads, 0, stream>>>(dtable, dx, ids, V, C);
    CUDA_CHECK(cudaGetLastError());
}

void embedding_backward_grouped(float* dtable, const float* dx, const int32_t* groups, int64_t N, int64_t C,
                                cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    HYDRA_CUDA_REQUIRE(N <= 0x3fffffffLL, "embedding_backward_grouped: too many tokens");
    k_embedding_backward_grouped<<<unsigned(N), kThreads, 0, stream>>>(dtable, dx, groups, N, C);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
