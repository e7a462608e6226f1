// RMSNorm forward/backward on the GPU (see rmsnorm.h). One warp per row (forward) or per part of rows
// (backward). The backward adds into the fp32 residual gradient (and can write its bf16 copy, the next
// GEMMs' input, in the same pass); dw is reduced deterministically
// (layer_util.cuh): warp p owns the rows of part p and its row of the partial sums.
//
// Two code paths. The vector path (C % 4 == 0, C <= 1024, 16-byte aligned rows) keeps a lane's slice of
// the row in registers: lane l owns float4 column groups l, l + 32, ... (NV = ceil(C / 128) of them), so
// every element is loaded once with 16-byte (fp32) or 8-byte (bf16) accesses and the backward's dw terms
// stay in registers across the part's rows. The scalar path covers every other shape.
#include "ops/cuda/rmsnorm.h"

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

using detail::to_f;
using detail::warp_sum;

constexpr int kWarps = 8;
constexpr int kMaxVec = 8;  // float4 groups per lane: C <= 32 * 4 * kMaxVec = 1024

// 4 consecutive elements as float4, from fp32 (16-byte load) or bf16 (8-byte load).
__device__ __forceinline__ float4 load4(const float* p) {
    return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 load4(const bf16* p) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void store4(float* p, float4 v) {
    *reinterpret_cast<float4*>(p) = v;
}
__device__ __forceinline__ void store4(bf16* p, float4 v) {
    const __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
    uint2 u;
    u.x = *reinterpret_cast<const uint32_t*>(&a);
    u.y = *reinterpret_cast<const uint32_t*>(&b);
    *reinterpret_cast<uint2*>(p) = u;
}

// ---- scalar path (any C, any alignment) --------------------------------------------------------------

template <typename TOut>
__global__ void k_rmsnorm_forward(TOut* y, float* __restrict__ rstd, const float* x,
                                  const float* __restrict__ w, int64_t N, int64_t C, float eps) {
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
__global__ void k_rmsnorm_backward(float* __restrict__ dx, bf16* __restrict__ dxb,
                                   float* __restrict__ partials, const TDy* __restrict__ dy,
                                   const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ rstd, int64_t N, int64_t C, int64_t rpp,
                                   int64_t nparts) {
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
            const float d = dxr[c] + (r * w[c] * g - b * xv);
            dxr[c] = d;
            if (dxb) dxb[n * C + c] = __float2bfloat16_rn(d);
            if (pr) {
                const float v = g * xv * r;
                pr[c] = (n == n0) ? v : pr[c] + v;
            }
        }
    }
}

// ---- vector path (C % 4 == 0, C <= 128 * NV, aligned rows) ----------------------------------------------

// Row n, lane's groups j < NV at columns 4 * (lane + 32 j) (valid while < C).
template <typename TOut, int NV>
__global__ void __launch_bounds__(kWarps * 32)
    k_rmsnorm_forward_vec(TOut* y, float* __restrict__ rstd, const float* x, const float* __restrict__ w,
                          int N, int C, float eps) {
    const int lane = threadIdx.x & 31;
    const int n = blockIdx.x * kWarps + (threadIdx.x >> 5);
    if (n >= N) return;
    const float* xr = x + int64_t(n) * C;
    float4 xv[NV];
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int c = 4 * (lane + 32 * j);
        xv[j] = c < C ? load4(xr + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        ss += xv[j].x * xv[j].x + xv[j].y * xv[j].y + xv[j].z * xv[j].z + xv[j].w * xv[j].w;
    }
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / float(C) + eps);
    if (rstd && lane == 0) rstd[n] = r;
    TOut* yr = y + int64_t(n) * C;  // may alias x (fp32): the lane's elements are all in registers already
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int c = 4 * (lane + 32 * j);
        if (c >= C) break;
        const float4 wv = load4(w + c);
        store4(yr + c,
               make_float4(xv[j].x * r * wv.x, xv[j].y * r * wv.y, xv[j].z * r * wv.z, xv[j].w * r * wv.w));
    }
}

// dx += r w g - (r^3 / C) sum(g w x) x per row; the part's dw terms sum(g x r) in registers, in row order
// (the same order as the scalar path). The block's kWarps parts are then added in warp order through shared
// memory into one partial row per block (as combine_part_groups does for the scalar path), so the partials
// are nparts / kWarps rows: ~1 MB at 16K tokens instead of ~9 MB written and read back per call.
template <typename TDy, int NV>
__global__ void __launch_bounds__(kWarps * 32)
    k_rmsnorm_backward_vec(float* __restrict__ dx, bf16* __restrict__ dxb, float* __restrict__ partials,
                           const TDy* __restrict__ dy, const float* __restrict__ x,
                           const float* __restrict__ w, const float* __restrict__ rstd, int N, int C, int rpp,
                           int nparts) {
    __shared__ float4 red[kWarps][32 * NV];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int p = blockIdx.x * kWarps + warp;
    float4 wv[NV], acc[NV];
#pragma unroll
    for (int j = 0; j < NV; ++j) {
        const int c = 4 * (lane + 32 * j);
        wv[j] = c < C ? load4(w + c) : make_float4(0.f, 0.f, 0.f, 0.f);
        acc[j] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int n0 = p < nparts ? p * rpp : N, n1 = min(N, n0 + rpp);  // a warp past the last part: no rows
    for (int n = n0; n < n1; ++n) {
        const int64_t off = int64_t(n) * C;
        const float r = rstd[n];
        float4 gv[NV], xv[NV], dv[NV];
        float dot = 0.f;
#pragma unroll
        for (int j = 0; j < NV; ++j) {  // every load of the row issued before the reduction
            const int c = 4 * (lane + 32 * j);
            const bool in = c < C;
            gv[j] = in ? load4(dy + off + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            xv[j] = in ? load4(x + off + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            dv[j] = in ? load4(dx + off + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            dot += gv[j].x * wv[j].x * xv[j].x + gv[j].y * wv[j].y * xv[j].y + gv[j].z * wv[j].z * xv[j].z +
                   gv[j].w * wv[j].w * xv[j].w;
        }
        dot = warp_sum(dot);
        const float b = dot * r * r * r / float(C);
#pragma unroll
        for (int j = 0; j < NV; ++j) {
            const int c = 4 * (lane + 32 * j);
            if (c >= C) break;
            const float4 g = gv[j], xq = xv[j];
            dv[j].x += r * wv[j].x * g.x - b * xq.x;
            dv[j].y += r * wv[j].y * g.y - b * xq.y;
            dv[j].z += r * wv[j].z * g.z - b * xq.z;
            dv[j].w += r * wv[j].w * g.w - b * xq.w;
            store4(dx + off + c, dv[j]);
            if (dxb) store4(dxb + off + c, dv[j]);
            acc[j].x += g.x * xq.x * r;
            acc[j].y += g.y * xq.y * r;
            acc[j].z += g.z * xq.z * r;
            acc[j].w += g.w * xq.w * r;
        }
    }
    if (!partials) return;  // grid-uniform
#pragma unroll
    for (int j = 0; j < NV; ++j) red[warp][lane + 32 * j] = acc[j];
    __syncthreads();
    // block row: the parts of this block added in warp order, starting from the first (bit-identical to
    // combine_part_groups over the scalar path's part rows)
    const int parts_here = min(kWarps, nparts - int(blockIdx.x) * kWarps);
    float* pr = partials + int64_t(blockIdx.x) * C;
    for (int q = threadIdx.x; q < 32 * NV; q += kWarps * 32) {
        const int c = 4 * q;
        if (c >= C) continue;
        float4 t = red[0][q];
        for (int k = 1; k < parts_here; ++k) {
            const float4 u = red[k][q];
            t.x += u.x, t.y += u.y, t.z += u.z, t.w += u.w;
        }
        store4(pr + c, t);
    }
}

// Scalar-path counterpart of the vector kernel's block rows: out (ceil(nparts / kWarps), C) row b = the part
// rows kWarps b .. kWarps b + kWarps - 1 added in order, starting from the first.
__global__ void k_combine_part_groups(float* __restrict__ out, const float* __restrict__ parts,
                                      int64_t nparts, int64_t C) {
    const int64_t b = blockIdx.y, p0 = b * kWarps, p1 = min(nparts, p0 + kWarps);
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C;
         c += int64_t(gridDim.x) * blockDim.x) {
        float t = parts[p0 * C + c];
        for (int64_t p = p0 + 1; p < p1; ++p) t += parts[p * C + c];
        out[b * C + c] = t;
    }
}

bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}
bool aligned8(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 7u) == 0;
}
template <typename T>
bool aligned_rows(
    const T* p) {  // 4 elements: 16 bytes of fp32 or 8 of bf16 (C % 4 == 0 keeps every row aligned)
    return sizeof(T) == 4 ? aligned16(p) : aligned8(p);
}

// Groups per lane for the vector path, 0 = scalar path.
int vec_groups(int64_t N, int64_t C) {
    if (C % 4 != 0 || C > 128 * kMaxVec || N * C >= (int64_t(1) << 31)) return 0;
    return int((C + 127) / 128);
}

template <typename TOut>
void forward(TOut* y, float* rstd, const float* x, const float* w, int64_t N, int64_t C, float eps,
             cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int nv = vec_groups(N, C);
    if (nv > 0 && aligned16(x) && aligned16(w) && aligned_rows(y)) {
        const unsigned grid = unsigned((N + kWarps - 1) / kWarps);
#define FWD(k) \
    k_rmsnorm_forward_vec<TOut, k><<<grid, kWarps * 32, 0, stream>>>(y, rstd, x, w, int(N), int(C), eps)
        HYDRA_DISPATCH_1_TO_8(nv, FWD, "rmsnorm: float4 groups per lane")
#undef FWD
    } else {
        k_rmsnorm_forward<<<detail::grid_for(N, kWarps, 0x7fffffffLL), kWarps * 32, 0, stream>>>(
            y, rstd, x, w, N, C, eps);
    }
    CUDA_CHECK(cudaGetLastError());
}

template <typename TDy>
void backward(float* dx, bf16* dxb, float* dw, const TDy* dy, const float* x, const float* w,
              const float* rstd, int64_t N, int64_t C, cudaStream_t stream) {
    if (N <= 0 || C <= 0) return;
    const int64_t rpp = detail::rows_per_part(N), np = detail::num_parts(N);
    const int64_t nblk = (np + kWarps - 1) / kWarps;  // partial rows: one per block of kWarps parts
    const int nv = vec_groups(N, C);
    if (nv > 0 && aligned16(dx) && aligned16(x) && aligned16(w) && aligned_rows(dy) &&
        (!dxb || aligned_rows(dxb))) {
        detail::Scratch part(dw ? size_t(nblk * C) : 0, stream);
        const unsigned grid = unsigned(nblk);
#define BWD(k)                                                                                            \
    k_rmsnorm_backward_vec<TDy, k><<<grid, kWarps * 32, 0, stream>>>(dx, dxb, part.get(), dy, x, w, rstd, \
                                                                     int(N), int(C), int(rpp), int(np))
        HYDRA_DISPATCH_1_TO_8(nv, BWD, "rmsnorm: float4 groups per lane")
#undef BWD
        CUDA_CHECK(cudaGetLastError());
        if (dw) detail::accumulate_partials(dw, part.get(), nblk, C, C, stream);
        part.release();
    } else {
        detail::Scratch part(dw ? size_t(np * C) : 0, stream), blk(dw ? size_t(nblk * C) : 0, stream);
        k_rmsnorm_backward<<<detail::grid_for(np, kWarps), kWarps * 32, 0, stream>>>(
            dx, dxb, part.get(), dy, x, w, rstd, N, C, rpp, np);
        CUDA_CHECK(cudaGetLastError());
        if (dw) {
            const dim3 grid(unsigned(std::min<int64_t>((C + 255) / 256, 64)), unsigned(nblk));
            k_combine_part_groups<<<grid, 256, 0, stream>>>(blk.get(), part.get(), np, C);
            CUDA_CHECK(cudaGetLastError());
            detail::accumulate_partials(dw, blk.get(), nblk, C, C, stream);
        }
        blk.release();
        part.release();
    }
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
    backward(dx, nullptr, dw, dy, x, w, rstd, N, C, stream);
}
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t N, int64_t C, cudaStream_t stream) {
    backward(dx, nullptr, dw, dy, x, w, rstd, N, C, stream);
}
void rmsnorm_backward(float* dx, bf16* dx_bf16, float* dw, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t N, int64_t C, cudaStream_t stream) {
    backward(dx, dx_bf16, dw, dy, x, w, rstd, N, C, stream);
}

}  // namespace hydra::cuda
