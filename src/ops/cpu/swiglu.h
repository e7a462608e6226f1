// SwiGLU activation: out = silu(gate) * up, elementwise.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// gate, up, out: (N) flattened; out may alias gate.
template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t N);

}  // namespace hydra::cpu
