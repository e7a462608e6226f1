// SwiGLU forward/backward on the GPU (see swiglu.h): 8 elements per thread step with 16-byte accesses where
// rows, strides and pointers allow (else one element), fp32 arithmetic,
// gate/up (and dgate/dup) read through a row stride so they may be halves of one fused GEMM output.
#include "ops/cuda/swiglu.h"

#include <cstdint>
#include <initializer_list>

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

// 8 channels per thread step through 16-byte loads and stores (rows and strides multiples of 8 elements,
// 16-byte aligned pointers); the same arithmetic per element as the scalar kernels above.
struct alignas(16) Bf16x8 {
    __nv_bfloat162 v[4];
};

__global__ void k_swiglu_forward8(bf16* out, const bf16* gate, const bf16* up, int64_t N, int I8, int64_t in_stride) {
    const int64_t total = N * I8;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t n = k / I8, i = (k - n * I8) * 8, o = n * in_stride + i;
        const Bf16x8 g8 = *reinterpret_cast<const Bf16x8*>(gate + o), u8 = *reinterpret_cast<const Bf16x8*>(up + o);
        Bf16x8 r;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 g = __bfloat1622float2(g8.v[j]), u = __bfloat1622float2(u8.v[j]);
            r.v[j] = __floats2bfloat162_rn(g.x / (1.0f + expf(-g.x)) * u.x, g.y / (1.0f + expf(-g.y)) * u.y);
        }
        *reinterpret_cast<Bf16x8*>(out + n * int64_t(I8) * 8 + i) = r;
    }
}

__global__ void k_swiglu_backward8(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up,
                                   int64_t N, int I8, int64_t in_stride, int64_t grad_stride) {
    const int64_t total = N * I8;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t n = k / I8, i = (k - n * I8) * 8, o = n * in_stride + i, go = n * grad_stride + i;
        const Bf16x8 g8 = *reinterpret_cast<const Bf16x8*>(gate + o), u8 = *reinterpret_cast<const Bf16x8*>(up + o);
        const Bf16x8 d8 = *reinterpret_cast<const Bf16x8*>(dout + n * int64_t(I8) * 8 + i);
        Bf16x8 rg, ru;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const float2 g = __bfloat1622float2(g8.v[j]), u = __bfloat1622float2(u8.v[j]), d = __bfloat1622float2(d8.v[j]);
            const float sx = 1.0f / (1.0f + expf(-g.x)), sy = 1.0f / (1.0f + expf(-g.y));
            rg.v[j] = __floats2bfloat162_rn(d.x * u.x * sx * (1.0f + g.x * (1.0f - sx)),
                                            d.y * u.y * sy * (1.0f + g.y * (1.0f - sy)));
            ru.v[j] = __floats2bfloat162_rn(d.x * g.x * sx, d.y * g.y * sy);
        }
        // dgate / dup may alias gate / up (in place): every load of this step is done above
        *reinterpret_cast<Bf16x8*>(dgate + go) = rg;
        *reinterpret_cast<Bf16x8*>(dup + go) = ru;
    }
}

bool vec8_ok(int64_t I, std::initializer_list<int64_t> strides, std::initializer_list<const void*> ptrs) {
    if (I % 8) return false;
    for (int64_t s : strides)
        if (s % 8) return false;
    for (const void* p : ptrs)
        if (reinterpret_cast<uintptr_t>(p) % 16) return false;
    return true;
}

}  // namespace

void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t N, int64_t I, int64_t in_stride,
                    cudaStream_t stream) {
    if (N <= 0 || I <= 0) return;
    if (in_stride == 0) in_stride = I;
    HYDRA_CUDA_REQUIRE(in_stride >= I, "swiglu_forward: row stride below the row width");
    if (vec8_ok(I, {in_stride}, {out, gate, up}) && I / 8 < (int64_t(1) << 30)) {
        k_swiglu_forward8<<<detail::grid_for(N * I / 8, kThreads), kThreads, 0, stream>>>(out, gate, up, N, int(I / 8),
                                                                                          in_stride);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    k_swiglu_forward<<<detail::grid_for(N * I, kThreads), kThreads, 0, stream>>>(out, gate, up, N, I, in_stride);
    CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, int64_t N, int64_t I,
                     int64_t in_stride, int64_t grad_stride, cudaStream_t stream) {
    if (N <= 0 || I <= 0) return;
    if (in_stride == 0) in_stride = I;
    if (grad_stride == 0) grad_stride = I;
    HYDRA_CUDA_REQUIRE(in_stride >= I && grad_stride >= I, "swiglu_backward: row stride below the row width");
    if (vec8_ok(I, {in_stride, grad_stride}, {dgate, dup, dout, gate, up}) && I / 8 < (int64_t(1) << 30)) {
        k_swiglu_backward8<<<detail::grid_for(N * I / 8, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, N,
                                                                                           int(I / 8), in_stride,
                                                                                           grad_stride);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    k_swiglu_backward<<<detail::grid_for(N * I, kThreads), kThreads, 0, stream>>>(dgate, dup, dout, gate, up, N, I,
                                                                                  in_stride, grad_stride);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
