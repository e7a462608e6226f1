// SwiGLU forward/backward on the GPU (see swiglu.h): one element per thread step, fp32 arithmetic,
// gate/up (and dgate/dup) read through a row stride so they may be halves of one fused GEMM output.
#include "ops/cuda/swiglu.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void k_swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t N, int64_t I,
                                 int64_t in_stride) {
    const int64_t total = N * I;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t n = k / I, i = k - n * I, o = n * in_stride + i;
        const float g = __bfloat162float(gate[o]), u = __bfloat162float(up[o]);
        out[k] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
    }
}

__global__ void k_swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                                  int64_t N, int64_t I, int64_t in_stride, int64_t grad_stride) {
    const int64_t total = N * I;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t n = k / I, i = k - n * I, o = n * in_stride + i, go = n * grad_stride + i;
        const float g = __bfloat162float(gate[o]), u = __bfloat162float(up[o]), d = __bfloat162float(dout[k]);
        const float s = 1.0f / (1.0f + expf(-g));
        dgate[go] = __float2bfloat16_rn(d * u * s * (1.0f + g * (1.0f - s)));
        dup[go] = __float2bfloat16_rn(d * g * s);
    }
}

}  // namespace

void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t N, int64_t I, int64_t in_stride,
                    cudaStream_t stream) {
    if (N <= 0 || I <= 0) return;
    if (in_stride == 0) in_stride = I;
    HYDRA_CUDA_REQUIRE(in_stride >= I, "swiglu_forward: row stride below the row width");
    k_swiglu_forward<<<detail::grid_for(N * I, kThreads), kThreads, 0, stream>>>(out, gate, up, N, I, in_stride);
    CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, int64_t N, int64_t I,
                     int64_t in_stride, int64_t grad_stride, cudaStream_t stream) {
    if (N <= 0 || I <= 0) return;
    if (in_stride == 0) in_stride = I;
    if (grad_stride == 0) grad_stride = I;
    HYDRA_CUDA_REQUIRE(in_stride >= I && grad_stride >= I, "swiglu_backward: row stride below the row width");
    k_swiglu_backward<<<detail::grid_for(N * I, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, N, I,
                                                                                  in_stride, grad_stride);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
