// Token embedding forward (row gather into the fp32 residual stream) and backward (fp32 atomic
// scatter-add into the table gradient) on the GPU (see embedding.h). One block per token row.
#include "ops/cuda/embedding.h"

#include <cmath>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void k_embedding_forward(float* __restrict__ x, const int32_t* __restrict__ ids, const T* __restrict__ table,
                                    int64_t V, int64_t C) {
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

template <typename T>
void forward(float* x, const int32_t* ids, const T* table, int64_t N, int64_t V, int64_t C, cudaStream_t stream) {
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

}  // namespace hydra::cuda
