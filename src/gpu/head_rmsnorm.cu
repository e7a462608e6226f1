// Per-head RMSNorm on bf16 rows, forward in place and backward (see head_rmsnorm.h): one warp per
// (token, head) row.
#include "gpu/head_rmsnorm.h"

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::gpu {

namespace {

using cuda::detail::warp_sum;

constexpr int kMaxPerLane = 4;  // Dh <= 128: at most 4 columns per lane
constexpr int kWarps = 8;

// kSave = false: no copy, no statistics (inference); kSave = true also writes pre / rstd (either may be
// null). Same arithmetic in both, so training's forward equals inference's.
template <bool kSave>
__global__ void head_rmsnorm_kernel(__nv_bfloat16* x, int64_t stride, __nv_bfloat16* pre, int64_t pre_stride,
                                    float* rstd, const float* __restrict__ w, int64_t T, int H, int Dh,
                                    float eps) {
    const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (row >= T * H) return;
    __nv_bfloat16* p = x + (row / H) * stride + (row % H) * Dh;
    __nv_bfloat16* q = nullptr;
    if constexpr (kSave)
        if (pre) q = pre + (row / H) * pre_stride + (row % H) * Dh;
    float ss = 0.f;
    for (int d = lane; d < Dh; d += 32) {
        const __nv_bfloat16 b = p[d];
        if constexpr (kSave)
            if (q) q[d] = b;
        const float v = __bfloat162float(b);
        ss += v * v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float r = rsqrtf(ss / float(Dh) + eps);
    if constexpr (kSave)
        if (rstd && lane == 0) rstd[row] = r;
    for (int d = lane; d < Dh; d += 32) p[d] = __float2bfloat16_rn(__bfloat162float(p[d]) * r * w[d]);
}

// One warp per part of rpp consecutive rows (rows in order), partials row p = the part's sum of g x r.
__global__ void __launch_bounds__(kWarps * 32)
    head_rmsnorm_backward_kernel(__nv_bfloat16* dx, int64_t dx_stride, float* partials,
                                 const __nv_bfloat16* x, int64_t x_stride, const float* __restrict__ w,
                                 const float* __restrict__ rstd, int64_t rows, int H, int Dh, int64_t rpp,
                                 int64_t nparts) {
    const int lane = threadIdx.x & 31;
    const int64_t p = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (p >= nparts) return;
    float wv[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
        const int d = lane + 32 * j;
        wv[j] = d < Dh ? w[d] : 0.f;
        acc[j] = 0.f;
    }
    const int64_t r0 = p * rpp, r1 = min(rows, r0 + rpp);
    for (int64_t row = r0; row < r1; ++row) {
        __nv_bfloat16* g = dx + (row / H) * dx_stride + (row % H) * Dh;
        const __nv_bfloat16* xr = x + (row / H) * x_stride + (row % H) * Dh;
        const float r = rstd[row];
        float gv[kMaxPerLane], xv[kMaxPerLane];
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < kMaxPerLane; ++j) {
            const int d = lane + 32 * j;
            gv[j] = d < Dh ? __bfloat162float(g[d]) : 0.f;
            xv[j] = d < Dh ? __bfloat162float(xr[d]) : 0.f;
            dot += gv[j] * wv[j] * xv[j];
        }
        dot = warp_sum(dot);
        const float b = dot * r * r * r / float(Dh);
#pragma unroll
        for (int j = 0; j < kMaxPerLane; ++j) {
            const int d = lane + 32 * j;
            if (d >= Dh) break;
            g[d] = __float2bfloat16_rn(r * wv[j] * gv[j] - b * xv[j]);
            acc[j] += gv[j] * xv[j] * r;
        }
    }
    if (!partials) return;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < Dh) partials[p * Dh + d] = acc[j];
    }
}

template <bool kSave>
void launch_forward(__nv_bfloat16* x, int64_t token_stride, __nv_bfloat16* pre, int64_t pre_stride,
                    float* rstd, const float* w, int64_t T, int64_t H, int64_t Dh, float eps,
                    cudaStream_t stream) {
    if (T <= 0 || H <= 0) return;
    const int64_t threads = T * H * 32;
    head_rmsnorm_kernel<kSave><<<unsigned((threads + 255) / 256), 256, 0, stream>>>(
        x, token_stride, pre, pre_stride, rstd, w, T, int(H), int(Dh), eps);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void head_rmsnorm_forward(__nv_bfloat16* x, int64_t token_stride, __nv_bfloat16* pre, int64_t pre_stride,
                          float* rstd, const float* w, int64_t T, int64_t H, int64_t Dh, float eps,
                          cudaStream_t stream) {
    HYDRA_CUDA_REQUIRE(Dh > 0 && Dh <= 32 * kMaxPerLane, "head_rmsnorm_forward: head dim outside 1..128");
    if (!pre && !rstd)
        launch_forward<false>(x, token_stride, nullptr, 0, nullptr, w, T, H, Dh, eps, stream);
    else
        launch_forward<true>(x, token_stride, pre, pre_stride, rstd, w, T, H, Dh, eps, stream);
}

void head_rmsnorm_backward(__nv_bfloat16* dx, int64_t dx_stride, float* dw, const __nv_bfloat16* x,
                           int64_t x_stride, const float* w, const float* rstd, int64_t T, int64_t H,
                           int64_t Dh, cudaStream_t stream) {
    HYDRA_CUDA_REQUIRE(Dh > 0 && Dh <= 32 * kMaxPerLane, "head_rmsnorm_backward: head dim outside 1..128");
    const int64_t rows = T * H;
    if (rows <= 0) return;
    const int64_t rpp = cuda::detail::rows_per_part(rows), nparts = cuda::detail::num_parts(rows);
    cuda::detail::Scratch part(dw ? size_t(nparts * Dh) : 0, stream);
    head_rmsnorm_backward_kernel<<<unsigned((nparts + kWarps - 1) / kWarps), kWarps * 32, 0, stream>>>(
        dx, dx_stride, part.get(), x, x_stride, w, rstd, rows, int(H), int(Dh), rpp, nparts);
    CUDA_CHECK(cudaGetLastError());
    if (dw) cuda::detail::accumulate_partials(dw, part.get(), nparts, Dh, Dh, stream);
    part.release();
}

}  // namespace hydra::gpu
