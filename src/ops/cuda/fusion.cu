// Scale-normalised head fusion on the GPU (see fusion.h). The tensor is copied when not in place, then
// one warp per (token, normalised segment) rescales the segment in place. The backward gives warp
// (p, s) the tokens of part p and its slice of the scale-gradient partial sums, reduced in part order
// (deterministic, layer_util.cuh).
#include "ops/cuda/fusion.h"

#include "ops/cuda/cuda_check.h"
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
    for (int64_t i = lane; i < len; i += 32) x[i] = __float2bfloat16_rn(sg.f * __bfloat162float(x[i]) * r * scale[i]);
}

// dx = f (r dy w - x r^3 mean(dy w x)), in place on dx (holding dy); partial dw += f dy x r.
__global__ void k_fusion_backward(bf16* dxall, float* __restrict__ partials, const bf16* __restrict__ heads, Segments sg,
                                  int64_t N, float eps, int64_t rpp, int64_t nparts) {
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

Segments make_segments(FusionKind kind, int64_t n_fa, int64_t n_la, int64_t Dh, const FusionScales& p) {
    Segments sg{static_cast<int>(kind), n_fa, n_la, Dh, p.head_scale, p.fa_scale, p.la_scale, 1.f};
    if (sg.kind == kHymba) {
        sg.f = n_fa > 0 ? 0.5f : 1.f;
        HYDRA_CUDA_REQUIRE(p.la_scale && (n_fa == 0 || p.fa_scale), "fusion: hymba needs fa_scale / la_scale");
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

}  // namespace

void fusion_forward(bf16* out, const bf16* heads, int64_t N, int64_t n_fa, int64_t n_la, int64_t Dh, FusionKind kind,
                    const FusionScales& scales, float eps, cudaStream_t stream) {
    const int64_t total = N * (n_fa + n_la) * Dh;
    if (total <= 0) return;
    if (out != heads)
        CUDA_CHECK(cudaMemcpyAsync(out, heads, size_t(total) * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
    if (!active(kind, n_la)) return;
    const Segments sg = make_segments(kind, n_fa, n_la, Dh, scales);
    k_fusion_forward<<<detail::grid_for(N * sg.count(), kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(out, sg, N, eps);
    CUDA_CHECK(cudaGetLastError());
}

void fusion_backward(bf16* dheads, const FusionScaleGrads& grads, const bf16* dout, const bf16* heads, int64_t N,
                     int64_t n_fa, int64_t n_la, int64_t Dh, FusionKind kind, const FusionScales& scales, float eps,
                     cudaStream_t stream) {
    const int64_t total = N * (n_fa + n_la) * Dh;
    if (total <= 0) return;
    if (dheads != dout)
        CUDA_CHECK(cudaMemcpyAsync(dheads, dout, size_t(total) * sizeof(bf16), cudaMemcpyDeviceToDevice, stream));
    if (!active(kind, n_la)) return;
    const Segments sg = make_segments(kind, n_fa, n_la, Dh, scales);
    const bool hymba = sg.kind == kHymba;
    const bool any_grad = hymba ? (grads.fa_scale || grads.la_scale) : grads.head_scale != nullptr;
    const int64_t rpp = detail::rows_per_part(N), np = detail::num_parts(N), C = sg.cols();
    detail::Scratch part(any_grad ? size_t(np * C) : 0, stream);
    k_fusion_backward<<<detail::grid_for(np * sg.count(), kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(
        dheads, part.get(), heads, sg, N, eps, rpp, np);
    CUDA_CHECK(cudaGetLastError());
    if (!hymba) {
        if (grads.head_scale) detail::accumulate_partials(grads.head_scale, part.get(), np, C, C, stream);
    } else {
        if (grads.fa_scale && n_fa > 0) detail::accumulate_partials(grads.fa_scale, part.get(), np, n_fa * Dh, C, stream);
        if (grads.la_scale)
            detail::accumulate_partials(grads.la_scale, part.get() + n_fa * Dh, np, n_la * Dh, C, stream);
    }
    part.release();
}

}  // namespace hydra::cuda
