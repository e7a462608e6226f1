// RMSNorm forward/backward on the GPU (see rmsnorm.h). One warp per row: the mean square is a warp
// sum, then a second pass over the (cached) row writes the output. The backward adds into the fp32
// residual gradient; dw is reduced deterministically (layer_util.cuh): warp p owns the rows of part p
// and its row of the partial sums.
#include "ops/cuda/rmsnorm.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

using detail::to_f;
using detail::warp_sum;

constexpr int kWarps = 8;

template <typename TOut>
__global__ void k_rmsnorm_forward(TOut* y, float* __restrict__ rstd, const float* x, const float* __restrict__ w,
                                  int64_t N, int64_t C, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t n = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
    if (n >= N) return;
    const float* xr = x + n * C;
    float ss = 0.f;
    for (int64_t c = lane; c < C; c += 32) ss += xr[c] * xr[c];
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / float(C) + eps);
    if (rstd && lane == 0) rstd[n] = r;
    TOut* yr = y + n * C;  // may alias x (fp32): each lane reads element c before writing it
    for (int64_t c = lane; c < C; c += 32) yr[c] = detail::from_f<TOut>(xr[c] * r * w[c]);
}

template <typename TDy>
__global__ void k_rmsnorm_backward(float* __restrict__ dx, float* __restrict__ partials, const TDy* __restrict__ dy,
                                   const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ rstd, int64_t N, int64_t C, int64_t rpp, int64_t nparts) {
    const int lane = threadIdx.x & 31;
    const int64_t p = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
    if (p >= nparts) return;
    float* pr = partials ? partials + p * C : nullptr;
    const int64_t n0 = p * rpp, n1 = min(N, n0 + rpp);
    for (int64_t n = n0; n < n1; ++n) {
        const float* xr = x + n * C;
        const TDy* dyr = dy + n * C;
        float* dxr = dx + n * C;
        const float r = rstd[n];
        float dot = 0.f;
        for (int64_t c = lane; c < C; c += 32) dot += to_f(dyr[c]) * w[c] * xr[c];
        dot = warp_sum(dot);
        const float b = dot * r * r * r / float(C);
        for (int64_t c = lane; c < C; c += 32) {
            const float g = to_f(dyr[c]), xv = xr[c];
            dxr[c] += r * w[c] * g - b * xv;
            if (pr) {
                const float v = g * xv * r;
                pr[c] = (n == n0) ? v : pr[c] + v;
            }
        }
    }
}

template <typename TOut>
void forward(TOut* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps,
             cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    k_rmsnorm_forward<<<detail::grid_for(N, kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(y, rstd, x, w, N, C, eps);
    CUDA_CHECK(cudaGetLastError());
}

template <typename TDy>
void backward(float* dx, float* dw, const TDy* dy, const float* x, const float* w, const float* rstd, int64_t N,
              int64_t C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int64_t rpp = detail::rows_per_part(N), np = detail::num_parts(N);
    detail::Scratch part(dw ? size_t(np * C) : 0, stream);
    k_rmsnorm_backward<<<detail::grid_for(np, kWarps), kWarps * 32, 0, stream>>>(dx, part.get(), dy, x, w, rstd, N, C,
                                                                                 rpp, np);
    CUDA_CHECK(cudaGetLastError());
    if (dw) detail::accumulate_partials(dw, part.get(), np, C, C, stream);
    part.release();
}

}  // namespace

void rmsnorm_forward(bf16* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps,
                     cudaStream_t stream) {
    forward(y, rstd, x, w, N, C, eps, stream);
}
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps,
                     cudaStream_t stream) {
    forward(y, rstd, x, w, N, C, eps, stream);
}
void rmsnorm_backward(float* dx, float* dw, const bf16* dy, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C, cudaStream_t stream) {
    backward(dx, dw, dy, x, w, rstd, N, C, stream);
}
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t N, int64_t C, cudaStream_t stream) {
    backward(dx, dw, dy, x, w, rstd, N, C, stream);
}

}  // namespace hydra::cuda
