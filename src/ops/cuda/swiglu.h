// SwiGLU on the GPU (mirror of ops/cpu/swiglu.h): out = silu(gate) * up element-wise, and its backward.
// gate and up are separate pointers with a shared row stride, so they may be two tensors or the two
// halves of one fused (N, 2I) gate_up GEMM output (gate = buf, up = buf + I, stride 2I).
//
// Layouts: gate, up: (N, I) bf16 with row stride in_stride elements (0 = I); out, dout: (N, I) bf16
// contiguous; dgate, dup: (N, I) bf16 with row stride grad_stride (0 = I). fp32 arithmetic.
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// out OVERWRITTEN; out may alias gate when in_stride == I.
void swiglu_forward(bf16* out, const bf16* gate, const bf16* up, int64_t N, int64_t I, int64_t in_stride,
                    cudaStream_t stream = nullptr);

// dgate = dout * up * silu'(gate), dup = dout * silu(gate), both OVERWRITTEN; each element is read before
// it is written, so dgate/dup may alias gate/up (same strides) or dout (stride I).
void swiglu_backward(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, int64_t N, int64_t I,
                     int64_t in_stride, int64_t grad_stride, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
