// Scale-normalised head fusion on the GPU (see fusion.h). The tensor is copied when not in place, then
// one warp per (token, normalised segment) rescales the segment in place (bf16-pair vector path for the
// usual shapes, element path otherwise). The backward gives warp
// (p, s) the tokens of part p and its slice of the scale-gradient partial sums, reduced in part order
// (deterministic, layer_util.cuh).
#include "ops/cuda/fusion.h"

#include <algorithm>
#include <initializer_list>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

using detail::warp_sum;

constexpr int kWarps = 8;

// hydra::FusionKind enumerators (model/hybrid_plan.h, declaration order; checked by
// bench/cuda_op_parity_layers.cu, which sees the full definition).
constexpr int kScaleNorm = 0, kNone = 1, kHymba = 2, kLaOnly = 3;

// The normalised segments of one token row. Segment s: elements [start, start + len) of the row, scale
// vector `scale` (len), and columns [col, col + len) of the partial-gradient row.
struct Segments {
    int kind;
    int64_t n_fa, n_la, Dh;
    const float *head_scale, *fa_scale, *la_scale;
    float f;
    __host__ __device__ int64_t count() const {
        if (kind == kScaleNorm) return n_fa + n_la;
        if (kind == kLaOnly) return n_la;
        return (n_fa > 0 ? 1 : 0) + 1;  // Hymba
    }
    __host__ __device__ int64_t cols() const { return kind == kLaOnly ? n_la * Dh : (n_fa + n_la) * Dh; }
    __device__ void get(int64_t s, int64_t& start, int64_t& len, const float*& scale, int64_t& col) const {
        if (kind == kScaleNorm) {
            start = s * Dh, len = Dh, scale = head_scale + s * Dh, col = s * Dh;
        } else if (kind == kLaOnly) {
            start = (n_fa + s) * Dh, len = Dh, scale = head_scale + s * Dh, col = s * Dh;
        } else if (n_fa > 0 && s == 0) {
            start = 0, len = n_fa * Dh, scale = fa_scale, col = 0;
        } else {
            start = n_fa * Dh, len = n_la * Dh, scale = la_scale, col = n_fa * Dh;
        }
    }
};

__global__ void k_fusion_forward(bf16* y, Segments sg, int64_t N, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t S = sg.count(), wi = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
    if (wi >= N * S) return;
    const int64_t n = wi / S, s = wi - n * S;
    int64_t start, len, col;
    const float* scale;
    sg.get(s, start, len, scale, col);
    bf16* x = y + n * (sg.n_fa + sg.n_la) * sg.Dh + start;
    float ss = 0.f;
    for (int64_t i = lane; i < len; i += 32) {
        const float v = __bfloat162float(x[i]);
        ss += v * v;
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / float(len) + eps);
    for (int64_t i = lane; i < len; i += 32)
        x[i] = __float2bfloat16_rn(sg.f * __bfloat162float(x[i]) * r * scale[i]);
}

// dx = f (r dy w - x r^3 mean(dy w x)), in place on dx (holding dy); partial dw += f dy x r.
__global__ void k_fusion_backward(bf16* dxall, float* __restrict__ partials, const bf16* __restrict__ heads,
                                  Segments sg, int64_t N, float eps, int64_t rpp, int64_t nparts) {
    const int lane = threadIdx.x & 31;
    const int64_t S = sg.count(), wi = blockIdx.x * int64_t(kWarps) + (threadIdx.x >> 5);
    if (wi >= nparts * S) return;
    const int64_t p = wi / S, s = wi - p * S;
    int64_t start, len, col;
    const float* w;
    sg.get(s, start, len, w, col);
    const int64_t row = (sg.n_fa + sg.n_la) * sg.Dh, C = sg.cols();
    float* pr = partials ? partials + p * C + col : nullptr;
    const int64_t n0 = p * rpp, n1 = min(N, n0 + rpp);
    for (int64_t n = n0; n < n1; ++n) {
        const bf16* x = heads + n * row + start;
        bf16* dx = dxall + n * row + start;
        float ss = 0.f, dot = 0.f;
        for (int64_t i = lane; i < len; i += 32) {
            const float xv = __bfloat162float(x[i]);
            ss += xv * xv;
            dot += __bfloat162float(dx[i]) * w[i] * xv;
        }
        ss = warp_sum(ss);
        dot = warp_sum(dot);
        const float r = 1.0f / sqrtf(ss / float(len) + eps);
        const float c = r * r * r * dot / float(len);
        for (int64_t i = lane; i < len; i += 32) {
            const float g = __bfloat162float(dx[i]), xv = __bfloat162float(x[i]);
            if (pr) {
                const float v = sg.f * g * xv * r;
                pr[i] = (n == n0) ? v : pr[i] + v;
            }
            dx[i] = __float2bfloat16_rn(sg.f * (r * g * w[i] - xv * c));
        }
    }
}

// ---- vector path: each lane owns NP bf16 pairs of its segment (elements 2 (lane + 32 j), +1), so the
// segment is read once with 4-byte accesses and the backward's scale-gradient terms stay in registers
// across the part's rows (added in row order, as the scalar kernel adds them). Needs even segment
// starts / lengths, len <= 64 NP, 4-byte aligned tensors and 8-byte aligned scales (see vec_pairs).

template <int NP>
__global__ void __launch_bounds__(kWarps * 32) k_fusion_forward_vec(bf16* y, Segments sg, int N, float eps) {
    const int lane = threadIdx.x & 31;
    const int S = int(sg.count()), wi = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (wi >= N * S) return;
    const int n = wi / S, s = wi - n * S;
    int64_t start, len, col;
    const float* scale;
    sg.get(s, start, len, scale, col);
    bf16* x = y + int64_t(n) * (sg.n_fa + sg.n_la) * sg.Dh + start;
    float2 v[NP];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        const int i = 2 * (lane + 32 * j);
        v[j] = i < len ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x + i))
                       : make_float2(0.f, 0.f);
        ss += v[j].x * v[j].x + v[j].y * v[j].y;
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / float(len) + eps), fr = sg.f * r;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        const int i = 2 * (lane + 32 * j);
        if (i >= len) break;
        const float2 w = *reinterpret_cast<const float2*>(scale + i);
        *reinterpret_cast<__nv_bfloat162*>(x + i) =
            __floats2bfloat162_rn(fr * v[j].x * w.x, fr * v[j].y * w.y);
    }
}

template <int NP>
__global__ void __launch_bounds__(kWarps * 32)
    k_fusion_backward_vec(bf16* dxall, float* __restrict__ partials, const bf16* __restrict__ heads,
                          Segments sg, int N, float eps, int rpp, int nparts) {
    const int lane = threadIdx.x & 31;
    const int S = int(sg.count()), wi = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (wi >= nparts * S) return;
    const int p = wi / S, s = wi - p * S;
    int64_t start, len, col;
    const float* w;
    sg.get(s, start, len, w, col);
    const int64_t row = (sg.n_fa + sg.n_la) * sg.Dh;
    float2 wv[NP], acc[NP];
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        const int i = 2 * (lane + 32 * j);
        wv[j] = i < len ? *reinterpret_cast<const float2*>(w + i) : make_float2(0.f, 0.f);
        acc[j] = make_float2(0.f, 0.f);
    }
    const int n0 = p * rpp, n1 = min(N, n0 + rpp);
    for (int n = n0; n < n1; ++n) {
        const bf16* x = heads + n * row + start;
        bf16* dx = dxall + n * row + start;
        float2 xv[NP], gv[NP];
        float ss = 0.f, dot = 0.f;
#pragma unroll
        for (int j = 0; j < NP; ++j) {
            const int i = 2 * (lane + 32 * j);
            const bool in = i < len;
            xv[j] = in ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x + i))
                       : make_float2(0.f, 0.f);
            gv[j] = in ? __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dx + i))
                       : make_float2(0.f, 0.f);
            ss += xv[j].x * xv[j].x + xv[j].y * xv[j].y;
            dot += gv[j].x * wv[j].x * xv[j].x + gv[j].y * wv[j].y * xv[j].y;
        }
        ss = warp_sum(ss);
        dot = warp_sum(dot);
        const float r = 1.0f / sqrtf(ss / float(len) + eps);
        const float c = r * r * r * dot / float(len);
#pragma unroll
        for (int j = 0; j < NP; ++j) {
            const int i = 2 * (lane + 32 * j);
            if (i >= len) break;
            acc[j].x += sg.f * gv[j].x * xv[j].x * r;
            acc[j].y += sg.f * gv[j].y * xv[j].y * r;
            *reinterpret_cast<__nv_bfloat162*>(dx + i) = __floats2bfloat162_rn(
                sg.f * (r * gv[j].x * wv[j].x - xv[j].x * c), sg.f * (r * gv[j].y * wv[j].y - xv[j].y * c));
        }
    }
    if (!partials) return;
    float* pr = partials + int64_t(p) * sg.cols() + col;
#pragma unroll
    for (int j = 0; j < NP; ++j) {
        const int i = 2 * (lane + 32 * j);
        if (i < len) *reinterpret_cast<float2*>(pr + i) = acc[j];
    }
}

Segments make_segments(FusionKind kind, int64_t n_fa, int64_t n_la, int64_t Dh, const FusionScales& p) {
    Segments sg{static_cast<int>(kind), n_fa, n_la, Dh, p.head_scale, p.fa_scale, p.la_scale, 1.f};
    if (sg.kind == kHymba) {
        sg.f = n_fa > 0 ? 0.5f : 1.f;
        HYDRA_CUDA_REQUIRE(p.la_scale && (n_fa == 0 || p.fa_scale),
                           "fusion: hymba needs fa_scale / la_scale");
    } else {
        HYDRA_CUDA_REQUIRE(p.head_scale, "fusion: scale-norm / la-only need head_scale");
    }
    return sg;
}

bool active(FusionKind kind, int64_t n_la) {
    const int k = static_cast<int>(kind);
    HYDRA_CUDA_REQUIRE(k >= 0 && k <= 3, "fusion: unknown kind " + std::to_string(k));
    return k != kNone && n_la > 0;
}

// Pairs per lane for the vector path (1, 2, 4 or 8), 0 = scalar path: every segment start / length even,
// the longest segment <= 512, int32 offsets, bf16 tensors 4-byte and fp32 scales 8-byte aligned.
int vec_pairs(const Segments& sg, int64_t N, std::initializer_list<const void*> bf16_ptrs) {
    const int64_t row = (sg.n_fa + sg.n_la) * sg.Dh;
    if (sg.Dh % 2 != 0 || N * row >= (int64_t(1) << 31) || N * sg.count() >= (int64_t(1) << 31)) return 0;
    for (const void* q : bf16_ptrs)
        if (reinterpret_cast<uintptr_t>(q) % 4 != 0) return 0;
    for (const float* q : {sg.head_scale, sg.fa_scale, sg.la_scale})
        if (reinterpret_cast<uintptr_t>(q) % 8 != 0) return 0;
    int64_t longest = sg.Dh;  // scale-norm / la-only: one head per segment
    if (sg.kind == kHymba) longest = std::max(sg.n_fa, sg.n_la) * sg.Dh;
    if (longest <= 64) return 1;
    if (longest <= 128) return 2;
    if (longest <= 256) return 4;
    if (longest <= 512) return 8;
    return 0;
}

// clang-format off
#define HYDRA_FUSION_VEC(N_, CALL) \
    switch (N_) {           \
        case 1: CALL(1); break; \
        case 2: CALL(2); break; \
        case 4: CALL(4); break; \
        default: CALL(8); break; \
    }
// clang-format on

}  // namespace

void fusion_forward(bf16* out, const bf16* heads, int64_t N, int64_t n_fa, int64_t n_la, int64_t Dh,
                    FusionKind kind, const FusionScales& scales, float eps, cudaStream_t stream) {
    const int64_t total = N * (n_fa + n_la) * Dh;
    if (total <= 0) return;
    if (out != heads)
        CUDA_CHECK(
            cudaMemcpyAsync(out, heads, size_t(total) * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
    if (!active(kind, n_la)) return;
    const Segments sg = make_segments(kind, n_fa, n_la, Dh, scales);
    if (const int np = vec_pairs(sg, N, {out})) {
        const unsigned grid = unsigned((N * sg.count() + kWarps - 1) / kWarps);
#define FWD(k) k_fusion_forward_vec<k><<<grid, kWarps * 32, 0, stream>>>(out, sg, int(N), eps)
        HYDRA_FUSION_VEC(np, FWD)
#undef FWD
    } else {
        k_fusion_forward<<<detail::grid_for(N * sg.count(), kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(
            out, sg, N, eps);
    }
    CUDA_CHECK(cudaGetLastError());
    const int64_t row = (n_fa + n_la) * Dh;
    if (scales.la_bias) bias_add(out + n_fa * Dh, scales.la_bias, N, n_la * Dh, row, stream);
}

void fusion_backward(bf16* dheads, const FusionScaleGrads& grads, const bf16* dout, const bf16* heads,
                     int64_t N, int64_t n_fa, int64_t n_la, int64_t Dh, FusionKind kind,
                     const FusionScales& scales, float eps, cudaStream_t stream) {
    const int64_t total = N * (n_fa + n_la) * Dh;
    if (total <= 0) return;
    if (dheads != dout)
        CUDA_CHECK(
            cudaMemcpyAsync(dheads, dout, size_t(total) * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
    if (!active(kind, n_la)) return;
    // The offsets' gradient: column sums of dout's LA heads, taken before the kernel overwrites them.
    if (grads.la_bias)
        bias_backward(grads.la_bias, dheads + n_fa * Dh, N, n_la * Dh, (n_fa + n_la) * Dh, stream);
    const Segments sg = make_segments(kind, n_fa, n_la, Dh, scales);
    const bool hymba = sg.kind == kHymba;
    const bool any_grad = hymba ? (grads.fa_scale || grads.la_scale) : grads.head_scale != nullptr;
    const int64_t rpp = detail::rows_per_part(N), np = detail::num_parts(N), C = sg.cols();
    detail::Scratch part(any_grad ? size_t(np * C) : 0, stream);
    if (const int npairs = vec_pairs(sg, N, {dheads, heads})) {
        const unsigned grid = unsigned((np * sg.count() + kWarps - 1) / kWarps);
#define BWD(k)               \
    k_fusion_backward_vec<k> \
        <<<grid, kWarps * 32, 0, stream>>>(dheads, part.get(), heads, sg, int(N), eps, int(rpp), int(np))
        HYDRA_FUSION_VEC(npairs, BWD)
#undef BWD
    } else {
        k_fusion_backward<<<detail::grid_for(np * sg.count(), kWarps, 0x7fffffffLL), kWarps * 32, 0,
                            stream>>>(dheads, part.get(), heads, sg, N, eps, rpp, np);
    }
    CUDA_CHECK(cudaGetLastError());
    if (!hymba) {
        if (grads.head_scale) detail::accumulate_partials(grads.head_scale, part.get(), np, C, C, stream);
    } else {
        if (grads.fa_scale && n_fa > 0)
            detail::accumulate_partials(grads.fa_scale, part.get(), np, n_fa * Dh, C, stream);
        if (grads.la_scale)
            detail::accumulate_partials(grads.la_scale, part.get() + n_fa * Dh, np, n_la * Dh, C, stream);
    }
    part.release();
}

}  // namespace hydra::cuda
