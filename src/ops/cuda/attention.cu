// Causal GQA flash attention, forward and backward (see attention.h). Written from the online-softmax
// algorithm (running row max m and sum l; O rescaled by exp2(m_old - m_new) per key block) with
// mma.sync bf16 tensor-core products; no third-party code.
//
// Forward: one block per (128 queries, query head, sequence), 8 warps x 16 query rows; K/V tiles of 64
// keys double-buffered with cp.async; the heaviest (last) query blocks are scheduled first.
// Backward: one block per (64 keys, KV head, sequence) looping over the query heads of its group and
// the query blocks at or after it: S = Q K^T and dP = dO V^T recomputed, P = exp2(S' - lse),
// dS = P (dP - D); dV += P^T dO and dK += dS^T Q in registers; dQ += dS K through fp32 atomics. The
// deterministic backward (AttnWorkspace::deterministic) leaves dQ out of that kernel and forms it in a second
// one, a block per (64 queries, query head, sequence) walking the key blocks in order with dQ in registers
// (S and dP recomputed once more): atomics add in their order of arrival, so dQ's bits varied run to run.
#include "ops/cuda/attention.h"

#include <cstdio>
#include <string>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/mma_util.cuh"

namespace hydra::cuda {

using namespace hydra::cuda::mma;

namespace {

constexpr float kLog2e = 1.4426950408889634f;

struct FwdArgs {
    int B, T, H, Hkv;
    int S;      // keys per sequence (S >= T): query row r sits at position S - T + r
    float sl2;  // scale * log2(e)
    const bf16 *q, *k, *v;
    bf16* o;
    float* lse;
    const int32_t* window;  // (H) or null: sliding windows (AttnShape::window)
    int sinks;
};

// Key `key` is hidden from a query at position `row` by a sliding window W > 0 (sinks stay visible).
__device__ __forceinline__ bool outside_window(int key, int row, int W, int sinks) {
    return W > 0 && key <= row - W && key >= sinks;
}

template <int D>
struct FwdSmem {
    static constexpr int LD = D + 8;
    bf16 Qs[128 * LD];
    bf16 Ks[2][64 * LD];
    bf16 Vs[2][64 * LD];
};

// MINB: blocks per multiprocessor the register allocation is sized for (1: up to 255 registers a
// thread; 2: 128, two blocks of 8 warps resident).
template <int D, int MINB>
__global__ void __launch_bounds__(256, MINB) attn_fwd_kernel(FwdArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    auto& s = *reinterpret_cast<FwdSmem<D>*>(smem_raw);
    constexpr int LD = FwdSmem<D>::LD;
    const int nqb = (a.T + 127) / 128;
    const int qb = nqb - 1 - int(blockIdx.x);
    const int bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hk = h / (a.H / a.Hkv);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int q0 = qb * 128;
    const int p0 = a.S - a.T;  // position of query row 0 (0 in training; the cached length in a continuation)
    const size_t ldq = size_t(a.H) * D, ldk = size_t(a.Hkv) * D;
    load_rows<128, D, 256>(s.Qs, LD, a.q + (size_t(b) * a.T + q0) * ldq + size_t(h) * D, ldq, a.T - q0, tid);
    const int kend = min(a.S, p0 + q0 + 128);
    const int nkb = (kend + 63) / 64;
    auto issue = [&](int kb, int st) {
        const int k0 = kb * 64;
        const size_t off = (size_t(b) * a.S + k0) * ldk + size_t(hk) * D;
        load_rows<64, D, 256>(s.Ks[st], LD, a.k + off, ldk, a.S - k0, tid);
        load_rows<64, D, 256>(s.Vs[st], LD, a.v + off, ldk, a.S - k0, tid);
        cp_async_commit();
    };
    issue(0, 0);  // commits the Q copies too

    float O[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) O[i][0] = O[i][1] = O[i][2] = O[i][3] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;
    const int wrow = p0 + q0 + warp * 16;  // positions: the warp's first query row
    const int W = a.window ? a.window[h] : 0;
    const int row_lo = wrow + (lane >> 2), row_hi = row_lo + 8;
    const bf16* Qw = s.Qs + warp * 16 * LD;

    for (int kb = 0; kb < nkb; ++kb) {
        const int st = kb & 1, k0 = kb * 64;
        cp_async_wait_all();
        __syncthreads();
        if (kb + 1 < nkb) issue(kb + 1, st ^ 1);
        if (k0 > wrow + 15) continue;  // the warp's rows see none of these keys
        float S[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i) S[i][0] = S[i][1] = S[i][2] = S[i][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t qa[4];
            load_a<false>(qa, Qw + ks * 16, LD, lane);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                uint32_t bfr[4];
                load_b2<true>(bfr, s.Ks[st] + (np * 16) * LD + ks * 16, LD, lane);
                mma_bf16(S[2 * np], qa, bfr[0], bfr[1]);
                mma_bf16(S[2 * np + 1], qa, bfr[2], bfr[3]);
            }
        }
        const bool need_mask = (k0 + 63 > wrow) || (k0 + 64 > a.S) || W > 0;
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = k0 + nt * 8 + ((lane & 3) << 1) + (e & 1);
                const int row = e < 2 ? row_lo : row_hi;
                float x = S[nt][e] * a.sl2;
                if (need_mask && (key > row || key >= a.S || outside_window(key, row, W, a.sinks)))
                    x = -INFINITY;
                S[nt][e] = x;
                if (e < 2) mx0 = fmaxf(mx0, x);
                else mx1 = fmaxf(mx1, x);
            }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float u0 = n0 == -INFINITY ? 0.f : n0, u1 = n1 == -INFINITY ? 0.f : n1;
        const float c0 = exp2f(m0 - u0), c1 = exp2f(m1 - u1);
        m0 = n0, m1 = n1;
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            S[nt][0] = exp2f(S[nt][0] - u0);
            S[nt][1] = exp2f(S[nt][1] - u0);
            S[nt][2] = exp2f(S[nt][2] - u1);
            S[nt][3] = exp2f(S[nt][3] - u1);
            s0 += S[nt][0] + S[nt][1];
            s1 += S[nt][2] + S[nt][3];
        }
        l0 = l0 * c0 + s0;
        l1 = l1 * c1 + s1;
#pragma unroll
        for (int i = 0; i < D / 8; ++i) O[i][0] *= c0, O[i][1] *= c0, O[i][2] *= c1, O[i][3] *= c1;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            uint32_t pa[4];
            pa[0] = pack_bf16(S[2 * kk][0], S[2 * kk][1]);
            pa[1] = pack_bf16(S[2 * kk][2], S[2 * kk][3]);
            pa[2] = pack_bf16(S[2 * kk + 1][0], S[2 * kk + 1][1]);
            pa[3] = pack_bf16(S[2 * kk + 1][2], S[2 * kk + 1][3]);
#pragma unroll
            for (int np = 0; np < D / 16; ++np) {
                uint32_t bfr[4];
                load_b2<false>(bfr, s.Vs[st] + (kk * 16) * LD + np * 16, LD, lane);
                mma_bf16(O[2 * np], pa, bfr[0], bfr[1]);
                mma_bf16(O[2 * np + 1], pa, bfr[2], bfr[3]);
            }
        }
    }
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float i0 = l0 > 0.f ? 1.f / l0 : 0.f, i1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const int r_lo = row_lo - p0, r_hi = row_hi - p0;  // rows of this call
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
        const int c = nt * 8 + ((lane & 3) << 1);
        if (r_lo < a.T)
            *reinterpret_cast<__nv_bfloat162*>(a.o + (size_t(b) * a.T + r_lo) * ldq + size_t(h) * D + c) =
                __floats2bfloat162_rn(O[nt][0] * i0, O[nt][1] * i0);
        if (r_hi < a.T)
            *reinterpret_cast<__nv_bfloat162*>(a.o + (size_t(b) * a.T + r_hi) * ldq + size_t(h) * D + c) =
                __floats2bfloat162_rn(O[nt][2] * i1, O[nt][3] * i1);
    }
    if ((lane & 3) == 0) {
        float* lr = a.lse + size_t(bh) * a.T;
        if (r_lo < a.T) lr[r_lo] = m0 + log2f(l0);
        if (r_hi < a.T) lr[r_hi] = m1 + log2f(l1);
    }
}

// D_t = dO_t . O_t, one warp per (b, t, h) row.
template <int D>
__global__ void __launch_bounds__(256) attn_bwd_dot_kernel(int B, int T, int H, const bf16* o, const bf16* d_o,
                                                           float* dvec) {
    const size_t row = size_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= size_t(B) * T * H) return;
    constexpr int PER = D / 32;
    float x = 0.f;
#pragma unroll
    for (int i = 0; i < PER; i += 2) {
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(o + row * D + lane * PER + i));
        const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(d_o + row * D + lane * PER + i));
        x += a.x * b.x + a.y * b.y;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    if (lane == 0) {
        const int h = int(row % H);
        const size_t bt = row / H;
        const int t = int(bt % T), b = int(bt / T);
        dvec[(size_t(b) * H + h) * T + t] = x;
    }
}

struct BwdArgs {
    int B, T, H, Hkv;
    float sl2, scale;
    const bf16 *q, *k, *v, *d_o;
    const float *lse, *dvec;
    float* dq_acc;
    bf16 *dk, *dv;
    const int32_t* window;
    int sinks;
};

// From a warp's fragments of S = Q K^T and dP = dO V^T (tiling GS: 64 queries from q0 x 64 keys from k0,
// query head h of sequence b): P = exp2(S scale log2(e) - lse) and dS = P (dP - D), masked (causal, window,
// past T), as bf16 into Ps (unless null) and dSs (row stride 72).
template <class GS>
__device__ __forceinline__ void tile_p_ds(const BwdArgs& a, int b, int h, int q0, int k0,
                                          const typename GS::Acc& accS, const typename GS::Acc& accP,
                                          bf16* Ps, bf16* dSs, int warp, int lane) {
    const int W = a.window ? a.window[h] : 0;
    const float* lse = a.lse + (size_t(b) * a.H + h) * a.T;
    const float* dv = a.dvec + (size_t(b) * a.H + h) * a.T;
    const int r0 = GS::row0(warp), c0 = GS::col0(warp);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int rr = r0 + (lane >> 2) + 8 * half;
        const int qrow = q0 + rr;
        const bool rv = qrow < a.T;
        const float L = rv ? lse[qrow] : 0.f, Dq = rv ? dv[qrow] : 0.f;
#pragma unroll
        for (int nt = 0; nt < GS::NT; ++nt) {
            const int cc = c0 + nt * 8 + ((lane & 3) << 1);
            float p[2], ds[2];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int key = k0 + cc + u;
                const bool ok = rv && key <= qrow && key < a.T && !outside_window(key, qrow, W, a.sinks);
                p[u] = ok ? exp2f(accS[0][nt][2 * half + u] * a.sl2 - L) : 0.f;
                ds[u] = p[u] * (accP[0][nt][2 * half + u] - Dq);
            }
            if (Ps) *reinterpret_cast<uint32_t*>(&Ps[rr * 72 + cc]) = pack_bf16(p[0], p[1]);
            *reinterpret_cast<uint32_t*>(&dSs[rr * 72 + cc]) = pack_bf16(ds[0], ds[1]);
        }
    }
}

template <int D>
struct BwdSmem {
    static constexpr int LD = D + 8;
    bf16 Ks[64 * LD];
    bf16 Vs[64 * LD];
    bf16 Qs[2][64 * LD];
    bf16 dOs[2][64 * LD];
    bf16 Ps[64 * 72];
    bf16 dSs[64 * 72];
};

// DQ: dQ += dS K through fp32 atomics into a.dq_acc; without it dQ is left to attn_bwd_dq_kernel.
template <int D, bool DQ>
__global__ void __launch_bounds__(256, 1) attn_bwd_kernel(BwdArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    auto& s = *reinterpret_cast<BwdSmem<D>*>(smem_raw);
    constexpr int LD = BwdSmem<D>::LD;
    const int kb = blockIdx.x, bh = blockIdx.y, b = bh / a.Hkv, hk = bh % a.Hkv;
    const int r = a.H / a.Hkv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int k0 = kb * 64;
    const int nqb = (a.T + 63) / 64;
    const int cnt = nqb - kb, items = r * cnt;
    const size_t ldq = size_t(a.H) * D, ldk = size_t(a.Hkv) * D;
    load_rows<64, D, 256>(s.Ks, LD, a.k + (size_t(b) * a.T + k0) * ldk + size_t(hk) * D, ldk, a.T - k0, tid);
    load_rows<64, D, 256>(s.Vs, LD, a.v + (size_t(b) * a.T + k0) * ldk + size_t(hk) * D, ldk, a.T - k0, tid);
    auto issue = [&](int it, int st) {
        const int h = hk * r + it / cnt, q0 = (kb + it % cnt) * 64;
        const size_t off = (size_t(b) * a.T + q0) * ldq + size_t(h) * D;
        load_rows<64, D, 256>(s.Qs[st], LD, a.q + off, ldq, a.T - q0, tid);
        load_rows<64, D, 256>(s.dOs[st], LD, a.d_o + off, ldq, a.T - q0, tid);
        cp_async_commit();
    };
    issue(0, 0);

    using GS = BlockGemm<64, 64, D, 4, 2, false, true>;   // S, dP: 64 q x 64 keys
    using GT = BlockGemm<64, D, 64, 4, 2, true, false>;   // dV, dK: 64 keys x D
    using GQ = BlockGemm<64, D, 64, 4, 2, false, false>;  // dQ: 64 q x D
    float accV[GT::MT][GT::NT][4], accK[GT::MT][GT::NT][4];
    zero(accV);
    zero(accK);
    for (int it = 0; it < items; ++it) {
        const int st = it & 1;
        const int h = hk * r + it / cnt, q0 = (kb + it % cnt) * 64;
        cp_async_wait_all();
        __syncthreads();
        if (it + 1 < items) issue(it + 1, st ^ 1);
        {
            float accS[GS::MT][GS::NT][4], accP[GS::MT][GS::NT][4];
            zero(accS);
            zero(accP);
            GS::run(accS, s.Qs[st], LD, s.Ks, LD, warp, lane);
            GS::run(accP, s.dOs[st], LD, s.Vs, LD, warp, lane);
            tile_p_ds<GS>(a, b, h, q0, k0, accS, accP, s.Ps, s.dSs, warp, lane);
        }
        __syncthreads();
        GT::run(accV, s.Ps, 72, s.dOs[st], LD, warp, lane);
        GT::run(accK, s.dSs, 72, s.Qs[st], LD, warp, lane);
        if constexpr (DQ) {
            float acc[GQ::MT][GQ::NT][4];
            zero(acc);
            GQ::run(acc, s.dSs, 72, s.Ks, LD, warp, lane);
            float* dq = a.dq_acc + size_t(h) * D;
            GQ::each(acc, warp, lane, [&](int rr, int c, float& x) {
                const int qrow = q0 + rr;
                if (qrow < a.T) atomicAdd(dq + (size_t(b) * a.T + qrow) * ldq + c, a.scale * x);
            });
        }
    }
    GT::each(accK, warp, lane, [&](int rr, int c, float& x) {
        if (k0 + rr < a.T) a.dk[(size_t(b) * a.T + k0 + rr) * ldk + size_t(hk) * D + c] = __float2bfloat16(a.scale * x);
    });
    GT::each(accV, warp, lane, [&](int rr, int c, float& x) {
        if (k0 + rr < a.T) a.dv[(size_t(b) * a.T + k0 + rr) * ldk + size_t(hk) * D + c] = __float2bfloat16(x);
    });
}

template <int D>
struct DqSmem {
    static constexpr int LD = D + 8;
    bf16 Qs[64 * LD];
    bf16 dOs[64 * LD];
    bf16 Ks[2][64 * LD];
    bf16 Vs[2][64 * LD];
    bf16 dSs[64 * 72];
};

// The deterministic backward's dQ: one block per (64 queries, query head, sequence), the key blocks 0 .. its
// own in order (K, V double-buffered), S, dP and dS recomputed as in attn_bwd_kernel and dQ += dS K in
// registers; dq = bf16(scale dQ) written once.
template <int D>
__global__ void __launch_bounds__(256, 1) attn_bwd_dq_kernel(BwdArgs a, bf16* dq) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    auto& s = *reinterpret_cast<DqSmem<D>*>(smem_raw);
    constexpr int LD = DqSmem<D>::LD;
    const int qb = blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H, hk = h / (a.H / a.Hkv);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int q0 = qb * 64;
    const size_t ldq = size_t(a.H) * D, ldk = size_t(a.Hkv) * D;
    const size_t qoff = (size_t(b) * a.T + q0) * ldq + size_t(h) * D;
    load_rows<64, D, 256>(s.Qs, LD, a.q + qoff, ldq, a.T - q0, tid);
    load_rows<64, D, 256>(s.dOs, LD, a.d_o + qoff, ldq, a.T - q0, tid);
    auto issue = [&](int kb, int st) {
        const int k0 = kb * 64;
        const size_t off = (size_t(b) * a.T + k0) * ldk + size_t(hk) * D;
        load_rows<64, D, 256>(s.Ks[st], LD, a.k + off, ldk, a.T - k0, tid);
        load_rows<64, D, 256>(s.Vs[st], LD, a.v + off, ldk, a.T - k0, tid);
        cp_async_commit();
    };
    issue(0, 0);  // with Q and dO in its group

    using GS = BlockGemm<64, 64, D, 4, 2, false, true>;   // S, dP: 64 q x 64 keys
    using GQ = BlockGemm<64, D, 64, 4, 2, false, false>;  // dQ: 64 q x D
    float acc[GQ::MT][GQ::NT][4];
    zero(acc);
    for (int kb = 0; kb <= qb; ++kb) {  // causal: keys up to the block's last query
        const int st = kb & 1;
        cp_async_wait_all();
        __syncthreads();  // also: every warp is done with dS and the other stage of the previous block
        if (kb + 1 <= qb) issue(kb + 1, st ^ 1);
        {
            float accS[GS::MT][GS::NT][4], accP[GS::MT][GS::NT][4];
            zero(accS);
            zero(accP);
            GS::run(accS, s.Qs, LD, s.Ks[st], LD, warp, lane);
            GS::run(accP, s.dOs, LD, s.Vs[st], LD, warp, lane);
            tile_p_ds<GS>(a, b, h, q0, kb * 64, accS, accP, nullptr, s.dSs, warp, lane);
        }
        __syncthreads();
        GQ::run(acc, s.dSs, 72, s.Ks[st], LD, warp, lane);
    }
    GQ::each_pair(acc, warp, lane, [&](int rr, int c, float& x0, float& x1) {
        if (q0 + rr < a.T)
            *reinterpret_cast<__nv_bfloat162*>(dq + (size_t(b) * a.T + q0 + rr) * ldq + size_t(h) * D + c) =
                __floats2bfloat162_rn(a.scale * x0, a.scale * x1);
    });
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ x, bf16* __restrict__ y, size_t n) {
    const size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (i + 3 < n) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        *reinterpret_cast<__nv_bfloat162*>(y + i) = __floats2bfloat162_rn(v.x, v.y);
        *reinterpret_cast<__nv_bfloat162*>(y + i + 2) = __floats2bfloat162_rn(v.z, v.w);
    } else {
        for (size_t k = i; k < n; ++k) y[k] = __float2bfloat16(x[k]);
    }
}

void require(bool ok, const std::string& what) {
    if (!ok) throw ::hydra::Error("attention cuda: " + what);
}

void check_shape(const AttnShape& s) {
    require(s.B > 0 && s.T > 0 && s.H > 0 && s.Hkv > 0, "bad shape B=" + std::to_string(s.B) + " T=" +
                                                           std::to_string(s.T) + " H=" + std::to_string(s.H) +
                                                           " Hkv=" + std::to_string(s.Hkv));
    require(s.H % s.Hkv == 0, "H=" + std::to_string(s.H) + " is not a multiple of Hkv=" + std::to_string(s.Hkv));
    require(s.D == 64 || s.D == 128, "head dim " + std::to_string(s.D) + " not supported (64 or 128)");
    require(s.S == 0 || s.S >= s.T,
            "S=" + std::to_string(s.S) + " keys for T=" + std::to_string(s.T) + " queries");
    require(s.sinks >= 0, "sinks " + std::to_string(s.sinks) + " is negative");
    require(s.ld_qkv == 0, "these kernels read packed q, k, v (ld_qkv " + std::to_string(s.ld_qkv) +
                               " is for the cuDNN path)");
}

int g_fwd_minb = 0;  // 0: default per head dim

template <int D, int MINB>
void fwd_launch(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, float scale,
                cudaStream_t st) {
    static bool attr = false;
    if (!attr) {
        CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_kernel<D, MINB>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(sizeof(FwdSmem<D>))));
        attr = true;
    }
    FwdArgs a{s.B, s.T, s.H, s.Hkv, s.S > 0 ? s.S : s.T, scale * kLog2e, q, k, v, o, lse, s.window, s.sinks};
    attn_fwd_kernel<D, MINB><<<dim3((s.T + 127) / 128, s.B * s.H), 256, sizeof(FwdSmem<D>), st>>>(a);
    CUDA_CHECK(cudaGetLastError());
}

template <int D>
void fwd_impl(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, float scale,
              cudaStream_t st) {
    // two resident blocks per SM by default: at d = 128 the register cap costs a few spilled bytes but
    // ran 10-14% faster on an H200 than one block with 188 registers (docs/BENCHMARKS.md)
    const int minb = g_fwd_minb ? g_fwd_minb : 2;
    if (minb == 2) fwd_launch<D, 2>(s, q, k, v, o, lse, scale, st);
    else fwd_launch<D, 1>(s, q, k, v, o, lse, scale, st);
}

template <int D>
void bwd_impl(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, const bf16* o, const float* lse,
              const bf16* d_o, bf16* dq, bf16* dk, bf16* dv, float scale, AttnWorkspace& ws, cudaStream_t st) {
    const bool det = ws.deterministic;
    // the kernels' shared-memory limits, once per head dim (the deterministic pair's on its first use)
    static const bool attr = [] {
        CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_kernel<D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(sizeof(BwdSmem<D>))));
        return true;
    }();
    (void)attr;
    const size_t rows = size_t(s.B) * s.T * s.H;
    if (!det) CUDA_CHECK(cudaMemsetAsync(ws.dq_acc, 0, rows * s.D * sizeof(float), st));
    attn_bwd_dot_kernel<D><<<unsigned((rows + 7) / 8), 256, 0, st>>>(s.B, s.T, s.H, o, d_o, ws.dvec);
    CUDA_CHECK(cudaGetLastError());
    BwdArgs a{s.B,     s.T,       s.H, s.Hkv, scale * kLog2e, scale,  q, k, v, d_o, lse,
              ws.dvec, ws.dq_acc, dk,  dv,    s.window,       s.sinks};
    const dim3 grid_k((s.T + 63) / 64, s.B * s.Hkv);
    if (!det) {
        attn_bwd_kernel<D, true><<<grid_k, 256, sizeof(BwdSmem<D>), st>>>(a);
        CUDA_CHECK(cudaGetLastError());
        const size_t n = rows * s.D;
        f32_to_bf16_kernel<<<unsigned((n / 4 + 255) / 256 + 1), 256, 0, st>>>(ws.dq_acc, dq, n);
        CUDA_CHECK(cudaGetLastError());
        return;
    }
    static const bool attr_det = [] {
        CUDA_CHECK(cudaFuncSetAttribute(
            attn_bwd_kernel<D, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(BwdSmem<D>))));
        CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(sizeof(DqSmem<D>))));
        return true;
    }();
    (void)attr_det;
    attn_bwd_kernel<D, false><<<grid_k, 256, sizeof(BwdSmem<D>), st>>>(a);
    CUDA_CHECK(cudaGetLastError());
    attn_bwd_dq_kernel<D><<<dim3((s.T + 63) / 64, s.B * s.H), 256, sizeof(DqSmem<D>), st>>>(a, dq);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void attention_set_fwd_blocks_per_sm(int n) { g_fwd_minb = (n == 1 || n == 2) ? n : 0; }

AttnWorkspace::AttnWorkspace(const AttnShape& s) : shape(s) {
    check_shape(s);
    const size_t rows = size_t(s.B) * s.T * s.H;
    CUDA_CHECK(cudaMalloc(&dq_acc, rows * s.D * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dvec, rows * sizeof(float)));
    bytes = rows * (s.D + 1) * sizeof(float);
}

AttnWorkspace::~AttnWorkspace() {
    // checked, but reported rather than thrown (a destructor must not throw)
    for (void* p : {static_cast<void*>(dq_acc), static_cast<void*>(dvec)}) {
        if (!p) continue;
        const cudaError_t err = cudaFree(p);
        if (err != cudaSuccess) std::fprintf(stderr, "attention cuda: cudaFree failed: %s\n", cudaGetErrorString(err));
    }
}

void attention_forward(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse,
                       float scale, cudaStream_t stream) {
    check_shape(s);
    if (s.D == 64) fwd_impl<64>(s, q, k, v, o, lse, scale, stream);
    else fwd_impl<128>(s, q, k, v, o, lse, scale, stream);
}

void attention_backward(const AttnShape& s, const bf16* q, const bf16* k, const bf16* v, const bf16* o,
                        const float* lse, const bf16* d_o, bf16* dq, bf16* dk, bf16* dv, float scale,
                        AttnWorkspace& ws, cudaStream_t stream) {
    check_shape(s);
    require(s.S == 0 || s.S == s.T, "the backward takes queries from position 0 (S = T)");
    require(ws.shape.B == s.B && ws.shape.T == s.T && ws.shape.H == s.H && ws.shape.D == s.D,
            "workspace made for another shape");
    if (s.D == 64) bwd_impl<64>(s, q, k, v, o, lse, d_o, dq, dk, dv, scale, ws, stream);
    else bwd_impl<128>(s, q, k, v, o, lse, d_o, dq, dk, dv, scale, ws, stream);
}

}  // namespace hydra::cuda
