// Rotary position embedding on the GPU (see rope.h), NEOX pairing (i, i + R/2). One thread per rotated
// pair; the angles come from an fp32 cos/sin table or are computed per pair in double.
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
__global__ void k_rope(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                       int64_t rope_dim, const float* __restrict__ cos_t, const float* __restrict__ sin_t, int64_t pos0,
                       const int32_t* __restrict__ pos_dev, double theta, bool inverse) {
    const int64_t half = rope_dim / 2, total = num_seqs * T * H * half;
    if (pos_dev) pos0 = int64_t(*pos_dev);
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = k % half;
        int64_t r = k / half;
        const int64_t h = r % H;
        r /= H;
        const int64_t t = r % T, s = r / T;
        float c, sn;
        if (cos_t) {
            c = cos_t[t * half + i];
            sn = sin_t[t * half + i];
        } else {
            const double inv_freq = pow(theta, -2.0 * double(i) / double(rope_dim));
            double sd, cd;
            sincos(double(pos0 + t) * inv_freq, &sd, &cd);
            c = float(cd);
            sn = float(sd);
        }
        if (inverse) sn = -sn;
        bf16* v = x + (s * T + t) * token_stride + h * Dh;
        const float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
        v[i] = __float2bfloat16_rn(a * c - b * sn);
        v[i + half] = __float2bfloat16_rn(b * c + a * sn);
    }
}

void launch(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim,
            const float* cos_t, const float* sin_t, int64_t pos0, double theta, bool inverse, cudaStream_t stream,
            const int32_t* pos_dev = nullptr) {
    if (token_stride == 0) token_stride = H * Dh;
    HYDRA_CUDA_REQUIRE(rope_dim % 2 == 0 && rope_dim <= Dh && token_stride >= H * Dh,
                "rope: rope_dim must be even and <= head_dim, token stride >= H * Dh");
    const int64_t total = num_seqs * T * H * (rope_dim / 2);
    if (total <= 0) return;
    k_rope<<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(x, token_stride, num_seqs, T, H, Dh, rope_dim,
                                                                       cos_t, sin_t, pos0, pos_dev, theta, inverse);
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
