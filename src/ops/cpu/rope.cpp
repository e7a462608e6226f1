// RoPE forward and backward (see rope.h). Angles are computed in double so long positions stay exact
// in fp32; the rotation itself runs from a (T, rope_dim/2) table of cos/sin.
#include "ops/cpu/rope.h"

#include <cmath>
#include <vector>

namespace hydra::cpu {

namespace {

// Rotates every (i, i + half) pair of every head of token t by the table's angle (negated when inverse).
template <typename T>
void rope_rotate(T* x, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, const T* cos, const T* sin,
                 bool inverse) {
    const int64_t half = rope_dim / 2;
#pragma omp parallel for schedule(static) if (num_tokens * H * rope_dim > 32768)
    for (int64_t t = 0; t < num_tokens; ++t) {
        const T* c = cos + t * half;
        const T* s = sin + t * half;
        for (int64_t h = 0; h < H; ++h) {
            T* v = x + (t * H + h) * Dh;
            if (inverse) {
#pragma omp simd
                for (int64_t i = 0; i < half; ++i) {
                    const T a = v[i], b = v[i + half];
                    v[i] = a * c[i] + b * s[i];
                    v[i + half] = b * c[i] - a * s[i];
                }
            } else {
#pragma omp simd
                for (int64_t i = 0; i < half; ++i) {
                    const T a = v[i], b = v[i + half];
                    v[i] = a * c[i] - b * s[i];
                    v[i + half] = b * c[i] + a * s[i];
                }
            }
        }
    }
}

template <typename T>
void rope_with_angles(T* x, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                      double theta, bool inverse) {
    const int64_t half = rope_dim / 2;
    std::vector<T> cos(size_t(num_tokens * half)), sin(size_t(num_tokens * half));
    rope_table(cos.data(), sin.data(), num_tokens, rope_dim, pos0, theta);
    rope_rotate(x, num_tokens, H, Dh, rope_dim, cos.data(), sin.data(), inverse);
}

}  // namespace

template <typename T>
void rope_table(T* cos, T* sin, int64_t num_tokens, int64_t rope_dim, int64_t pos0, double theta) {
    const int64_t half = rope_dim / 2;
    std::vector<double> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i)
        inv_freq[size_t(i)] = std::pow(theta, -2.0 * double(i) / double(rope_dim));
    rope_table(cos, sin, num_tokens, rope_dim, pos0, inv_freq.data(), 1.0);
}

template <typename T>
void rope_table(T* cos, T* sin, int64_t num_tokens, int64_t rope_dim, int64_t pos0, const double* inv_freq,
                double scale) {
    const int64_t half = rope_dim / 2;
#pragma omp parallel for schedule(static) if (num_tokens * half > 8192)
    for (int64_t t = 0; t < num_tokens; ++t) {
        const double pos = double(pos0 + t);
        for (int64_t i = 0; i < half; ++i) {
            const double angle = pos * inv_freq[i];
            cos[t * half + i] = T(scale * std::cos(angle));
            sin[t * half + i] = T(scale * std::sin(angle));
        }
    }
}

template <typename T>
void rope_forward(T* x, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  double theta) {
    rope_with_angles(x, num_tokens, H, Dh, rope_dim, pos0, theta, false);
}

template <typename T>
void rope_backward(T* dx, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                   double theta) {
    rope_with_angles(dx, num_tokens, H, Dh, rope_dim, pos0, theta, true);
}

template <typename T>
void rope_forward(T* x, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, const T* cos, const T* sin) {
    rope_rotate(x, num_tokens, H, Dh, rope_dim, cos, sin, false);
}

template <typename T>
void rope_backward(T* dx, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, const T* cos, const T* sin) {
    rope_rotate(dx, num_tokens, H, Dh, rope_dim, cos, sin, true);
}

template void rope_forward<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, double);
template void rope_forward<double>(double*, int64_t, int64_t, int64_t, int64_t, int64_t, double);
template void rope_backward<float>(float*, int64_t, int64_t, int64_t, int64_t, int64_t, double);
template void rope_backward<double>(double*, int64_t, int64_t, int64_t, int64_t, int64_t, double);
template void rope_table<float>(float*, float*, int64_t, int64_t, int64_t, double);
template void rope_table<double>(double*, double*, int64_t, int64_t, int64_t, double);
template void rope_table<float>(float*, float*, int64_t, int64_t, int64_t, const double*, double);
template void rope_table<double>(double*, double*, int64_t, int64_t, int64_t, const double*, double);
template void rope_forward<float>(float*, int64_t, int64_t, int64_t, int64_t, const float*, const float*);
template void rope_forward<double>(double*, int64_t, int64_t, int64_t, int64_t, const double*, const double*);
template void rope_backward<float>(float*, int64_t, int64_t, int64_t, int64_t, const float*, const float*);
template void rope_backward<double>(double*, int64_t, int64_t, int64_t, int64_t, const double*, const double*);

}  // namespace hydra::cpu
