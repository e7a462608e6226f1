// SwiGLU forward (see swiglu.h).
#include "ops/cpu/swiglu.h"

#include <cmath>

namespace hydra::cpu {

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t N) {
#pragma omp parallel for schedule(static) if (N > 65536)
    for (int64_t i = 0; i < N; ++i) {
        const T g = gate[i];
        out[i] = g / (T(1) + std::exp(-g)) * up[i];
    }
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);

}  // namespace hydra::cpu
