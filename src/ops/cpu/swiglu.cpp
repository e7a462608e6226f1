// SwiGLU forward and backward (see swiglu.h). float uses the vectorisable exp_approx (ops/cpu/fast_exp.h).
#include "ops/cpu/swiglu.h"

#include <cmath>

#include "ops/cpu/fast_exp.h"

namespace hydra::cpu {

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t N) {
#pragma omp parallel for simd schedule(static) if (N > 65536)
    for (int64_t i = 0; i < N; ++i) {
        const T g = gate[i];
        out[i] = g / (T(1) + exp_approx(-g)) * up[i];
    }
}

// With s = sigmoid(g): d silu(g)/dg = s + g s (1 - s) = s (1 + g (1 - s)).
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t N) {
#pragma omp parallel for simd schedule(static) if (N > 65536)
    for (int64_t i = 0; i < N; ++i) {
        const T g = gate[i], u = up[i], d = dout[i];
        const T s = T(1) / (T(1) + exp_approx(-g));
        dgate[i] = d * u * s * (T(1) + g * (T(1) - s));
        dup[i] = d * g * s;
    }
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*, int64_t);

}  // namespace hydra::cpu
