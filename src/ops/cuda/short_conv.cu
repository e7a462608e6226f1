// GDN causal depthwise short conv + SiLU on the GPU (see short_conv.h). One thread per (sequence,
// block of kL positions, channel), channels fastest so a warp reads consecutive channels of a token row;
// a thread loads its kL + W - 1 input rows into registers up front (W is a template parameter, 1..8), so
// the loads overlap instead of forming a chain. The backward recomputes the
// pre-activation and writes its dw column sums per block into a partial buffer reduced in block order
// (deterministic, layer_util.cuh).
#include "ops/cuda/short_conv.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kL = 16;  // positions per thread (few enough to keep in registers, loads issued together)

// Row j of xc = [prev; x] for sequence b, channel d (j in [0, W-1+T)).
template <int W>
__device__ __forceinline__ float xc_at(const bf16* x, int64_t xs, const float* prev, int64_t b, int64_t T, int64_t D,
                                       int64_t d, int64_t j) {
    if (j < W - 1) return prev ? prev[(b * (W - 1) + j) * D + d] : 0.f;
    return __bfloat162float(x[(b * T + j - (W - 1)) * xs + d]);
}

template <int W>
__global__ void k_conv_forward(bf16* __restrict__ out, const bf16* __restrict__ x, int64_t xs,
                               const float* __restrict__ w, const float* __restrict__ prev, int64_t B, int64_t T,
                               int64_t D, int64_t nch) {
    const int64_t total = B * nch * D, J = W - 1 + T;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t d = k % D, r = k / D, c = r % nch, b = r / nch;
        const int64_t t0 = c * kL;
        float wr[W];
#pragma unroll
        for (int i = 0; i < W; ++i) wr[i] = w[d * W + i];
        // xv[j] = xc[t0 + j]: every load issued before any use (the loads, not the math, bound this kernel)
        float xv[kL + W - 1];
#pragma unroll
        for (int j = 0; j < kL + W - 1; ++j) xv[j] = (t0 + j < J) ? xc_at<W>(x, xs, prev, b, T, D, d, t0 + j) : 0.f;
#pragma unroll
        for (int t = 0; t < kL; ++t) {
            if (t0 + t >= T) break;
            float pre = 0.f;
#pragma unroll
            for (int i = 0; i < W; ++i) pre += wr[i] * xv[t + i];
            out[(b * T + t0 + t) * D + d] = __float2bfloat16_rn(pre * detail::sigmoidf_(pre));
        }
    }
}

// prev_out[b, r] = xc[b, T + r], r < W-1. All loads before the stores: prev_out may alias prev.
template <int W>
__global__ void k_conv_next_prev(float* prev_out, const bf16* __restrict__ x, int64_t xs, const float* prev, int64_t B,
                                 int64_t T, int64_t D) {
    const int64_t total = B * D;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t d = k % D, b = k / D;
        float v[W];
#pragma unroll
        for (int r = 0; r < W - 1; ++r) v[r] = xc_at<W>(x, xs, prev, b, T, D, d, T + r);
#pragma unroll
        for (int r = 0; r < W - 1; ++r) prev_out[(b * (W - 1) + r) * D + d] = v[r];
    }
}

// Thread (b, c, d) owns rows j in [c kL, c kL + kL) of d xc (the gradient of [prev; x]):
//   dxc[j] = sum_i w[i] dpre[j - i] (+ dprev_out[j - T] for j >= T),  dpre[t] = dout[t] silu'(pre[t])
// and the dw terms of the positions t = j < T: dw[d, i] += dpre[t] xc[t + i]. It recomputes pre for the
// W-1 positions before its rows too; all its loads are issued up front into registers.
template <int W>
__global__ void k_conv_backward(bf16* __restrict__ dx, int64_t dxs, float* __restrict__ partials,
                                float* __restrict__ dprev, const bf16* __restrict__ dout,
                                const float* __restrict__ dprev_out, const bf16* __restrict__ x, int64_t xs,
                                const float* __restrict__ w, const float* __restrict__ prev, int64_t B, int64_t T,
                                int64_t D, int64_t nch) {
    constexpr int NT = kL + W - 1;  // positions t in [j0 - (W-1), j0 + kL) whose dpre the rows need
    const int64_t total = B * nch * D, J = W - 1 + T;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t d = k % D, r = k / D, c = r % nch, b = r / nch;
        const int64_t j0 = c * kL, tb = j0 - (W - 1);
        float wr[W], dwp[W];
#pragma unroll
        for (int i = 0; i < W; ++i) {
            wr[i] = w[d * W + i];
            dwp[i] = 0.f;
        }
        float xv[NT + W - 1];  // xv[m] = xc[tb + m]
#pragma unroll
        for (int m = 0; m < NT + W - 1; ++m) {
            const int64_t j = tb + m;
            xv[m] = (j >= 0 && j < J) ? xc_at<W>(x, xs, prev, b, T, D, d, j) : 0.f;
        }
        float dyv[NT];  // dout at t = tb + m
#pragma unroll
        for (int m = 0; m < NT; ++m) {
            const int64_t t = tb + m;
            dyv[m] = (t >= 0 && t < T) ? __bfloat162float(dout[(b * T + t) * D + d]) : 0.f;
        }
        float dpv[NT];  // dpre[tb + m] (0 outside [0, T))
#pragma unroll
        for (int m = 0; m < NT; ++m) {
            float pre = 0.f;
#pragma unroll
            for (int i = 0; i < W; ++i) pre += wr[i] * xv[m + i];
            const float s = detail::sigmoidf_(pre);
            dpv[m] = dyv[m] * s * (1.f + pre * (1.f - s));  // dyv = 0 outside [0, T)
            if (m >= W - 1) {  // t = j0 + (m - (W-1)) is one of this thread's rows: its dw terms
#pragma unroll
                for (int i = 0; i < W; ++i) dwp[i] += dpv[m] * xv[m + i];
            }
        }
#pragma unroll
        for (int rr = 0; rr < kL; ++rr) {
            const int64_t j = j0 + rr;
            if (j >= J) break;
            float acc = 0.f;
#pragma unroll
            for (int i = 0; i < W; ++i) acc += wr[i] * dpv[W - 1 + rr - i];
            if (dprev_out && j >= T) acc += dprev_out[(b * (W - 1) + (j - T)) * D + d];
            if (j < W - 1) {
                if (dprev) dprev[(b * (W - 1) + j) * D + d] = acc;
            } else {
                dx[(b * T + (j - (W - 1))) * dxs + d] = __float2bfloat16_rn(acc);
            }
        }
        if (partials) {
            float* pr = partials + (b * nch + c) * (D * W) + d * W;
#pragma unroll
            for (int i = 0; i < W; ++i) pr[i] = dwp[i];
        }
    }
}

template <int W>
void forward_w(bf16* out, float* prev_out, const bf16* x, int64_t xs, const float* w, const float* prev, int64_t B,
               int64_t T, int64_t D, cudaStream_t stream) {
    const int64_t nch = (T + kL - 1) / kL;
    if (T > 0) {
        k_conv_forward<W><<<detail::grid_for(B * nch * D, kThreads), kThreads, 0, stream>>>(out, x, xs, w, prev, B, T,
                                                                                          D, nch);
        CUDA_CHECK(cudaGetLastError());
    }
    if (prev_out && W > 1) {
        k_conv_next_prev<W><<<detail::grid_for(B * D, kThreads), kThreads, 0, stream>>>(prev_out, x, xs, prev, B, T, D);
        CUDA_CHECK(cudaGetLastError());
    }
}

template <int W>
void backward_w(bf16* dx, int64_t dxs, float* dw, float* dprev, const bf16* dout, const float* dprev_out,
                const bf16* x, int64_t xs, const float* w, const float* prev, int64_t B, int64_t T, int64_t D,
                cudaStream_t stream) {
    const int64_t nch = (W - 1 + T + kL - 1) / kL;
    const int64_t nparts = B * nch;
    detail::Scratch part(dw ? size_t(nparts * D * W) : 0, stream);
    k_conv_backward<W><<<detail::grid_for(B * nch * D, kThreads), kThreads, 0, stream>>>(
        dx, dxs, part.get(), dprev, dout, dprev_out, x, xs, w, prev, B, T, D, nch);
    CUDA_CHECK(cudaGetLastError());
    if (dw) detail::accumulate_partials(dw, part.get(), nparts, D * W, D * W, stream);
    part.release();
}

#define HYDRA_CONV_DISPATCH(W, CALL)                                           \
    switch (W) {                                                               \
        case 1: CALL(1); break;                                                \
        case 2: CALL(2); break;                                                \
        case 3: CALL(3); break;                                                \
        case 4: CALL(4); break;                                                \
        case 5: CALL(5); break;                                                \
        case 6: CALL(6); break;                                                \
        case 7: CALL(7); break;                                                \
        case 8: CALL(8); break;                                                \
        default: HYDRA_CUDA_REQUIRE(false, "short_conv: kernel width " + std::to_string(W) + " outside 1..8"); \
    }

}  // namespace

void short_conv_forward(bf16* out, float* prev_out, const bf16* x, int64_t x_stride, const float* w, const float* prev,
                        int64_t B, int64_t T, int64_t D, int64_t W, cudaStream_t stream) {
    if (B <= 0 || D <= 0 || T < 0) return;
    if (x_stride == 0) x_stride = D;
    HYDRA_CUDA_REQUIRE(x_stride >= D, "short_conv_forward: row stride below the channel count");
#define FWD(w_) forward_w<w_>(out, prev_out, x, x_stride, w, prev, B, T, D, stream)
    HYDRA_CONV_DISPATCH(W, FWD)
#undef FWD
}

void short_conv_backward(bf16* dx, int64_t dx_stride, float* dw, float* dprev, const bf16* dout,
                         const float* dprev_out, const bf16* x, int64_t x_stride, const float* w, const float* prev,
                         int64_t B, int64_t T, int64_t D, int64_t W, cudaStream_t stream) {
    if (B <= 0 || D <= 0 || T < 0) return;
    if (x_stride == 0) x_stride = D;
    if (dx_stride == 0) dx_stride = D;
    HYDRA_CUDA_REQUIRE(x_stride >= D && dx_stride >= D, "short_conv_backward: row stride below the channel count");
#define BWD(w_) backward_w<w_>(dx, dx_stride, dw, dprev, dout, dprev_out, x, x_stride, w, prev, B, T, D, stream)
    HYDRA_CONV_DISPATCH(W, BWD)
#undef BWD
}

}  // namespace hydra::cuda
