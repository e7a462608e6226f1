// Gated RMSNorm of the GDN output on the GPU (see gated_rmsnorm.h).
//
// One warp per (token, value head) row of D channels. A lane owns K groups of V consecutive channels,
// c = (k * 32 + lane) * V (V = 2: bf16x2 4-byte accesses, a warp moves 128 contiguous bytes per load;
// V = 1 is the fallback for odd D / strides / pointers; checked at run time), held in registers for the
// whole row: D <= 32 V K with K in {1, 2, 4}. A warp handles R rows of one head h = blockIdx.y at a time
// (R = 4 / K) and issues all their loads before the first reduction, so enough bytes are in flight per
// lane; no index math needs a division. Rows wider than 32 V 4 channels (or more than 65535 heads) take
// the generic kernels (a strided loop over the row, one warp per row).
//
// The backward gives warp (p, h) the tokens of part p (detail::rows_per_part(N) tokens) and its slice
// of the dw partial sums; the lane accumulates its channels' terms in registers in token order and
// writes the part's partial row once; accumulate_partials adds the parts in order (deterministic,
// layer_util.cuh).
#include "ops/cuda/gated_rmsnorm.h"

#include <cstdint>
#include <type_traits>

#include "ops/cuda/bf16_pack.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

using detail::sigmoidf_;
using detail::warp_sum;

constexpr int kWarps = 8;
constexpr int kMaxK = 4;  // register-resident rows: D <= 32 * V * kMaxK

using namespace bf16_pack;  // packed bf16 vectors

// Forward. Grid (ceil(N / (kWarps R)), HV); warp rows: tokens n0 .. n0+R-1 of head h = blockIdx.y.
template <int V, int K, int R>
__global__ void __launch_bounds__(kWarps * 32)
    k_gated_forward(bf16* out, float* __restrict__ rstd, const bf16* o, const bf16* __restrict__ z,
                    int64_t zs, const float* __restrict__ w, int64_t N, int HV, int D, float eps) {
    const int lane = int(threadIdx.x) & 31;
    const int h = int(blockIdx.y);
    const int64_t n0 = (int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * R;
    if (n0 >= N) return;  // warp-uniform (no shuffles are skipped by part of a warp)

    float wv[K][V];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int c = (k * 32 + lane) * V;  // D % V == 0: all V channels valid when c < D
#pragma unroll
        for (int v = 0; v < V; ++v) wv[k][v] = c < D ? __ldg(w + int64_t(h) * D + c + v) : 0.f;
    }
    // All loads of the R rows first (zeros for rows >= N and channels >= D).
    raw_t<V> ov[R][K], zv[R][K];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int64_t n = n0 + r, row = n * HV + h;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int c = (k * 32 + lane) * V;
            const bool in = n < N && c < D;
            ov[r][k] = in ? raw_ld<V>(o + row * D + c) : raw_t<V>(0);
            zv[r][k] = in ? raw_ldg<V>(z + n * zs + int64_t(h) * D + c) : raw_t<V>(0);
        }
    }
    float ss[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        ss[r] = 0.f;
#pragma unroll
        for (int k = 0; k < K; ++k)
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const float x = raw_get<V>(ov[r][k], v);
                ss[r] += x * x;
            }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) ss[r] = warp_sum(ss[r]);  // R independent butterflies, interleaved
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int64_t n = n0 + r, row = n * HV + h;
        if (n >= N) break;  // warp-uniform
        const float rs = 1.0f / sqrtf(ss[r] / float(D) + eps);
        if (rstd && lane == 0) rstd[row] = rs;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int c = (k * 32 + lane) * V;
            if (c >= D) continue;
            // out may alias o: this lane loaded these elements (above) before it writes them.
            float y[V];
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const float zc = raw_get<V>(zv[r][k], v);
                y[v] = raw_get<V>(ov[r][k], v) * rs * wv[k][v] * (zc * sigmoidf_(zc));
            }
            raw_st<V>(out + row * D + c, raw_pack<V>(y));
        }
    }
}

// u = w silu(z), out = o r u:  d_o = r u dy - o r^3 / D sum(dy u o);  dz = dy o r w silu'(z);
// dw += dy o r silu(z).
// __launch_bounds__(.., 4): at most 64 registers, 4 blocks (32 warps) per SM to keep loads in flight.
// Grid (ceil(nparts / kWarps), HV); warp (p, h) handles tokens [p rpp, min(N, (p+1) rpp)) of head h, R
// at a time, and writes partials[p, h, :] (nparts, HV, D) once. d_o or dz may alias dout: the R rows'
// dout is loaded before any of their outputs is stored, each element by the lane that writes it.
template <int V, int K, int R>
__global__ void __launch_bounds__(kWarps * 32, 4)
    k_gated_backward(bf16* d_o, bf16* dz, int64_t dzs, float* __restrict__ partials, const bf16* dout,
                     const bf16* __restrict__ o, const bf16* __restrict__ z, int64_t zs,
                     const float* __restrict__ w, const float* __restrict__ rstd, int64_t N, int HV, int D,
                     int64_t rpp, int64_t nparts) {
    const int lane = int(threadIdx.x) & 31;
    const int h = int(blockIdx.y);
    const int64_t p = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if (p >= nparts) return;  // warp-uniform
    const int64_t n0 = p * rpp, n1 = min(N, n0 + rpp);

    float wv[K][V], dwa[K][V];
#pragma unroll
    for (int k = 0; k < K; ++k) {
        const int c = (k * 32 + lane) * V;
#pragma unroll
        for (int v = 0; v < V; ++v) {
            wv[k][v] = c < D ? __ldg(w + int64_t(h) * D + c + v) : 0.f;
            dwa[k][v] = -0.f;  // the additive identity: the part's first term is kept bit for bit
        }
    }
    for (int64_t nb = n0; nb < n1; nb += R) {
        raw_t<V> gv[R][K], ov[R][K], zv[R][K];
        float rs[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int64_t n = nb + r, row = n * HV + h;
            rs[r] = n < n1 ? __ldg(rstd + row) : 0.f;
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const int c = (k * 32 + lane) * V;
                const bool in = n < n1 && c < D;
                gv[r][k] = in ? raw_ld<V>(dout + row * D + c) : raw_t<V>(0);
                ov[r][k] = in ? raw_ldg<V>(o + row * D + c) : raw_t<V>(0);
                zv[r][k] = in ? raw_ldg<V>(z + n * zs + int64_t(h) * D + c) : raw_t<V>(0);
            }
        }
        float sg[R][K][V], dot[R];  // sigmoid(z); sum_c dy u o
#pragma unroll
        for (int r = 0; r < R; ++r) {
            dot[r] = 0.f;
#pragma unroll
            for (int k = 0; k < K; ++k)
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const float zc = raw_get<V>(zv[r][k], v);
                    sg[r][k][v] = sigmoidf_(zc);
                    dot[r] +=
                        raw_get<V>(gv[r][k], v) * (wv[k][v] * zc * sg[r][k][v]) * raw_get<V>(ov[r][k], v);
                }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) dot[r] = warp_sum(dot[r]);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int64_t n = nb + r, row = n * HV + h;
            if (n >= n1) break;  // warp-uniform
            const float rr = rs[r], kk = dot[r] * rr * rr * rr / float(D);
#pragma unroll
            for (int k = 0; k < K; ++k) {
                const int c = (k * 32 + lane) * V;
                if (c >= D) continue;
                float dov[V], dzv[V];
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    const float dy = raw_get<V>(gv[r][k], v), oc = raw_get<V>(ov[r][k], v);
                    const float zc = raw_get<V>(zv[r][k], v), s = sg[r][k][v], u = wv[k][v] * zc * s;
                    dov[v] = rr * u * dy - kk * oc;
                    dzv[v] = dy * oc * rr * wv[k][v] * s * (1.f + zc * (1.f - s));
                    dwa[k][v] += dy * oc * rr * zc * s;
                }
                raw_st<V>(d_o + row * D + c, raw_pack<V>(dov));
                raw_st<V>(dz + n * dzs + int64_t(h) * D + c, raw_pack<V>(dzv));
            }
        }
    }
    if (partials) {
        float* pr = partials + (p * HV + h) * D;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            const int c = (k * 32 + lane) * V;
            if (c >= D) continue;
            if constexpr (V == 2)
                *reinterpret_cast<float2*>(pr + c) = make_float2(dwa[k][0], dwa[k][1]);
            else
                pr[c] = dwa[k][0];
        }
    }
}

// ---- generic kernels (rows wider than 32 V kMaxK channels, or HV > 65535): a strided loop per row ----

__global__ void k_gated_forward_generic(bf16* out, float* __restrict__ rstd, const bf16* o,
                                        const bf16* __restrict__ z, int64_t zs, const float* __restrict__ w,
                                        int64_t N, int64_t HV, int64_t D, float eps) {
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

// Warp (p, h): the tokens of part p, its dw partial row slice accumulated in place (wide rows only).
__global__ void k_gated_backward_generic(bf16* d_o, bf16* dz, int64_t dzs, float* __restrict__ partials,
                                         const bf16* dout, const bf16* __restrict__ o,
                                         const bf16* __restrict__ z, int64_t zs, const float* __restrict__ w,
                                         const float* __restrict__ rstd, int64_t N, int64_t HV, int64_t D,
                                         int64_t rpp, int64_t nparts) {
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
            const float dy = __bfloat162float(dyr[c]), oc = __bfloat162float(orow[c]),
                        zc = __bfloat162float(zrow[c]);
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

bool aligned(const void* p, int bytes) {
    return reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) == 0;
}

// Lane vector groups K (1, 2 or 4; 0 = too wide, generic kernels) for rows of D channels in V-groups.
int pick_k(int64_t D, int V, int64_t HV) {
    if (HV > 65535) return 0;
    const int64_t groups = (D / V + 31) / 32;
    return groups <= 1 ? 1 : groups <= 2 ? 2 : groups <= kMaxK ? kMaxK : 0;
}

// Calls f(Int<V>(), Int<K>()) for the instantiated pair (V 1 or 2, K 1, 2 or kMaxK); false when K is 0
// (rows too wide for registers: the caller runs the generic kernel).
template <int N>
using Int = std::integral_constant<int, N>;
template <class F>
bool dispatch_vk(int V, int K, F&& f) {
    auto with_k = [&](auto v) {
        if (K == 1)
            f(v, Int<1>());
        else if (K == 2)
            f(v, Int<2>());
        else if (K == kMaxK)
            f(v, Int<kMaxK>());
        else
            return false;
        return true;
    };
    return V == 2 ? with_k(Int<2>()) : with_k(Int<1>());
}

template <int V, int K>
void launch_forward(bf16* out, float* rstd, const bf16* o, const bf16* z, int64_t zs, const float* w,
                    int64_t N, int64_t HV, int64_t D, float eps, cudaStream_t stream) {
    constexpr int R = 4 / K;
    const dim3 grid(detail::grid_for(N, kWarps * R, 0x7fffffffLL), unsigned(HV));
    HYDRA_CUDA_REQUIRE(int64_t(grid.x) * kWarps * R >= N, "gated_rmsnorm_forward: too many tokens");
    k_gated_forward<V, K, R>
        <<<grid, kWarps * 32, 0, stream>>>(out, rstd, o, z, zs, w, N, int(HV), int(D), eps);
    CUDA_CHECK(cudaGetLastError());
}

template <int V, int K>
void launch_backward(bf16* d_o, bf16* dz, int64_t dzs, float* partials, const bf16* dout, const bf16* o,
                     const bf16* z, int64_t zs, const float* w, const float* rstd, int64_t N, int64_t HV,
                     int64_t D, int64_t rpp, int64_t np, cudaStream_t stream) {
    constexpr int R = 4 / K;
    const dim3 grid(detail::grid_for(np, kWarps, 0x7fffffffLL), unsigned(HV));
    k_gated_backward<V, K, R><<<grid, kWarps * 32, 0, stream>>>(d_o, dz, dzs, partials, dout, o, z, zs, w,
                                                                rstd, N, int(HV), int(D), rpp, np);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gated_rmsnorm_forward(bf16* out, float* rstd, const bf16* o, const bf16* z, int64_t z_stride,
                           const float* w, int64_t N, int64_t HV, int64_t D, float eps, cudaStream_t stream) {
    if (N <= 0 || HV <= 0 || D <= 0) return;
    if (z_stride == 0) z_stride = HV * D;
    HYDRA_CUDA_REQUIRE(z_stride >= HV * D, "gated_rmsnorm_forward: z row stride below HV * D");
    // bf16x2 when every row start is 4-byte aligned (o / out rows D apart, z rows z_stride apart).
    const int V =
        (D % 2 == 0 && z_stride % 2 == 0 && aligned(o, 4) && aligned(out, 4) && aligned(z, 4)) ? 2 : 1;
    const int K = pick_k(D, V, HV);
    const bool done = dispatch_vk(V, K, [&](auto v, auto k) {
        launch_forward<decltype(v)::value, decltype(k)::value>(out, rstd, o, z, z_stride, w, N, HV, D, eps,
                                                               stream);
    });
    if (!done) {
        k_gated_forward_generic<<<detail::grid_for(N * HV, kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(
            out, rstd, o, z, z_stride, w, N, HV, D, eps);
        CUDA_CHECK(cudaGetLastError());
    }
}

void gated_rmsnorm_backward(bf16* d_o, bf16* dz, int64_t dz_stride, float* dw, const bf16* dout,
                            const bf16* o, const bf16* z, int64_t z_stride, const float* w, const float* rstd,
                            int64_t N, int64_t HV, int64_t D, cudaStream_t stream) {
    if (N <= 0 || HV <= 0 || D <= 0) return;
    if (z_stride == 0) z_stride = HV * D;
    if (dz_stride == 0) dz_stride = HV * D;
    HYDRA_CUDA_REQUIRE(z_stride >= HV * D && dz_stride >= HV * D,
                       "gated_rmsnorm_backward: row stride below HV * D");
    const int64_t rpp = detail::rows_per_part(N), np = detail::num_parts(N);
    detail::Scratch part(dw ? size_t(np * HV * D) : 0, stream);
    const int V = (D % 2 == 0 && z_stride % 2 == 0 && dz_stride % 2 == 0 && aligned(dout, 4) &&
                   aligned(o, 4) && aligned(z, 4) && aligned(d_o, 4) && aligned(dz, 4))
                      ? 2
                      : 1;
    const int K = pick_k(D, V, HV);
    const bool done = dispatch_vk(V, K, [&](auto v, auto k) {
        launch_backward<decltype(v)::value, decltype(k)::value>(d_o, dz, dz_stride, part.get(), dout, o, z,
                                                                z_stride, w, rstd, N, HV, D, rpp, np, stream);
    });
    if (!done) {
        k_gated_backward_generic<<<detail::grid_for(np * HV, kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(
            d_o, dz, dz_stride, part.get(), dout, o, z, z_stride, w, rstd, N, HV, D, rpp, np);
        CUDA_CHECK(cudaGetLastError());
    }
    if (dw) detail::accumulate_partials(dw, part.get(), np, HV * D, HV * D, stream);
    part.release();
}

}  // namespace hydra::cuda
