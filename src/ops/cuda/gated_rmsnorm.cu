// Gated RMSNorm of the GDN output on the GPU (see gated_rmsnorm.h). One warp per (token, value head)
// row of D channels. The backward gives warp (p, h) the tokens of part p and its slice of the dw
// partial sums, reduced in part order (deterministic, layer_util.cuh).
#include "ops/cuda/gated_rmsnorm.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

using detail::sigmoidf_;
using detail::warp_sum;

constexpr int kWarps = 8;

__global__ void k_gated_forward(bf16* out, float* __restrict__ rstd, const bf16* o, const bf16* __restrict__ z,
                                int64_t zs, const float* __restrict__ w, int64_t N, int64_t HV, int64_t D, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
    if (row >= N * HV) return;
    const int64_t n = row / HV, h = row - n * HV;
    const bf16* orow = o + row * D;
    const bf16* zrow = z + n * zs + h * D;
    const float* wrow = w + h * D;
    float ss = 0.f;
    for (int64_t c = lane; c < D; c += 32) {
        const float v = __bfloat162float(orow[c]);
        ss += v * v;
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / float(D) + eps);
    if (rstd && lane == 0) rstd[row] = r;
    bf16* yrow = out + row * D;  // may alias o: each lane reads element c before writing it
    for (int64_t c = lane; c < D; c += 32) {
        const float zc = __bfloat162float(zrow[c]);
        yrow[c] = __float2bfloat16_rn(__bfloat162float(orow[c]) * r * wrow[c] * (zc * sigmoidf_(zc)));
    }
}

// u = w silu(z), out = o r u:  d_o = r u dy - o r^3 / D sum(dy u o);  dz = dy o r w silu'(z);
// dw += dy o r silu(z).
__global__ void k_gated_backward(bf16* d_o, bf16* dz, int64_t dzs, float* __restrict__ partials, const bf16* dout,
                                 const bf16* __restrict__ o, const bf16* __restrict__ z, int64_t zs,
                                 const float* __restrict__ w, const float* __restrict__ rstd, int64_t N, int64_t HV,
                                 int64_t D, int64_t rpp, int64_t nparts) {
    const int lane = threadIdx.x & 31;
    const int64_t wi = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
    if (wi >= nparts * HV) return;
    const int64_t p = wi / HV, h = wi - p * HV;
    const float* wrow = w + h * D;
    float* pr = partials ? partials + p * HV * D + h * D : nullptr;
    const int64_t n0 = p * rpp, n1 = min(N, n0 + rpp);
    for (int64_t n = n0; n < n1; ++n) {
        const int64_t row = n * HV + h;
        const bf16* dyr = dout + row * D;
        const bf16* orow = o + row * D;
        const bf16* zrow = z + n * zs + h * D;
        const float r = rstd[row];
        float dot = 0.f;
        for (int64_t c = lane; c < D; c += 32) {
            const float zc = __bfloat162float(zrow[c]);
            dot += __bfloat162float(dyr[c]) * (wrow[c] * zc * sigmoidf_(zc)) * __bfloat162float(orow[c]);
        }
        dot = warp_sum(dot);
        const float kk = dot * r * r * r / float(D);
        bf16* dor = d_o + row * D;
        bf16* dzr = dz + n * dzs + h * D;
        for (int64_t c = lane; c < D; c += 32) {
            // read everything at c before writing: d_o or dz may alias dout
            const float dy = __bfloat162float(dyr[c]), oc = __bfloat162float(orow[c]), zc = __bfloat162float(zrow[c]);
            const float s = sigmoidf_(zc), u = wrow[c] * zc * s;
            dor[c] = __float2bfloat16_rn(r * u * dy - kk * oc);
            dzr[c] = __float2bfloat16_rn(dy * oc * r * wrow[c] * s * (1.f + zc * (1.f - s)));
            if (pr) {
                const float v = dy * oc * r * zc * s;
                pr[c] = (n == n0) ? v : pr[c] + v;
            }
        }
    }
}

}  // namespace

void gated_rmsnorm_forward(bf16* out, float* rstd, const bf16* o, const bf16* z, int64_t z_stride, const float* w,
                           int64_t N, int64_t HV, int64_t D, float eps, cudaStream_t stream) {
    if (N <= 0 || HV <= 0 || D <= 0) return;
    if (z_stride == 0) z_stride = HV * D;
    HYDRA_CUDA_REQUIRE(z_stride >= HV * D, "gated_rmsnorm_forward: z row stride below HV * D");
    k_gated_forward<<<detail::grid_for(N * HV, kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(out, rstd, o, z, z_stride,
                                                                                              w, N, HV, D, eps);
    CUDA_CHECK(cudaGetLastError());
}

void gated_rmsnorm_backward(bf16* d_o, bf16* dz, int64_t dz_stride, float* dw, const bf16* dout, const bf16* o,
                            const bf16* z, int64_t z_stride, const float* w, const float* rstd, int64_t N, int64_t HV,
                            int64_t D, cudaStream_t stream) {
    if (N <= 0 || HV <= 0 || D <= 0) return;
    if (z_stride == 0) z_stride = HV * D;
    if (dz_stride == 0) dz_stride = HV * D;
    HYDRA_CUDA_REQUIRE(z_stride >= HV * D && dz_stride >= HV * D, "gated_rmsnorm_backward: row stride below HV * D");
    const int64_t rpp = detail::rows_per_part(N), np = detail::num_parts(N);
    detail::Scratch part(dw ? size_t(np * HV * D) : 0, stream);
    k_gated_backward<<<detail::grid_for(np * HV, kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(
        d_o, dz, dz_stride, part.get(), dout, o, z, z_stride, w, rstd, N, HV, D, rpp, np);
    CUDA_CHECK(cudaGetLastError());
    if (dw) detail::accumulate_partials(dw, part.get(), np, HV * D, HV * D, stream);
    part.release();
}

}  // namespace hydra::cuda
