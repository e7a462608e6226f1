// RoPE forward and backward (see rope.h). Angles are computed in double so long positions stay exact
// in fp32.
#include "ops/cpu/rope.h"

#include <cmath>
#include <vector>

namespace hydra::cpu {

namespace {

// Rotates every (i, i + half) pair of every head by sign * angle(pos, i).
template <typename T>
void rope_rotate(T* x, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                 double theta, double sign) {
    const int64_t half = rope_dim / 2;
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i)
        inv_freq[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(rope_dim));
#pragma omp parallel for schedule(static) if (num_tokens > 4)
    for (int64_t t = 0; t < num_tokens; ++t) {
        const double pos = double(pos0 + t);
        for (int64_t i = 0; i < half; ++i) {
            const double angle = pos * inv_freq[size_t(i)];
            const T c = T(std::cos(angle)), s = T(sign * std::sin(angle));
            for (int64_t h = 0; h < H; ++h) {
                T* v = x + (t * H + h) * Dh;
                const T a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

}  // namespace

template <typename T>
void rope_forward(T* x, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  double theta) {
    rope_rotate(x, num_tokens, H, Dh, rope_dim, pos0, theta, 1.0);
}

template <typename T>
void rope_backward(T* dx, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                   double theta) {
    rope_rotate(dx, num_tokens, H, Dh, rope_dim, pos0, theta, -1.0);
}

template void rope_forward<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, double);
template void rope_forward<double>(double*, int64_t, int64_t, int64_t, int64_t, int64_t, double);
template void rope_backward<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, double);
template void rope_backward<double>(double*, int64_t, int64_t, int64_t, int64_t, int64_t, double);

}  // namespace hydra::cpu
