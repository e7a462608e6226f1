// SwiGLU activation: out = silu(gate) * up, elementwise, and its backward pass.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// gate, up, out: (N) flattened; out may alias gate.
template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t N);

// Backward of swiglu_forward. All buffers (N). dgate and dup are OVERWRITTEN.
// Each index is read before it is written, so dgate may alias gate or dout and dup may alias up or
// dout (but dgate != dup).
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t N);

}  // namespace hydra::cpu
