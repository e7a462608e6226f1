// Causal depthwise short convolution + SiLU (see short_conv.h). Work is split over blocks of channels
// (each channel's taps and gradients are independent), with the token loop inside a block.
#include "ops/cpu/short_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace hydra::cpu {

namespace {

constexpr int64_t kBlock = 64;  // channels per work item

// The input row at time tau in [-(W-1), T): a row of x, a row of prev, or null for the zero padding.
template <typename T>
const T* input_row(const T* x, const T* prev, int64_t tau, int64_t D, int64_t W) {
    if (tau >= 0) return x + tau * D;
    return prev ? prev + (W - 1 + tau) * D : nullptr;
}

template <typename T>
T sigmoid(T y) {
    return T(1) / (T(1) + std::exp(-y));
}

// Pre-activations of one channel block [c0, c1) for all tokens: pre[t * kBlock + (c - c0)].
template <typename T>
void conv_block(T* pre, const T* x, const T* w, const T* prev, int64_t num_tokens, int64_t D, int64_t W,
                int64_t c0, int64_t c1) {
    for (int64_t t = 0; t < num_tokens; ++t) {
        T* p = pre + t * kBlock;
        for (int64_t c = c0; c < c1; ++c) p[c - c0] = 0;
        for (int64_t i = 0; i < W; ++i) {
            const T* row = input_row(x, prev, t - W + 1 + i, D, W);
            if (!row) continue;
            for (int64_t c = c0; c < c1; ++c) p[c - c0] += w[c * W + i] * row[c];
        }
    }
}

}  // namespace

template <typename T>
void short_conv_forward(T* out, const T* x, const T* w, const T* prev, int64_t num_tokens, int64_t D, int64_t W) {
    HYDRA_ASSERT(W >= 1 && D >= 0 && num_tokens >= 0, "short_conv: bad shape T={} D={} W={}", num_tokens, D, W);
    if (num_tokens == 0 || D == 0) return;
    // The output row is written after all the input rows it reads, token by token in order, so one
    // pass per row is enough; parallel over rows (independent outputs).
#pragma omp parallel for schedule(static) if (num_tokens * D * W > 65536)
    for (int64_t t = 0; t < num_tokens; ++t) {
        T* o = out + t * D;
        for (int64_t c = 0; c < D; ++c) o[c] = 0;
        for (int64_t i = 0; i < W; ++i) {
            const T* row = input_row(x, prev, t - W + 1 + i, D, W);
            if (!row) continue;
            for (int64_t c = 0; c < D; ++c) o[c] += w[c * W + i] * row[c];
        }
        for (int64_t c = 0; c < D; ++c) o[c] = o[c] * sigmoid(o[c]);
    }
}

template <typename T>
void short_conv_next_prev(T* prev_out, const T* prev_in, const T* x, int64_t num_tokens, int64_t D, int64_t W) {
    const int64_t P = W - 1;
    if (P <= 0) return;
    const size_t row_bytes = size_t(D) * sizeof(T);
    if (num_tokens >= P) {
        std::memcpy(prev_out, x + (num_tokens - P) * D, size_t(P) * row_bytes);
        return;
    }
    // Keep the newest P - T rows of the old window (moved towards the front; memmove because prev_out
    // may alias prev_in), then append all of x.
    const int64_t keep = P - num_tokens;
    if (prev_in) std::memmove(prev_out, prev_in + num_tokens * D, size_t(keep) * row_bytes);
    else std::fill(prev_out, prev_out + keep * D, T(0));
    if (num_tokens > 0) std::memcpy(prev_out + keep * D, x, size_t(num_tokens) * row_bytes);
}

// With u = pre-activation and dy = dout * silu'(u):
//   dx[s, d]    = sum_i w[d, i] dy[s + W-1 - i, d]      (0 <= s + W-1 - i < T)
//   dprev[j, d] = sum_i w[d, i] dy[j - i, d]            (0 <= j - i < T; prev row j is time j - (W-1))
//   dw[d, i]   += sum_t dy[t, d] in[t - W+1 + i, d]
template <typename T>
void short_conv_backward(T* dx, T* dw, T* dprev, const T* dout, const T* x, const T* w, const T* prev,
                         int64_t num_tokens, int64_t D, int64_t W) {
    HYDRA_ASSERT(W >= 1 && D >= 0 && num_tokens >= 0, "short_conv: bad shape T={} D={} W={}", num_tokens, D, W);
    const int64_t n_blocks = (D + kBlock - 1) / kBlock;
#pragma omp parallel if (num_tokens * D * W > 32768)
    {
        std::vector<T> dy(size_t(num_tokens * kBlock));
        std::vector<double> acc(size_t(kBlock * W));
#pragma omp for schedule(static)
        for (int64_t b = 0; b < n_blocks; ++b) {
            const int64_t c0 = b * kBlock, c1 = std::min(D, c0 + kBlock);
            conv_block(dy.data(), x, w, prev, num_tokens, D, W, c0, c1);
            for (int64_t t = 0; t < num_tokens; ++t) {
                T* p = dy.data() + t * kBlock;
                const T* g = dout + t * D;
                for (int64_t c = c0; c < c1; ++c) {
                    const T u = p[c - c0], s = sigmoid(u);
                    p[c - c0] = g[c] * s * (T(1) + u * (T(1) - s));
                }
            }
            // dx and dprev: every input time tau in [-(W-1), T) collects from outputs tau .. tau+W-1.
            for (int64_t tau = (dprev ? -(W - 1) : 0); tau < num_tokens; ++tau) {
                T* dst = tau >= 0 ? dx + tau * D : dprev + (W - 1 + tau) * D;
                for (int64_t c = c0; c < c1; ++c) dst[c] = 0;
                for (int64_t i = 0; i < W; ++i) {
                    const int64_t t = tau + W - 1 - i;
                    if (t < 0 || t >= num_tokens) continue;
                    const T* p = dy.data() + t * kBlock;
                    for (int64_t c = c0; c < c1; ++c) dst[c] += w[c * W + i] * p[c - c0];
                }
            }
            if (!dw) continue;
            std::fill(acc.begin(), acc.end(), 0.0);
            for (int64_t t = 0; t < num_tokens; ++t) {
                const T* p = dy.data() + t * kBlock;
                for (int64_t i = 0; i < W; ++i) {
                    const T* row = input_row(x, prev, t - W + 1 + i, D, W);
                    if (!row) continue;
                    for (int64_t c = c0; c < c1; ++c) acc[size_t((c - c0) * W + i)] += double(p[c - c0]) * double(row[c]);
                }
            }
            for (int64_t c = c0; c < c1; ++c)
                for (int64_t i = 0; i < W; ++i) dw[c * W + i] += T(acc[size_t((c - c0) * W + i)]);
        }
    }
}

template <typename T>
void short_conv_next_prev_backward(T* dx, T* dprev_in, const T* dprev_out, int64_t num_tokens, int64_t D,
                                   int64_t W) {
    const int64_t P = W - 1;
    // prev_out row j holds time T - P + j of the concatenated stream [prev_in (P rows); x (T rows)].
    for (int64_t j = 0; j < P; ++j) {
        const int64_t tau = num_tokens - P + j;
        T* dst = tau >= 0 ? dx + tau * D : (dprev_in ? dprev_in + (P + tau) * D : nullptr);
        if (!dst) continue;
        const T* src = dprev_out + j * D;
        for (int64_t c = 0; c < D; ++c) dst[c] += src[c];
    }
}

#define HYDRA_INSTANTIATE(T)                                                                                  \
    template void short_conv_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t);         \
    template void short_conv_next_prev<T>(T*, const T*, const T*, int64_t, int64_t, int64_t);                 \
    template void short_conv_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t, \
                                         int64_t);                                                            \
    template void short_conv_next_prev_backward<T>(T*, T*, const T*, int64_t, int64_t, int64_t);
HYDRA_INSTANTIATE(float)
HYDRA_INSTANTIATE(double)
#undef HYDRA_INSTANTIATE

}  // namespace hydra::cpu
