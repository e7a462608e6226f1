// Dense linear layer on the CPU (OpenBLAS GEMM): out = x @ W^T + bias, W in PyTorch (out, in) layout.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// x: (N, K); W: (M, K); bias: (M) or null; out: (N, M) OVERWRITTEN. out must not alias x or W.
template <typename T>
void linear_forward(T* out, const T* x, const T* W, const T* bias_or_null, int64_t N, int64_t K, int64_t M);

// Backward of linear_forward, dout: (N, M).
// dx (N, K) = dout @ W is OVERWRITTEN (skipped when null, e.g. for the first layer's input), or
// ACCUMULATED (dx += dout @ W, inside the GEMM) when accumulate_dx is set (inputs feeding several layers);
// dW (M, K) += dout^T @ x and dbias (M) += column sums of dout are ACCUMULATED (dW and dbias may be
// null when frozen / absent).
template <typename T>
void linear_backward(T* dx_or_null, T* dW, T* dbias_or_null, const T* dout, const T* x, const T* W, int64_t N,
                     int64_t K, int64_t M, bool accumulate_dx = false);

}  // namespace hydra::cpu
