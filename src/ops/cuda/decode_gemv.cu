// Fused single-row GEMVs for decode (see decode_gemv.h). A block of kWarps warps stages the input row in
// shared memory as fp32 (normalized and rounded for rmsnorm_gemv, converted from bf16 otherwise); each
// warp then computes kRowsPerWarp output rows, lane l reading 8 consecutive weights per step at columns
// 8 (l + 32 j) (16-byte loads), and a warp reduction gives each dot product.
#include "ops/cuda/decode_gemv.h"

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

using detail::warp_sum;

constexpr int kWarps = 8;
constexpr int kRowsPerWarp = 2;
constexpr int64_t kMaxIn = 12288;  // the staged row in the default 48 KB of shared memory

// Dot product of W's row (in elements) with xs (shared, fp32) by one warp; vec: 16-byte loads allowed.
__device__ __forceinline__ float row_dot(const bf16* __restrict__ wr, const float* xs, int64_t in, bool vec) {
    const int lane = threadIdx.x & 31;
    float acc = 0.f;
    if (vec) {
        for (int64_t c = int64_t(lane) * 8; c < in; c += 256) {
            const uint4 u = *reinterpret_cast<const uint4*>(wr + c);
            const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float2 f = __bfloat1622float2(p[j]);
                acc += f.x * xs[c + 2 * j] + f.y * xs[c + 2 * j + 1];
            }
        }
    } else {
        for (int64_t c = lane; c < in; c += 32) acc += __bfloat162float(wr[c]) * xs[c];
    }
    return warp_sum(acc);
}

// The block's sum of x^2 (every thread gets it).
__device__ float block_sum_squares(const float* x, int64_t in, float* red) {
    float ss = 0.f;
    for (int64_t c = threadIdx.x; c < in; c += blockDim.x) ss += x[c] * x[c];
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float t = 0.f;
    for (int i = 0; i < kWarps; ++i) t += red[i];
    return t;
}

// f(o) for each output row o of the calling warp.
template <class F>
__device__ __forceinline__ void each_row(int64_t out, const F& f) {
    const int64_t row0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRowsPerWarp;
    for (int k = 0; k < kRowsPerWarp; ++k) {
        if (row0 + k >= out) return;
        f(row0 + k);
    }
}

// The bf16 input row in shared memory as fp32, for the whole block.
__device__ __forceinline__ void stage_row(float* xs, const bf16* __restrict__ x, int64_t in) {
    for (int64_t c = threadIdx.x; c < in; c += blockDim.x) xs[c] = __bfloat162float(x[c]);
    __syncthreads();
}

__global__ void k_rmsnorm_gemv(bf16* __restrict__ y, bf16* __restrict__ xn, const float* __restrict__ x,
                               const float* __restrict__ w_norm, float eps, const bf16* __restrict__ W,
                               int64_t ld_w, int64_t in, int64_t out, bool vec) {
    extern __shared__ float xs[];
    __shared__ float red[kWarps];
    // the same rstd as the RMSNorm kernel: 1 / sqrt(mean(x^2) + eps), then x * r * w rounded to bf16
    const float r = 1.0f / sqrtf(block_sum_squares(x, in, red) / float(in) + eps);
    for (int64_t c = threadIdx.x; c < in; c += blockDim.x) {
        const bf16 v = __float2bfloat16_rn(x[c] * r * w_norm[c]);
        xs[c] = __bfloat162float(v);
        if (xn && blockIdx.x == 0) xn[c] = v;
    }
    __syncthreads();
    each_row(out, [&](int64_t o) {
        const float d = row_dot(W + o * ld_w, xs, in, vec);
        if ((threadIdx.x & 31) == 0) y[o] = __float2bfloat16_rn(d);
    });
}

__global__ void k_gemv_add(float* y, const float* r, const bf16* __restrict__ x, const bf16* __restrict__ W,
                           int64_t ld_w, int64_t in, int64_t out, bool vec) {
    extern __shared__ float xs[];
    stage_row(xs, x, in);
    each_row(out, [&](int64_t o) {
        const float d = row_dot(W + o * ld_w, xs, in, vec);
        if ((threadIdx.x & 31) == 0) y[o] = r[o] + d;  // r[o] read before y[o] is written (y may alias r)
    });
}

__global__ void k_gemv_swiglu(bf16* __restrict__ act, const bf16* __restrict__ x, const bf16* __restrict__ Wg,
                              const bf16* __restrict__ Wu, int64_t ld_w, int64_t in, int64_t out, bool vec) {
    extern __shared__ float xs[];
    stage_row(xs, x, in);
    each_row(out, [&](int64_t o) {
        // gate and up rounded to bf16 as the GEMM's output would be, then SwiGLU's arithmetic
        const float g = __bfloat162float(__float2bfloat16_rn(row_dot(Wg + o * ld_w, xs, in, vec)));
        const float u = __bfloat162float(__float2bfloat16_rn(row_dot(Wu + o * ld_w, xs, in, vec)));
        if ((threadIdx.x & 31) == 0) act[o] = __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
    });
}

void check_sizes(const char* what, int64_t in, int64_t out, int64_t ld_w) {
    HYDRA_CHECK(in >= 1 && in <= kMaxIn && out >= 1 && ld_w >= in,
                "{}: in {} (1..{}), out {} (>= 1), ld_w {} (>= in)", what, in, kMaxIn, out, ld_w);
}

bool vec_ok(int64_t in, int64_t ld_w, std::initializer_list<const void*> ws) {
    bool ok = in % 8 == 0 && ld_w % 8 == 0;
    for (const void* p : ws) ok = ok && reinterpret_cast<uintptr_t>(p) % 16 == 0;
    return ok;
}

unsigned blocks_for(int64_t out) {
    return unsigned((out + kWarps * kRowsPerWarp - 1) / (kWarps * kRowsPerWarp));
}

}  // namespace

void rmsnorm_gemv(bf16* y, bf16* xn, const float* x, const float* w_norm, float eps, const bf16* W,
                  int64_t ld_w, int64_t in, int64_t out, cudaStream_t stream) {
    if (ld_w == 0) ld_w = in;
    check_sizes("rmsnorm_gemv", in, out, ld_w);
    const size_t smem = size_t(in) * sizeof(float);
    k_rmsnorm_gemv<<<blocks_for(out), kWarps * 32, smem, stream>>>(y, xn, x, w_norm, eps, W, ld_w, in, out,
                                                                   vec_ok(in, ld_w, {W}));
    CUDA_CHECK(cudaGetLastError());
}

void gemv_add(float* y, const float* r, const bf16* x, const bf16* W, int64_t ld_w, int64_t in, int64_t out,
              cudaStream_t stream) {
    if (ld_w == 0) ld_w = in;
    check_sizes("gemv_add", in, out, ld_w);
    const size_t smem = size_t(in) * sizeof(float);
    k_gemv_add<<<blocks_for(out), kWarps * 32, smem, stream>>>(y, r, x, W, ld_w, in, out,
                                                               vec_ok(in, ld_w, {W}));
    CUDA_CHECK(cudaGetLastError());
}

void gemv_swiglu(bf16* act, const bf16* x, const bf16* Wg, const bf16* Wu, int64_t ld_w, int64_t in,
                 int64_t out, cudaStream_t stream) {
    if (ld_w == 0) ld_w = in;
    check_sizes("gemv_swiglu", in, out, ld_w);
    const size_t smem = size_t(in) * sizeof(float);
    k_gemv_swiglu<<<blocks_for(out), kWarps * 32, smem, stream>>>(act, x, Wg, Wu, ld_w, in, out,
                                                                  vec_ok(in, ld_w, {Wg, Wu}));
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
