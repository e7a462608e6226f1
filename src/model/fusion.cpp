// Scale-normalized fusion forward/backward (see fusion.h).
#include "model/fusion.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace hydra {

namespace {

// One normalised segment: y = f * x * r * w with r = rsqrt(mean(x^2) + eps) over n values.
template <typename T>
void norm_segment(T* y, const T* x, const T* w, int64_t n, double f, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
    const double r = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) y[i] = T(f * double(x[i]) * r * double(w[i]));
}

// dx = f * (r * dy*w - x * r^3 * mean(dy*w*x));  dw += f * dy * x * r.  dx may alias dy.
template <typename T>
void norm_segment_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t n, double f, double eps) {
    double ss = 0, dot = 0;
    for (int64_t i = 0; i < n; ++i) {
        ss += double(x[i]) * double(x[i]);
        dot += double(dy[i]) * double(w[i]) * double(x[i]);
    }
    const double r = 1.0 / std::sqrt(ss / double(n) + eps);
    const double c = r * r * r * dot / double(n);
    for (int64_t i = 0; i < n; ++i) {
        const double g = double(dy[i]);
        if (dw) dw[i] += T(f * g * double(x[i]) * r);
        dx[i] = T(f * (r * g * double(w[i]) - double(x[i]) * c));
    }
}

}  // namespace

template <typename T>
void fusion_forward(T* out, const T* heads, int64_t num_tokens, int64_t n_fa, int64_t n_la, int64_t Dh,
                    FusionKind kind, const FusionParams<T>& p, double eps) {
    const int64_t H = n_fa + n_la, row = H * Dh;
    if (out != heads) std::memcpy(out, heads, size_t(num_tokens * row) * sizeof(T));
    if (!fusion_active(kind, n_la)) return;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < num_tokens; ++t) {
        T* y = out + t * row;
        switch (kind) {
            case FusionKind::ScaleNorm:
                for (int64_t h = 0; h < H; ++h) norm_segment(y + h * Dh, y + h * Dh, p.head_scale + h * Dh, Dh, 1.0, eps);
                break;
            case FusionKind::LaOnly:
                for (int64_t h = n_fa; h < H; ++h)
                    norm_segment(y + h * Dh, y + h * Dh, p.head_scale + (h - n_fa) * Dh, Dh, 1.0, eps);
                break;
            case FusionKind::Hymba: {
                const double f = n_fa > 0 ? 0.5 : 1.0;
                if (n_fa > 0) norm_segment(y, y, p.fa_scale, n_fa * Dh, f, eps);
                norm_segment(y + n_fa * Dh, y + n_fa * Dh, p.la_scale, n_la * Dh, f, eps);
                break;
            }
            case FusionKind::None: break;
        }
        if (p.la_bias)
            for (int64_t i = 0; i < n_la * Dh; ++i) y[n_fa * Dh + i] += p.la_bias[i];
    }
}

template <typename T>
void fusion_backward(T* dheads, const FusionGrads<T>& g, const T* dout, const T* heads, int64_t num_tokens,
                     int64_t n_fa, int64_t n_la, int64_t Dh, FusionKind kind, const FusionParams<T>& p, double eps) {
    const int64_t H = n_fa + n_la, row = H * Dh;
    if (dheads != dout) std::memcpy(dheads, dout, size_t(num_tokens * row) * sizeof(T));
    if (!fusion_active(kind, n_la)) return;
    // Parameter gradients are sums over tokens: a serial token loop keeps their order fixed, so results
    // do not depend on the thread count (the fusion is a tiny fraction of a layer's work).
    for (int64_t t = 0; t < num_tokens; ++t) {
        T* dx = dheads + t * row;
        const T* x = heads + t * row;
        if (g.la_bias)  // dx holds dout here: the offset's gradient is the sum of its outputs' gradients
            for (int64_t i = 0; i < n_la * Dh; ++i) g.la_bias[i] += dx[n_fa * Dh + i];
        switch (kind) {
            case FusionKind::ScaleNorm:
                for (int64_t h = 0; h < H; ++h)
                    norm_segment_backward(dx + h * Dh, g.head_scale ? g.head_scale + h * Dh : (T*)nullptr, dx + h * Dh,
                                          x + h * Dh, p.head_scale + h * Dh, Dh, 1.0, eps);
                break;
            case FusionKind::LaOnly:
                for (int64_t h = n_fa; h < H; ++h)
                    norm_segment_backward(dx + h * Dh, g.head_scale ? g.head_scale + (h - n_fa) * Dh : (T*)nullptr,
                                          dx + h * Dh, x + h * Dh, p.head_scale + (h - n_fa) * Dh, Dh, 1.0, eps);
                break;
            case FusionKind::Hymba: {
                const double f = n_fa > 0 ? 0.5 : 1.0;
                if (n_fa > 0) norm_segment_backward(dx, g.fa_scale, dx, x, p.fa_scale, n_fa * Dh, f, eps);
                norm_segment_backward(dx + n_fa * Dh, g.la_scale, dx + n_fa * Dh, x + n_fa * Dh, p.la_scale, n_la * Dh,
                                      f, eps);
                break;
            }
            case FusionKind::None: break;
        }
    }
}

template void fusion_forward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t, FusionKind,
                                    const FusionParams<float>&, double);
template void fusion_forward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t, FusionKind,
                                     const FusionParams<double>&, double);
template void fusion_backward<float>(float*, const FusionGrads<float>&, const float*, const float*, int64_t, int64_t,
                                     int64_t, int64_t, FusionKind, const FusionParams<float>&, double);
template void fusion_backward<double>(double*, const FusionGrads<double>&, const double*, const double*, int64_t,
                                      int64_t, int64_t, int64_t, FusionKind, const FusionParams<double>&, double);

}  // namespace hydra
