// Rotary position embedding on the GPU (see rope.h), NEOX pairing (i, i + R/2). One thread per one or two
// rotated pairs; the angles come from an fp32 cos/sin table or are computed per pair in double.
#include "ops/cuda/rope.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void k_rope_table(float* __restrict__ cos_t, float* __restrict__ sin_t, int64_t T, int64_t rope_dim,
                             int64_t pos0, double theta) {
    const int64_t half = rope_dim / 2, total = T * half;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = k / half, i = k - t * half;
        const double inv_freq = pow(theta, -2.0 * double(i) / double(rope_dim));
        double s, c;
        sincos(double(pos0 + t) * inv_freq, &s, &c);
        cos_t[k] = float(c);
        sin_t[k] = float(s);
    }
}

// x + (s * T + t) * token_stride + h * Dh is head h of token t of sequence s. Table when cos_t is not
// null, else angles from pos0 / theta, pos0 read from device memory when pos_dev is not null (decode in a
// CUDA graph). inverse = rotate by the negative angle (the backward).
//
// Work item k = one group of P consecutive pairs (i .. i + P - 1, partner i + half ..): P = 2 when the
// pairs can be read as bf16x2 / float2 (half even, even strides, aligned pointers), else 1. The index
// type I is int32 whenever every offset fits (the divisions, not the bytes, bound this kernel in int64).
template <typename I, int P>
__global__ void k_rope(bf16* x, I token_stride, I num_seqs, I T, I H, I Dh, I rope_dim, const float* __restrict__ cos_t,
                       const float* __restrict__ sin_t, int64_t pos0, const int32_t* __restrict__ pos_dev, double theta,
                       bool inverse) {
    const I half = rope_dim / 2, groups = half / P, total = num_seqs * T * H * groups;
    if (pos_dev) pos0 = int64_t(*pos_dev);
    for (I k = blockIdx.x * I(blockDim.x) + threadIdx.x; k < total; k += I(gridDim.x) * I(blockDim.x)) {
        const I i = (k % groups) * P;
        I r = k / groups;
        const I h = r % H;
        r /= H;
        const I t = r % T, s = r / T;
        float c[P], sn[P];
        if (cos_t) {
            if constexpr (P == 2) {
                const float2 cv = *reinterpret_cast<const float2*>(cos_t + t * half + i);
                const float2 sv = *reinterpret_cast<const float2*>(sin_t + t * half + i);
                c[0] = cv.x, c[1] = cv.y, sn[0] = sv.x, sn[1] = sv.y;
            } else {
                c[0] = cos_t[t * half + i];
                sn[0] = sin_t[t * half + i];
            }
        } else {
#pragma unroll
            for (int e = 0; e < P; ++e) {
                const double inv_freq = pow(theta, -2.0 * double(i + e) / double(rope_dim));
                double sd, cd;
                sincos(double(pos0 + int64_t(t)) * inv_freq, &sd, &cd);
                c[e] = float(cd);
                sn[e] = float(sd);
            }
        }
#pragma unroll
        for (int e = 0; e < P; ++e)
            if (inverse) sn[e] = -sn[e];
        bf16* v = x + (s * T + t) * token_stride + h * Dh;
        if constexpr (P == 2) {
            const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(v + i));
            const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(v + i + half));
            *reinterpret_cast<__nv_bfloat162*>(v + i) =
                __floats2bfloat162_rn(a.x * c[0] - b.x * sn[0], a.y * c[1] - b.y * sn[1]);
            *reinterpret_cast<__nv_bfloat162*>(v + i + half) =
                __floats2bfloat162_rn(b.x * c[0] + a.x * sn[0], b.y * c[1] + a.y * sn[1]);
        } else {
            const float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
            v[i] = __float2bfloat16_rn(a * c[0] - b * sn[0]);
            v[i + half] = __float2bfloat16_rn(b * c[0] + a * sn[0]);
        }
    }
}

template <typename I, int P>
void launch_as(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim,
               const float* cos_t, const float* sin_t, int64_t pos0, double theta, bool inverse, cudaStream_t stream,
               const int32_t* pos_dev) {
    const int64_t total = num_seqs * T * H * (rope_dim / 2 / P);
    k_rope<I, P><<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(
        x, I(token_stride), I(num_seqs), I(T), I(H), I(Dh), I(rope_dim), cos_t, sin_t, pos0, pos_dev, theta, inverse);
}

void launch(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim,
            const float* cos_t, const float* sin_t, int64_t pos0, double theta, bool inverse, cudaStream_t stream,
            const int32_t* pos_dev = nullptr) {
    if (token_stride == 0) token_stride = H * Dh;
    HYDRA_CUDA_REQUIRE(rope_dim % 2 == 0 && rope_dim <= Dh && token_stride >= H * Dh,
                "rope: rope_dim must be even and <= head_dim, token stride >= H * Dh");
    const int64_t half = rope_dim / 2, total = num_seqs * T * H * half;
    if (total <= 0) return;
    const auto even = [](const void* p, unsigned bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; };
    const bool pairs = half % 2 == 0 && token_stride % 2 == 0 && Dh % 2 == 0 && even(x, 4) &&
                       (!cos_t || (even(cos_t, 8) && even(sin_t, 8)));
    const bool narrow = num_seqs * T * token_stride < (int64_t(1) << 31) && total < (int64_t(1) << 30);
    if (pairs && narrow) launch_as<int32_t, 2>(x, token_stride, num_seqs, T, H, Dh, rope_dim, cos_t, sin_t, pos0,
                                               theta, inverse, stream, pos_dev);
    else if (pairs) launch_as<int64_t, 2>(x, token_stride, num_seqs, T, H, Dh, rope_dim, cos_t, sin_t, pos0, theta,
                                          inverse, stream, pos_dev);
    else if (narrow) launch_as<int32_t, 1>(x, token_stride, num_seqs, T, H, Dh, rope_dim, cos_t, sin_t, pos0, theta,
                                           inverse, stream, pos_dev);
    else launch_as<int64_t, 1>(x, token_stride, num_seqs, T, H, Dh, rope_dim, cos_t, sin_t, pos0, theta, inverse,
                               stream, pos_dev);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rope_table(float* cos, float* sin, int64_t T, int64_t rope_dim, int64_t pos0, double theta, cudaStream_t stream) {
    const int64_t total = T * (rope_dim / 2);
    if (total <= 0) return;
    k_rope_table<<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(cos, sin, T, rope_dim, pos0, theta);
    CUDA_CHECK(cudaGetLastError());
}

void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, const float* cos,
                  const float* sin, cudaStream_t stream) {
    launch(x, 0, num_seqs, T, H, Dh, rope_dim, cos, sin, 0, 0.0, false, stream);
}
void rope_backward(bf16* dx, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, const float* cos,
                   const float* sin, cudaStream_t stream) {
    launch(dx, 0, num_seqs, T, H, Dh, rope_dim, cos, sin, 0, 0.0, true, stream);
}
void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  double theta, cudaStream_t stream) {
    launch(x, 0, num_seqs, T, H, Dh, rope_dim, nullptr, nullptr, pos0, theta, false, stream);
}
void rope_backward(bf16* dx, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                   double theta, cudaStream_t stream) {
    launch(dx, 0, num_seqs, T, H, Dh, rope_dim, nullptr, nullptr, pos0, theta, true, stream);
}
void rope_forward_decode(bf16* x, int64_t H, int64_t Dh, int64_t rope_dim, const int32_t* pos, double theta,
                         cudaStream_t stream) {
    HYDRA_CUDA_REQUIRE(pos != nullptr, "rope_forward_decode: the position pointer is required");
    launch(x, 0, 1, 1, H, Dh, rope_dim, nullptr, nullptr, 0, theta, false, stream, pos);
}
void rope_forward_strided(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                          int64_t rope_dim, const float* cos, const float* sin, cudaStream_t stream) {
    launch(x, token_stride, num_seqs, T, H, Dh, rope_dim, cos, sin, 0, 0.0, false, stream);
}
void rope_backward_strided(bf16* dx, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                           int64_t rope_dim, const float* cos, const float* sin, cudaStream_t stream) {
    launch(dx, token_stride, num_seqs, T, H, Dh, rope_dim, cos, sin, 0, 0.0, true, stream);
}

}  // namespace hydra::cuda
