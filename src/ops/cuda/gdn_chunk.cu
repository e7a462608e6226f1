// Gated DeltaNet chunked forward/backward and decode step on the GPU (see gdn_chunk.h; the algorithm
// is research/gdn.md §2.2 / §3.2, the same formulas as ops/cpu/gdn_recurrence.cpp's chunked form).
//
// Forward, per sequence b and value head j (chunks of C = 64 tokens, L valid rows in the last one):
//   prep   (grid NT x B*HV, parallel over chunks): gamma = chunk-local cumsum of g; A = strictly lower
//          beta_r (k_r . k_c) E[r,c], E = exp(gamma_r - gamma_c), and P = (Q K^T) o E (causal) on tensor
//          cores; W = (I + A)^-1 diag(beta Gamma) K and U = (I + A)^-1 diag(beta) V (and, when saving,
//          T = (I + A)^-1) by forward substitution in fp32, one right-hand-side column per thread.
//   scan   (grid D/VT x B*HV, sequential over chunks, a 16-, 32- or 64-row slice of the V x K state per
//          block, fp32 in registers, operands double-buffered with cp.async or single-buffered at two
//          blocks per SM, see scan_variant):
//          delta = U - W M0^T;  O = scale [diag(Gamma) Q M0^T + P delta];  M1 = Gamma_L M0 + (dec delta)^T K.
// Backward:
//   bscan  (reverse over chunks, V-slices): d delta = diag(dec) K dM^T + scale P^T dO (written out) and
//          dM0 = Gamma_L dM + (scale diag(Gamma) dO)^T Q - d delta^T W; dM of every chunk saved (bf16).
//   bchunk (parallel over chunks): dq, dk (per value head, fp32), dv, dbeta, dg from the saved state
//          entering the chunk, the saved dM leaving it, delta, d delta and T (gdn.md §3.2 steps 5-7).
//   finish: dq, dk summed over the value heads of each key head, then back through the L2 norm (with one
//          value head per key head the per-chunk kernel does this itself and the pass is skipped).
#include "ops/cuda/gdn_chunk.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/mma_util.cuh"

namespace hydra::cuda {

using namespace hydra::cuda::mma;

namespace {

constexpr int kC = 64;  // chunk size

// 64 (or ROWS) rows x COLS bf16 from global (row stride `stride` elements) into shared memory (row
// stride ldd), rows >= valid zero-filled. COLS multiple of 8, addresses 16-byte aligned.
template <int ROWS, int COLS, int NTH>
__device__ __forceinline__ void load_rows(bf16* dst, int ldd, const bf16* src, size_t stride, int valid, int tid) {
    constexpr int PER = COLS / 8;
    for (int idx = tid; idx < ROWS * PER; idx += NTH) {
        const int r = idx / PER, c = (idx % PER) * 8;
        bf16* d = dst + r * ldd + c;
        if (r < valid) cp_async16(d, src + size_t(r) * stride + c);
        else *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
}

// A VT x D bf16 state slice from shared memory (row stride D + 8) to global memory (row stride D), 16 bytes
// per access, NTH threads.
template <int D, int VT, int NTH>
__device__ __forceinline__ void store_slice(bf16* dst, const bf16* src, int tid) {
    for (int idx = tid; idx < VT * D / 8; idx += NTH) {
        const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
        *reinterpret_cast<uint4*>(dst + size_t(r) * D + c) =
            *reinterpret_cast<const uint4*>(&src[r * (D + 8) + c]);
    }
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// For a BlockGemm tiling with MT == 1: f(r, c, v) gives each element's contribution to its row's sum;
// the sums are added into target[r] (shared memory) once per warp and row.
template <class G, class F>
__device__ __forceinline__ void each_rowsum(typename G::Acc& acc, int warp, int lane, float* target, F&& f) {
    static_assert(G::MT == 1, "each_rowsum: one m-tile per warp");
    const int r0 = G::row0(warp);
    float s0 = 0.f, s1 = 0.f;
    G::each(acc, warp, lane, [&](int r, int c, float& v) {
        const float x = f(r, c, v);
        if (r - r0 < 8) s0 += x;
        else s1 += x;
    });
    s0 += __shfl_xor_sync(0xffffffffu, s0, 1);
    s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 1);
    s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
    if ((lane & 3) == 0) {
        atomicAdd(&target[r0 + (lane >> 2)], s0);
        atomicAdd(&target[r0 + 8 + (lane >> 2)], s1);
    }
}

template <class Kern>
void set_smem(Kern k, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

// ---- forward: L2 norm of q/k rows ----------------------------------------------------------------

template <int D>
__global__ void __launch_bounds__(256) l2norm_rows_kernel(const bf16* __restrict__ x, bf16* __restrict__ y,
                                                          float* __restrict__ rstd, size_t rows) {
    const size_t row = size_t(blockIdx.x) * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    constexpr int PER = D / 32;
    const bf16* xr = x + row * D + lane * PER;
    float v[PER];
#pragma unroll
    for (int i = 0; i < PER; i += 2) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(xr + i));
        v[i] = f.x, v[i + 1] = f.y;
    }
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < PER; ++i) ss += v[i] * v[i];
    ss = warp_sum(ss);
    const float r = 1.0f / sqrtf(ss + 1e-6f);
    bf16* yr = y + row * D + lane * PER;
#pragma unroll
    for (int i = 0; i < PER; i += 2)
        *reinterpret_cast<__nv_bfloat162*>(yr + i) = __floats2bfloat162_rn(v[i] * r, v[i + 1] * r);
    if (lane == 0) rstd[row] = r;
}

// ---- forward: per-chunk preparation ---------------------------------------------------------------

struct FwdArgs {
    int B, T, H, HV, NT;
    const bf16 *qn, *kn, *v;
    const float *g, *beta;
    float* gam;
    bf16 *W, *U, *P;
    float* Tm;  // null unless saving for the backward
};

template <int D>
struct PrepSmem {
    static constexpr int LD = D + 8;
    bf16 Ks[64 * LD];
    bf16 Qs[64 * LD];
    bf16 Vs[64 * LD];
    float As[64 * 68];  // strictly lower A, rows 16-byte aligned for float4 broadcast reads
    float gam[64], beta[64];
};

// x <- (I + A)^-1 x for one right-hand-side column held in registers (x[r] for the 64 rows of a
// chunk): forward substitution x_r -= sum_{m<r} A[r, m] x_m, every index a compile-time constant.
// A is read four entries at a time; entries on and above the diagonal are zero, so the groups of four
// that cross the diagonal add nothing.
__device__ __forceinline__ void unit_lower_solve(float (&x)[64], const float* As) {
#pragma unroll
    for (int r = 1; r < 64; ++r) {
        float a0 = x[r], a1 = 0.f;
#pragma unroll
        for (int m = 0; m < r; m += 4) {
            const float4 w = *reinterpret_cast<const float4*>(As + r * 68 + m);
            a0 -= w.x * x[m];
            a1 -= w.y * x[m + 1];
            a0 -= w.z * x[m + 2];
            a1 -= w.w * x[m + 3];
        }
        x[r] = a0 + a1;
    }
}

template <int D>
__global__ void __launch_bounds__(256) gdn_fwd_prep_kernel(FwdArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    auto& s = *reinterpret_cast<PrepSmem<D>*>(smem_raw);
    constexpr int LD = PrepSmem<D>::LD;
    const int n = blockIdx.x, bj = blockIdx.y, b = bj / a.HV, j = bj % a.HV, h = j / (a.HV / a.H);
    const int t0 = n * kC, L = min(kC, a.T - t0);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t Tp = size_t(a.NT) * kC;
    const size_t qrow0 = (size_t(b) * a.T + t0) * a.H + h;
    const size_t vrow0 = (size_t(b) * a.T + t0) * a.HV + j;
    const size_t hrow0 = size_t(bj) * Tp + t0;

    load_rows<64, D, 256>(s.Ks, LD, a.kn + qrow0 * D, size_t(a.H) * D, L, tid);
    load_rows<64, D, 256>(s.Qs, LD, a.qn + qrow0 * D, size_t(a.H) * D, L, tid);
    load_rows<64, D, 256>(s.Vs, LD, a.v + vrow0 * D, size_t(a.HV) * D, L, tid);
    cp_async_commit();
    if (warp == 0) {
        // inclusive cumsum of g over the chunk (two tokens per lane); padded rows add 0
        const int r0 = 2 * lane, r1 = r0 + 1;
        const float x0 = r0 < L ? a.g[vrow0 + size_t(r0) * a.HV] : 0.f;
        const float x1 = r1 < L ? a.g[vrow0 + size_t(r1) * a.HV] : 0.f;
        float p = x0 + x1;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, p, o);
            if (lane >= o) p += y;
        }
        const float excl = p - (x0 + x1);
        s.gam[r0] = excl + x0;
        s.gam[r1] = excl + x0 + x1;
        a.gam[hrow0 + r0] = excl + x0;
        a.gam[hrow0 + r1] = excl + x0 + x1;
        s.beta[r0] = r0 < L ? a.beta[vrow0 + size_t(r0) * a.HV] : 0.f;
        s.beta[r1] = r1 < L ? a.beta[vrow0 + size_t(r1) * a.HV] : 0.f;
    }
    cp_async_wait_all();
    __syncthreads();
    using G64 = BlockGemm<64, 64, D, 4, 2, false, true>;
    {
        float acc[G64::MT][G64::NT][4];
        zero(acc);
        G64::run(acc, s.Ks, LD, s.Ks, LD, warp, lane);
        G64::each(acc, warp, lane, [&](int r, int c, float& v) {
            float val = 0.f;
            if (c < r && r < L) val = s.beta[r] * v * expf(s.gam[r] - s.gam[c]);
            s.As[r * 68 + c] = val;
        });
    }
    {
        float acc[G64::MT][G64::NT][4];
        zero(acc);
        G64::run(acc, s.Qs, LD, s.Ks, LD, warp, lane);
        bf16* Pg = a.P + (size_t(bj) * a.NT + n) * (kC * kC);
        G64::each(acc, warp, lane, [&](int r, int c, float& v) {
            float val = 0.f;
            if (c <= r && r < L) val = v * expf(s.gam[r] - s.gam[c]);
            Pg[r * kC + c] = __float2bfloat16(val);
        });
    }
    __syncthreads();
    // [W | U | T] = (I + A)^-1 [diag(beta Gamma) K | diag(beta) V | I], one column per thread, fp32
    const int ncols = 2 * D + (a.Tm ? 64 : 0);
    for (int col = tid; col < ncols; col += 256) {
        float x[64];
        if (col < D) {
#pragma unroll
            for (int r = 0; r < 64; ++r) x[r] = s.beta[r] * expf(s.gam[r]) * __bfloat162float(s.Ks[r * LD + col]);
        } else if (col < 2 * D) {
#pragma unroll
            for (int r = 0; r < 64; ++r) x[r] = s.beta[r] * __bfloat162float(s.Vs[r * LD + col - D]);
        } else {
#pragma unroll
            for (int r = 0; r < 64; ++r) x[r] = r == col - 2 * D ? 1.f : 0.f;
        }
        unit_lower_solve(x, s.As);
        if (col < 2 * D) {
            bf16* dst = col < D ? a.W + hrow0 * D + col : a.U + hrow0 * D + (col - D);
#pragma unroll
            for (int r = 0; r < 64; ++r)
                if (r < L) dst[size_t(r) * D] = __float2bfloat16(x[r]);
        } else {
            float* dst = a.Tm + (size_t(bj) * a.NT + n) * (kC * kC) + (col - 2 * D);
#pragma unroll
            for (int r = 0; r < 64; ++r) dst[r * kC] = x[r];
        }
    }
}

// ---- forward: the state scan with the outputs ------------------------------------------------------

struct ScanArgs {
    int B, T, H, HV, NT;
    float scale;
    const bf16 *qn, *kn, *W, *U, *P;
    const float* gam;
    const float* h0;
    bf16* o;
    float* ht;
    bf16* states;  // null unless saving
    bf16* delta;   // null unless saving
};

// One block per (sequence, value head, VT-row state slice) with NW warps (4 or 8), walking the chunks in
// order. VT = 16, 32 or 64 (16 when there are too few (sequence, head) pairs to fill the GPU with wider
// slices; 64 with 8 warps halves the operand loads that every slice block of a head repeats: the chunk's
// W, Q, K and P). Warp w computes rows 32 (w / (NW / 4)) .. +32 of [W; Q] M0^T for its share of the slice's
// columns; the first NW / 2 warps (the W rows) also own the slice in registers: 16 rows each over all D
// columns, or, when the slice has fewer 16-row groups than those warps (VT = 16), 16 rows over a part.
// ST = 2: the next chunk's operands are prefetched while this one is computed (one block per SM);
// ST = 1: single buffers, half the shared memory, two blocks per SM overlapping each other instead.
template <int D, int VT, int ST>
struct ScanSmem {
    static constexpr int LD = D + 8, LV = VT + 8;
    bf16 QW[ST][128 * LD];  // rows 0..63: W, rows 64..127: Q
    bf16 Ks[ST][64 * LD];
    bf16 Us[ST][64 * LV];
    bf16 Ps[ST][64 * 72];
    float gam[ST][64];
    bf16 Mb[VT * LD];
    bf16 Db[64 * LV];  // delta
    bf16 Dd[64 * LV];  // dec * delta
};

template <int D, int VT, int ST, int NW>
__global__ void __launch_bounds__(NW * 32) gdn_fwd_scan_kernel(ScanArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using S = ScanSmem<D, VT, ST>;
    auto& s = *reinterpret_cast<S*>(smem_raw);
    constexpr int NTH = NW * 32, LD = S::LD, LV = S::LV;
    constexpr int NCG = NW / 4, NV = VT / NCG / 8;  // column groups of [W; Q] M0^T, n-tiles per warp
    constexpr int NWW = NW / 2, RG = VT / 16;       // warps owning the state, its 16-row groups
    static_assert(RG <= NWW, "gdn_fwd_scan_kernel: more 16-row groups than state-owning warps");
    constexpr int MC = D * RG / NWW;  // state columns per owning warp
    const int v0 = blockIdx.x * VT, bj = blockIdx.y, b = bj / a.HV, j = bj % a.HV, h = j / (a.HV / a.H);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t Tp = size_t(a.NT) * kC;
    const int r0 = 32 * (warp / NCG), c0 = (warp % NCG) * (VT / NCG);  // this warp's tile of [W; Q] M0^T
    const bool wwarp = warp < NWW;
    const int mrow0 = 16 * (warp / (NWW / RG)), mcol0 = (warp % (NWW / RG)) * MC;  // its state part

    auto issue = [&](int n, int st) {
        const int t0 = n * kC, L = min(kC, a.T - t0);
        const size_t qrow0 = (size_t(b) * a.T + t0) * a.H + h;
        const size_t hrow0 = size_t(bj) * Tp + t0;
        load_rows<64, D, NTH>(s.QW[st], LD, a.W + hrow0 * D, D, L, tid);
        load_rows<64, D, NTH>(s.QW[st] + 64 * LD, LD, a.qn + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, D, NTH>(s.Ks[st], LD, a.kn + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, VT, NTH>(s.Us[st], LV, a.U + hrow0 * D + v0, D, L, tid);
        load_rows<64, 64, NTH>(s.Ps[st], 72, a.P + (size_t(bj) * a.NT + n) * (kC * kC), kC, 64, tid);
        if (tid < 16) cp_async16(&s.gam[st][tid * 4], a.gam + hrow0 + tid * 4);
        cp_async_commit();
    };

    float M[1][MC / 8][4];
    if (wwarp) {
#pragma unroll
        for (int nt = 0; nt < MC / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = mrow0 + frag_row(0, e, lane), c = mcol0 + frag_col(nt, e, lane);
                const float x = a.h0 ? a.h0[(size_t(bj) * D + v0 + r) * D + c] : 0.f;
                M[0][nt][e] = x;
                s.Mb[r * LD + c] = __float2bfloat16(x);
            }
    }
    issue(0, 0);
    for (int n = 0; n < a.NT; ++n) {
        const int st = ST == 2 ? (n & 1) : 0, t0 = n * kC, L = min(kC, a.T - t0);
        cp_async_wait_all();
        __syncthreads();
        if (ST == 2 && n + 1 < a.NT) issue(n + 1, st ^ 1);
        if (a.states) store_slice<D, VT, NTH>(a.states + ((size_t(bj) * a.NT + n) * D + v0) * D, s.Mb, tid);
        const float* gm = s.gam[st];
        const float glast = gm[L - 1];
        float acc[2][NV][4];
        zero(acc);
        // [W; Q] M0^T: the W rows (-> delta) and the Q rows (-> outputs)
        warp_gemm<2, NV, D / 16, false, true>(acc, s.QW[st] + r0 * LD, LD, s.Mb + c0 * LD, LD, lane);
        if (wwarp) {  // delta = U - W M0^T (rows t = r0 ..)
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int t = r0 + frag_row(mt, e, lane);
                    const float dec = t < L ? expf(glast - gm[t]) : 0.f;
#pragma unroll
                    for (int nt = 0; nt < NV; ++nt) {
                        const int c = c0 + frag_col(nt, e, lane);
                        const float dl = __bfloat162float(s.Us[st][t * LV + c]) - acc[mt][nt][e];
                        s.Db[t * LV + c] = __float2bfloat16(dl);
                        s.Dd[t * LV + c] = __float2bfloat16(dec * dl);
                        if (a.delta && t < L) a.delta[(size_t(bj) * Tp + t0 + t) * D + v0 + c] = __float2bfloat16(dl);
                    }
                }
        } else {  // diag(Gamma) Q M0^T (rows t = r0 - 64 ..)
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float G = expf(gm[r0 - 64 + frag_row(mt, e, lane)]);
#pragma unroll
                    for (int nt = 0; nt < NV; ++nt) acc[mt][nt][e] *= G;
                }
        }
        __syncthreads();
        if (!wwarp) {
            // O = scale [diag(Gamma) Q M0^T + P delta]
            warp_gemm<2, NV, 4, false, false>(acc, s.Ps[st] + (r0 - 64) * 72, 72, s.Db + c0, LV, lane);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nt = 0; nt < NV; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; e += 2) {
                        const int t = r0 - 64 + frag_row(mt, e, lane), c = c0 + frag_col(nt, e, lane);
                        if (t < L)
                            *reinterpret_cast<__nv_bfloat162*>(a.o + ((size_t(b) * a.T + t0 + t) * a.HV + j) * D +
                                                               v0 + c) =
                                __floats2bfloat162_rn(a.scale * acc[mt][nt][e], a.scale * acc[mt][nt][e + 1]);
                    }
        } else {
            // M1 = Gamma_L M0 + (dec delta)^T K
            const float gl = expf(glast);
#pragma unroll
            for (int nt = 0; nt < MC / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) M[0][nt][e] *= gl;
            warp_gemm<1, MC / 8, 4, true, false>(M, s.Dd + mrow0, LV, s.Ks[st] + mcol0, LD, lane);
#pragma unroll
            for (int nt = 0; nt < MC / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int r = mrow0 + frag_row(0, e, lane), c = mcol0 + frag_col(nt, e, lane);
                    *reinterpret_cast<__nv_bfloat162*>(&s.Mb[r * LD + c]) =
                        __floats2bfloat162_rn(M[0][nt][e], M[0][nt][e + 1]);
                }
        }
        if (ST == 1 && n + 1 < a.NT) {
            __syncthreads();  // every read of this chunk's buffers is done
            issue(n + 1, 0);
        }
    }
    if (a.ht && wwarp) {
#pragma unroll
        for (int nt = 0; nt < MC / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = mrow0 + frag_row(0, e, lane), c = mcol0 + frag_col(nt, e, lane);
                a.ht[(size_t(bj) * D + v0 + r) * D + c] = M[0][nt][e];
            }
    }
}

// ---- backward: reverse state-gradient scan ---------------------------------------------------------

struct BScanArgs {
    int B, T, H, HV, NT;
    float scale;
    const bf16 *qn, *kn, *W, *P, *d_o;
    const float* gam;
    const float* dht;
    float* dh0;
    bf16* dstates;
    float* ddelta;
};

// The reverse scan, one block per (sequence, value head, VT-row slice of dM) with NW warps (4 or 8), the
// same variants as the forward scan: warp w computes d delta rows 16 (w % 4) .. +16 for its share of the
// slice's columns; dM is held in registers over all warps (BlockGemm tiling GM).
template <int D, int VT, int ST>
struct BScanSmem {
    static constexpr int LD = D + 8, LV = VT + 8;
    bf16 QW[ST][128 * LD];  // rows 0..63: Q, rows 64..127: W
    bf16 Ks[ST][64 * LD];
    bf16 dOs[ST][64 * LV];
    bf16 Ps[ST][64 * 72];
    float gam[ST][64];
    bf16 dMb[VT * LD];
    bf16 AD[128 * LV];  // rows 0..63: scale Gamma dO, rows 64..127: -d delta
};

template <int D, int VT, int ST, int NW>
__global__ void __launch_bounds__(NW * 32) gdn_bwd_scan_kernel(BScanArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using S = BScanSmem<D, VT, ST>;
    auto& s = *reinterpret_cast<S*>(smem_raw);
    constexpr int NTH = NW * 32, LD = S::LD, LV = S::LV;
    constexpr int NCG = NW / 4, NV = VT / NCG / 8;  // column groups of d delta, n-tiles per warp
    const int v0 = blockIdx.x * VT, bj = blockIdx.y, b = bj / a.HV, j = bj % a.HV, h = j / (a.HV / a.H);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t Tp = size_t(a.NT) * kC;
    const int r0 = 16 * (warp % 4), c0 = (warp / 4) * (VT / NCG);  // this warp's tile of d delta

    auto issue = [&](int n, int st) {
        const int t0 = n * kC, L = min(kC, a.T - t0);
        const size_t qrow0 = (size_t(b) * a.T + t0) * a.H + h;
        const size_t vrow0 = (size_t(b) * a.T + t0) * a.HV + j;
        const size_t hrow0 = size_t(bj) * Tp + t0;
        load_rows<64, D, NTH>(s.QW[st], LD, a.qn + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, D, NTH>(s.QW[st] + 64 * LD, LD, a.W + hrow0 * D, D, L, tid);
        load_rows<64, D, NTH>(s.Ks[st], LD, a.kn + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, VT, NTH>(s.dOs[st], LV, a.d_o + vrow0 * D + v0, size_t(a.HV) * D, L, tid);
        load_rows<64, 64, NTH>(s.Ps[st], 72, a.P + (size_t(bj) * a.NT + n) * (kC * kC), kC, 64, tid);
        if (tid < 16) cp_async16(&s.gam[st][tid * 4], a.gam + hrow0 + tid * 4);
        cp_async_commit();
    };

    constexpr int WR = VT / 16 < NW ? VT / 16 : NW;  // warp rows x columns of the dM tiling
    using GM = BlockGemm<VT, D, 128, WR, NW / WR, true, false>;
    float dM[GM::MT][GM::NT][4];
    GM::each(dM, warp, lane, [&](int r, int c, float& x) {
        x = a.dht ? a.dht[(size_t(bj) * D + v0 + r) * D + c] : 0.f;
        s.dMb[r * LD + c] = __float2bfloat16(x);
    });
    issue(a.NT - 1, 0);
    for (int i = 0; i < a.NT; ++i) {
        const int n = a.NT - 1 - i, st = ST == 2 ? (i & 1) : 0, t0 = n * kC, L = min(kC, a.T - t0);
        cp_async_wait_all();
        __syncthreads();
        if (ST == 2 && n > 0) issue(n - 1, st ^ 1);
        if (a.dstates)
            store_slice<D, VT, NTH>(a.dstates + ((size_t(bj) * a.NT + n) * D + v0) * D, s.dMb, tid);
        const float* gm = s.gam[st];
        const float glast = gm[L - 1];
        // d delta = diag(dec) K dM^T + scale P^T dO
        float a1[1][NV][4], a2[1][NV][4];
        zero(a1);
        zero(a2);
        warp_gemm<1, NV, D / 16, false, true>(a1, s.Ks[st] + r0 * LD, LD, s.dMb + c0 * LD, LD, lane);
        warp_gemm<1, NV, 4, true, false>(a2, s.Ps[st] + r0, 72, s.dOs[st] + c0, LV, lane);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int t = r0 + frag_row(0, e, lane);
            const float dec = t < L ? expf(glast - gm[t]) : 0.f;
#pragma unroll
            for (int nt = 0; nt < NV; ++nt) {
                const int c = c0 + frag_col(nt, e, lane);
                const float dd = dec * a1[0][nt][e] + a.scale * a2[0][nt][e];
                if (t < L) a.ddelta[(size_t(bj) * Tp + t0 + t) * D + v0 + c] = dd;
                s.AD[(64 + t) * LV + c] = __float2bfloat16(-dd);
            }
        }
        for (int idx = tid; idx < 64 * VT; idx += NTH) {
            const int t = idx / VT, c = idx % VT;
            s.AD[t * LV + c] = __float2bfloat16(a.scale * expf(gm[t]) * __bfloat162float(s.dOs[st][t * LV + c]));
        }
        __syncthreads();
        // dM0 = Gamma_L dM + [scale Gamma dO; -d delta]^T [Q; W]
        const float gl = expf(glast);
        GM::each(dM, warp, lane, [&](int, int, float& x) { x *= gl; });
        GM::run(dM, s.AD, LV, s.QW[st], LD, warp, lane);
        GM::each(dM, warp, lane, [&](int r, int c, float& x) { s.dMb[r * LD + c] = __float2bfloat16(x); });
        if (ST == 1 && n > 0) {
            __syncthreads();
            issue(n - 1, 0);
        }
    }
    if (a.dh0) GM::each(dM, warp, lane, [&](int r, int c, float& x) { a.dh0[(size_t(bj) * D + v0 + r) * D + c] = x; });
}

// ---- backward: per-chunk gradients ---------------------------------------------------------------

struct BChunkArgs {
    int B, T, H, HV, NT;
    float scale;
    const bf16 *qn, *kn, *v, *d_o;
    const float *beta, *gam, *Tm;
    const bf16 *states, *dstates, *delta;
    const float* ddelta;
    float *dqv, *dkv;
    bf16* dv;
    float *dg, *dbeta;
    // HV == H: dq, dk (B, T, H, D) bf16 written here, through the L2-norm backward when rq / rk are given
    // (the raw q, k rows and their 1/norms), instead of dqv / dkv and the finishing pass
    bf16 *dq_out, *dk_out;
    const bf16 *q_raw, *k_raw;
    const float *rq, *rk;
};

template <int D>
struct BChunkSmem {
    static constexpr int LD = D + 8;
    static constexpr int LF = 68;  // row stride of the fp32 64 x 64 matrices: 16-byte rows for float4 reads
    static constexpr int BIG1 = 2 * D * LD;  // M0, dM (bf16)
    // dW (bf16) + T, T^T, dT^T (then dA), tL (fp32), in bf16 units
    static constexpr int BIG2 = 64 * LD + 4 * 64 * LF * 2;
    static constexpr int BIG = BIG1 > BIG2 ? BIG1 : BIG2;
    bf16 Qs[64 * LD], Ks[64 * LD], Vs[64 * LD], dOs[64 * LD], Dls[64 * LD], dDs[64 * LD];
    bf16 big[BIG];
    bf16 GPs[64 * 72];
    bf16 LGs[64 * 72];  // T (bf16) first, then Gb
    float KKf[64 * LF];
    float gam[64], beta[64], dgam[64], dbet[64], tmp[64], tmpX[64], tmpY[64], dotq[64], dotk[64];
    float glast;
};

static_assert(sizeof(BChunkSmem<128>) <= 227 * 1024,
              "gdn_bwd_chunk_kernel: shared memory over the sm_90 limit");

template <int D>
__global__ void __launch_bounds__(256) gdn_bwd_chunk_kernel(BChunkArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    auto& s = *reinterpret_cast<BChunkSmem<D>*>(smem_raw);
    constexpr int LD = BChunkSmem<D>::LD, LF = BChunkSmem<D>::LF;
    const int n = blockIdx.x, bj = blockIdx.y, b = bj / a.HV, j = bj % a.HV, h = j / (a.HV / a.H);
    const int t0 = n * kC, L = min(kC, a.T - t0);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t Tp = size_t(a.NT) * kC;
    const size_t qrow0 = (size_t(b) * a.T + t0) * a.H + h;
    const size_t vrow0 = (size_t(b) * a.T + t0) * a.HV + j;
    const size_t hrow0 = size_t(bj) * Tp + t0;
    const size_t chunk = size_t(bj) * a.NT + n;
    bf16* M0s = s.big;
    bf16* dMs = s.big + D * LD;

    // three copy groups in the order of use, so the first products start while the rest is in flight:
    // the dq operands, the dk operands, then V (phase 2)
    load_rows<64, D, 256>(s.dOs, LD, a.d_o + vrow0 * D, size_t(a.HV) * D, L, tid);
    load_rows<D, D, 256>(M0s, LD, a.states + chunk * D * D, D, D, tid);
    load_rows<64, D, 256>(s.Qs, LD, a.qn + qrow0 * D, size_t(a.H) * D, L, tid);
    cp_async_commit();
    load_rows<64, D, 256>(s.Dls, LD, a.delta + hrow0 * D, D, L, tid);
    load_rows<D, D, 256>(dMs, LD, a.dstates + chunk * D * D, D, D, tid);
    load_rows<64, D, 256>(s.Ks, LD, a.kn + qrow0 * D, size_t(a.H) * D, L, tid);
    cp_async_commit();
    load_rows<64, D, 256>(s.Vs, LD, a.v + vrow0 * D, size_t(a.HV) * D, L, tid);
    cp_async_commit();
    // this thread's 16 entries of T (fp32), fetched now and stored to shared memory in phase 2, so the
    // loads overlap phase 1
    float treg[16];
    {
        const float* Tg = a.Tm + chunk * (kC * kC);
#pragma unroll
        for (int k = 0; k < 16; ++k) treg[k] = Tg[tid + 256 * k];
    }
    for (int idx = tid; idx < 64 * D / 4; idx += 256) {
        const int r = idx / (D / 4), c = (idx % (D / 4)) * 4;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < L) x = *reinterpret_cast<const float4*>(a.ddelta + (hrow0 + r) * D + c);
        *reinterpret_cast<__nv_bfloat162*>(&s.dDs[r * LD + c]) = __floats2bfloat162_rn(x.x, x.y);
        *reinterpret_cast<__nv_bfloat162*>(&s.dDs[r * LD + c + 2]) = __floats2bfloat162_rn(x.z, x.w);
    }
    if (tid < 64) {
        s.gam[tid] = a.gam[hrow0 + tid];
        s.beta[tid] = tid < L ? a.beta[vrow0 + size_t(tid) * a.HV] : 0.f;
        s.dgam[tid] = 0.f, s.dbet[tid] = 0.f, s.tmp[tid] = 0.f, s.tmpX[tid] = 0.f, s.tmpY[tid] = 0.f;
        s.dotq[tid] = 0.f, s.dotk[tid] = 0.f;
    }
    if (tid == 0) s.glast = 0.f;
    cp_async_wait<2>();
    __syncthreads();
    const float gL = s.gam[L - 1];
    auto Gam = [&](int r) { return expf(s.gam[r]); };
    auto dec = [&](int r) { return r < L ? expf(gL - s.gam[r]) : 0.f; };
    const float scale = a.scale;

    // ---- phase 1: products with the states ----
    using GD = BlockGemm<64, D, D, 4, 2, false, false>;
    // dq and dk of the chunk accumulate in registers (one tiling for every 64 x D product below) and
    // are written once at the end
    float dqA[GD::MT][GD::NT][4], dkA[GD::MT][GD::NT][4];
    zero(dqA);
    zero(dkA);
    // dq (inter-chunk) = scale Gamma dO M0;  d gamma_r += q_r . dq_r
    GD::run(dqA, s.dOs, LD, M0s, LD, warp, lane);
    each_rowsum<GD>(dqA, warp, lane, s.dgam, [&](int r, int c, float& v) {
        v *= scale * Gam(r);
        return __bfloat162float(s.Qs[r * LD + c]) * v;
    });
    cp_async_wait<1>();
    __syncthreads();
    // dk (leaving state) = diag(dec) delta dM;  d gamma_r -= k_r . that, glast += the same
    GD::run(dkA, s.Dls, LD, dMs, LD, warp, lane);
    each_rowsum<GD>(dkA, warp, lane, s.tmp, [&](int r, int c, float& v) {
        v *= dec(r);
        return __bfloat162float(s.Ks[r * LD + c]) * v;
    });
    float accW[GD::MT][GD::NT][4];  // -dW = d delta M0
    zero(accW);
    GD::run(accW, s.dDs, LD, M0s, LD, warp, lane);
    {  // <M0, dM>_F
        float f = 0.f;
        for (int idx = tid; idx < D * D / 2; idx += 256) {
            const int r = idx / (D / 2), c = (idx % (D / 2)) * 2;
            const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&M0s[r * LD + c]));
            const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&dMs[r * LD + c]));
            f += x.x * y.x + x.y * y.y;
        }
        f = warp_sum(f);
        if (lane == 0) atomicAdd(&s.glast, f);
    }
    cp_async_wait_all();
    __syncthreads();

    // ---- phase 2 ----
    bf16* dWs = s.big;
    float* Tf = reinterpret_cast<float*>(s.big + 64 * LD);  // T, row-major
    float* Ttf = Tf + 64 * LF;                              // T^T
    float* dTf = Ttf + 64 * LF;                             // dT^T, later dA (row-major)
    float* tLf = dTf + 64 * LF;
    GD::each(accW, warp, lane, [&](int r, int c, float& v) { dWs[r * LD + c] = __float2bfloat16(-v); });
    {
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            const int idx = tid + 256 * k, r = idx >> 6, c = idx & 63;
            const float t = treg[k];
            Tf[r * LF + c] = t;
            Ttf[c * LF + r] = t;
            s.LGs[r * 72 + c] = __float2bfloat16(t);
        }
    }
    if (tid < 64) atomicAdd(&s.dgam[tid], -s.tmp[tid]);
    if (tid == 0) {
        float sum = 0.f;
        for (int r = 0; r < 64; ++r) sum += s.tmp[r];
        s.glast = sum + expf(gL) * s.glast;
    }
    using G64 = BlockGemm<64, 64, D, 4, 2, false, true>;
    {  // intra-chunk scores: dP = scale dO delta^T; gamma terms of dP o P; G_P = dP o E (causal)
        float accP[G64::MT][G64::NT][4], accQ[G64::MT][G64::NT][4];
        zero(accP);
        zero(accQ);
        G64::run(accP, s.dOs, LD, s.Dls, LD, warp, lane);
        G64::run(accQ, s.Qs, LD, s.Ks, LD, warp, lane);
        const int r0 = G64::row0(warp), c0 = G64::col0(warp);
        float rs0 = 0.f, rs1 = 0.f, cs[G64::NT][2];
#pragma unroll
        for (int nt = 0; nt < G64::NT; ++nt) {
            cs[nt][0] = cs[nt][1] = 0.f;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = r0 + frag_row(0, e, lane), c = c0 + frag_col(nt, e, lane);
                const float E = c <= r ? expf(s.gam[r] - s.gam[c]) : 0.f;
                const float gp = scale * accP[0][nt][e];
                const float hh = gp * accQ[0][nt][e] * E;
                if (e < 2) rs0 += hh;
                else rs1 += hh;
                cs[nt][e & 1] += hh;
                s.GPs[r * 72 + c] = __float2bfloat16(gp * E);
            }
        }
        rs0 += __shfl_xor_sync(0xffffffffu, rs0, 1);
        rs0 += __shfl_xor_sync(0xffffffffu, rs0, 2);
        rs1 += __shfl_xor_sync(0xffffffffu, rs1, 1);
        rs1 += __shfl_xor_sync(0xffffffffu, rs1, 2);
        if ((lane & 3) == 0) {
            atomicAdd(&s.dgam[r0 + (lane >> 2)], rs0);
            atomicAdd(&s.dgam[r0 + 8 + (lane >> 2)], rs1);
        }
#pragma unroll
        for (int nt = 0; nt < G64::NT; ++nt)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                float x = cs[nt][q];
                x += __shfl_xor_sync(0xffffffffu, x, 4);
                x += __shfl_xor_sync(0xffffffffu, x, 8);
                x += __shfl_xor_sync(0xffffffffu, x, 16);
                if ((lane >> 2) == 0) atomicAdd(&s.dgam[c0 + frag_col(nt, q, lane)], -x);
            }
    }
    {  // K K^T (fp32)
        float acc[G64::MT][G64::NT][4];
        zero(acc);
        G64::run(acc, s.Ks, LD, s.Ks, LD, warp, lane);
        G64::each(acc, warp, lane, [&](int r, int c, float& v) { s.KKf[r * LF + c] = v; });
    }
    __syncthreads();

    {  // dT = dW X^T + d delta Y^T = (dW K^T) diag(beta Gamma) + (d delta V^T) diag(beta)
        float acc1[G64::MT][G64::NT][4], acc2[G64::MT][G64::NT][4];
        zero(acc1);
        zero(acc2);
        G64::run(acc1, dWs, LD, s.Ks, LD, warp, lane);
        G64::run(acc2, s.dDs, LD, s.Vs, LD, warp, lane);
        const int r0 = G64::row0(warp), c0 = G64::col0(warp);
#pragma unroll
        for (int nt = 0; nt < G64::NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = r0 + frag_row(0, e, lane), c = c0 + frag_col(nt, e, lane);
                dTf[c * LF + r] = s.beta[c] * (Gam(c) * acc1[0][nt][e] + acc2[0][nt][e]);  // transposed
            }
    }
    using GK = BlockGemm<64, D, 64, 4, 2, false, false>;
    using GKT = BlockGemm<64, D, 64, 4, 2, true, false>;
    static_assert(GK::MT == GD::MT && GK::NT == GD::NT && GKT::NT == GD::NT, "one output tiling");
    GK::run(dqA, s.GPs, 72, s.Ks, LD, warp, lane);   // dq += G_P K
    GKT::run(dkA, s.GPs, 72, s.Qs, LD, warp, lane);  // dk += G_P^T Q
    {  // dX = T^T dW: dk += beta Gamma dX; row sums dX . k for dbeta / d gamma
        float acc[GKT::MT][GKT::NT][4];
        zero(acc);
        GKT::run(acc, s.LGs, 72, dWs, LD, warp, lane);
        each_rowsum<GKT>(acc, warp, lane, s.tmpX, [&](int r, int c, float& v) {
            return v * __bfloat162float(s.Ks[r * LD + c]);
        });
        const int r0 = GKT::row0(warp);
#pragma unroll
        for (int nt = 0; nt < GKT::NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = r0 + frag_row(0, e, lane);
                dkA[0][nt][e] += s.beta[r] * Gam(r) * acc[0][nt][e];
            }
    }
    {  // dY = T^T d delta: dv = beta dY; row sums dY . v for dbeta
        float acc[GKT::MT][GKT::NT][4];
        zero(acc);
        GKT::run(acc, s.LGs, 72, s.dDs, LD, warp, lane);
        each_rowsum<GKT>(acc, warp, lane, s.tmpY, [&](int r, int c, float& v) {
            if (r < L) a.dv[(vrow0 + size_t(r) * a.HV) * D + c] = __float2bfloat16(s.beta[r] * v);
            return v * __bfloat162float(s.Vs[r * LD + c]);
        });
    }
    __syncthreads();
    if (tid < 64) {
        const float px = s.tmpX[tid], g = Gam(tid);
        atomicAdd(&s.dbet[tid], g * px + s.tmpY[tid]);
        atomicAdd(&s.dgam[tid], s.beta[tid] * g * px);
    }
    // tL = dT T^T (fp32, 4x4 per thread; dT^T and T^T rows give 16-byte reads)
    {
        const int ri = (tid >> 4) * 4, ci = (tid & 15) * 4;
        float acc[4][4] = {};
        for (int m = 0; m < 64; ++m) {
            const float4 x4 = *reinterpret_cast<const float4*>(&dTf[m * LF + ri]);
            const float4 y4 = *reinterpret_cast<const float4*>(&Ttf[m * LF + ci]);
            const float x[4] = {x4.x, x4.y, x4.z, x4.w}, y[4] = {y4.x, y4.y, y4.z, y4.w};
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int w = 0; w < 4; ++w) acc[u][w] += x[u] * y[w];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            *reinterpret_cast<float4*>(&tLf[(ri + u) * LF + ci]) =
                make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
    }
    __syncthreads();
    // dA = -T^T tL (into dT's buffer, row-major)
    {
        const int ri = (tid >> 4) * 4, ci = (tid & 15) * 4;
        float acc[4][4] = {};
        for (int m = 0; m < 64; ++m) {
            const float4 x4 = *reinterpret_cast<const float4*>(&Tf[m * LF + ri]);
            const float4 y4 = *reinterpret_cast<const float4*>(&tLf[m * LF + ci]);
            const float x[4] = {x4.x, x4.y, x4.z, x4.w}, y[4] = {y4.x, y4.y, y4.z, y4.w};
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int w = 0; w < 4; ++w) acc[u][w] += x[u] * y[w];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            *reinterpret_cast<float4*>(&dTf[(ri + u) * LF + ci]) =
                make_float4(-acc[u][0], -acc[u][1], -acc[u][2], -acc[u][3]);
    }
    __syncthreads();
    // strictly lower part: gamma terms of dA o A, dbeta, Gb = diag(beta) (dA o E) (into tL's buffer)
    {
        const int i = tid >> 2, cb = (tid & 3) * 16;
        float rs = 0.f, db = 0.f;
        const float bi = s.beta[i];
        for (int c = cb; c < cb + 16; ++c) {
            float gb = 0.f;
            if (c < i) {
                const float E = expf(s.gam[i] - s.gam[c]);
                const float kk = s.KKf[i * LF + c];
                const float da = dTf[i * LF + c];
                const float hh = da * bi * kk * E;
                rs += hh;
                s.KKf[i * LF + c] = hh;  // for the column sums below (this thread read kk already)
                const float G = da * E;
                db += G * kk;
                gb = bi * G;
            } else {
                s.KKf[i * LF + c] = 0.f;
            }
            tLf[i * LF + c] = gb;
        }
        rs += __shfl_xor_sync(0xffffffffu, rs, 1);
        rs += __shfl_xor_sync(0xffffffffu, rs, 2);
        db += __shfl_xor_sync(0xffffffffu, db, 1);
        db += __shfl_xor_sync(0xffffffffu, db, 2);
        if ((tid & 3) == 0) {
            atomicAdd(&s.dgam[i], rs);
            atomicAdd(&s.dbet[i], db);
        }
    }
    __syncthreads();
    {  // column sums of dA o A: every thread, a quarter of a column each
        const int c = tid & 63, part = tid >> 6;
        float cs = 0.f;
        for (int i = part * 16; i < part * 16 + 16; ++i) cs += s.KKf[i * LF + c];
        atomicAdd(&s.dgam[c], -cs);
    }
    for (int idx = tid; idx < 64 * 64; idx += 256) {
        const int r = idx >> 6, c = idx & 63;
        s.LGs[r * 72 + c] = __float2bfloat16(tLf[r * LF + c]);
    }
    __syncthreads();
    // d 128, dq / dk finished here through the L2 norm: the raw q, k rows and their 1/norms are staged in
    // the phase-2 buffers (free now) while the last products run, so the epilogue reads shared memory
    // (at d 64 it reads them from global memory, measured as fast)
    constexpr bool kStageRaw = D == 128;
    bf16* Xq = s.big;
    bf16* Xk = s.big + 64 * LD;
    if (kStageRaw && a.dq_out && a.rq) {
        load_rows<64, D, 256>(Xq, LD, a.q_raw + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, D, 256>(Xk, LD, a.k_raw + qrow0 * D, size_t(a.H) * D, L, tid);
        cp_async_commit();
        if (tid < 64) {
            s.tmpX[tid] = tid < L ? a.rq[qrow0 + size_t(tid) * a.H] : 0.f;
            s.tmpY[tid] = tid < L ? a.rk[qrow0 + size_t(tid) * a.H] : 0.f;
        }
    }
    // dk += (Gb + Gb^T) K (Gb strictly lower, so bf16(Gb + Gb^T) = bf16(Gb) + bf16(Gb)^T: the same numbers)
    GK::run(dkA, s.LGs, 72, s.Ks, LD, warp, lane);
    GKT::run(dkA, s.LGs, 72, s.Ks, LD, warp, lane);
    const int r0 = GD::row0(warp), c0 = GD::col0(warp);
    // f(r, c, nt, e) for each of this warp's accumulator pairs (columns c, c + 1) in a valid row
    auto each_pair = [&](auto&& f) {
#pragma unroll
        for (int nt = 0; nt < GD::NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int r = r0 + frag_row(0, e, lane), c = c0 + frag_col(nt, e, lane);
                if (r < L) f(r, c, nt, e);
            }
    };
    if (a.dq_out) {
        if (kStageRaw && a.rq) {
            cp_async_wait_all();
            __syncthreads();
        }
        // 1 / ||x|| of row r of q (isq) or k
        auto rsv = [&](bool isq, int r) {
            if constexpr (kStageRaw) return isq ? s.tmpX[r] : s.tmpY[r];
            return (isq ? a.rq : a.rk)[qrow0 + size_t(r) * a.H];
        };
        // y = x / ||x|| in fp32 from the raw row, as gdn_bwd_finish_kernel; dx = (d - (d . y) y) / ||x||
        auto yrow = [&](bool isq, int r, int c, float(&y)[2]) {
            const bf16* xp = kStageRaw ? (isq ? Xq : Xk) + r * LD + c
                                       : (isq ? a.q_raw : a.k_raw) + (qrow0 + size_t(r) * a.H) * D + c;
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(xp));
            const float k = rsv(isq, r);
            y[0] = f.x * k, y[1] = f.y * k;
        };
        if (a.rq) {
            float pq[2] = {0.f, 0.f}, pk[2] = {0.f, 0.f};  // rows r0 + lane / 4 and + 8
            each_pair([&](int r, int c, int nt, int e) {
                float y[2];
                yrow(true, r, c, y);
                pq[e >> 1] += dqA[0][nt][e] * y[0] + dqA[0][nt][e + 1] * y[1];
                yrow(false, r, c, y);
                pk[e >> 1] += dkA[0][nt][e] * y[0] + dkA[0][nt][e + 1] * y[1];
            });
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                pq[i] += __shfl_xor_sync(0xffffffffu, pq[i], 1);
                pq[i] += __shfl_xor_sync(0xffffffffu, pq[i], 2);
                pk[i] += __shfl_xor_sync(0xffffffffu, pk[i], 1);
                pk[i] += __shfl_xor_sync(0xffffffffu, pk[i], 2);
            }
            if ((lane & 3) == 0) {
                atomicAdd(&s.dotq[r0 + (lane >> 2)], pq[0]);
                atomicAdd(&s.dotq[r0 + 8 + (lane >> 2)], pq[1]);
                atomicAdd(&s.dotk[r0 + (lane >> 2)], pk[0]);
                atomicAdd(&s.dotk[r0 + 8 + (lane >> 2)], pk[1]);
            }
            __syncthreads();
        }
        each_pair([&](int r, int c, int nt, int e) {
            const size_t row = qrow0 + size_t(r) * a.H;
            float q2[2] = {dqA[0][nt][e], dqA[0][nt][e + 1]}, k2[2] = {dkA[0][nt][e], dkA[0][nt][e + 1]};
            if (a.rq) {
                float y[2];
                yrow(true, r, c, y);
                const float rq = rsv(true, r), dq = s.dotq[r];
                q2[0] = rq * (q2[0] - dq * y[0]), q2[1] = rq * (q2[1] - dq * y[1]);
                yrow(false, r, c, y);
                const float rk = rsv(false, r), dk = s.dotk[r];
                k2[0] = rk * (k2[0] - dk * y[0]), k2[1] = rk * (k2[1] - dk * y[1]);
            }
            *reinterpret_cast<__nv_bfloat162*>(a.dq_out + row * D + c) = __floats2bfloat162_rn(q2[0], q2[1]);
            *reinterpret_cast<__nv_bfloat162*>(a.dk_out + row * D + c) = __floats2bfloat162_rn(k2[0], k2[1]);
        });
    } else {
        each_pair([&](int r, int c, int nt, int e) {
            *reinterpret_cast<float2*>(a.dqv + (hrow0 + r) * D + c) =
                make_float2(dqA[0][nt][e], dqA[0][nt][e + 1]);
            *reinterpret_cast<float2*>(a.dkv + (hrow0 + r) * D + c) =
                make_float2(dkA[0][nt][e], dkA[0][nt][e + 1]);
        });
    }
    if (tid == 0) {
        s.dgam[L - 1] += s.glast;
        float acc = 0.f;
        for (int r = L - 1; r >= 0; --r) {
            acc += s.dgam[r];
            a.dg[vrow0 + size_t(r) * a.HV] = acc;
            a.dbeta[vrow0 + size_t(r) * a.HV] = s.dbet[r];
        }
    }
}

// ---- backward: sum over the value heads of a key head, then through the L2 norm ----------------------

template <int D>
__global__ void __launch_bounds__(256) gdn_bwd_finish_kernel(int B, int T, int H, int HV, int NT, const float* dxv,
                                                             const bf16* x, const float* rstd, bf16* dx) {
    const size_t row = size_t(blockIdx.x) * 8 + (threadIdx.x >> 5);  // (b, t, h)
    const int lane = threadIdx.x & 31;
    if (row >= size_t(B) * T * H) return;
    const int h = int(row % H);
    const size_t bt = row / H;
    const int t = int(bt % T), b = int(bt / T);
    const int r = HV / H;
    const size_t Tp = size_t(NT) * kC;
    constexpr int PER = D / 32;
    float d[PER] = {};
    for (int jj = 0; jj < r; ++jj) {
        const float* src = dxv + ((size_t(b) * HV + h * r + jj) * Tp + t) * D + lane * PER;
#pragma unroll
        for (int i = 0; i < PER; ++i) d[i] += src[i];
    }
    if (rstd) {
        const float rs = rstd[row];
        float y[PER], dot = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            y[i] = __bfloat162float(x[row * D + lane * PER + i]) * rs;
            dot += d[i] * y[i];
        }
        dot = warp_sum(dot);
#pragma unroll
        for (int i = 0; i < PER; ++i) d[i] = rs * (d[i] - dot * y[i]);
    }
#pragma unroll
    for (int i = 0; i < PER; i += 2)
        *reinterpret_cast<__nv_bfloat162*>(dx + row * D + lane * PER + i) = __floats2bfloat162_rn(d[i], d[i + 1]);
}

// ---- decode ----------------------------------------------------------------------------------------

// One block = 4 warps x ROWS state rows of one (sequence, value head); each lane holds D/32 columns of
// each of its warp's rows, so the state is read and written exactly once with 8- or 16-byte accesses.
template <int D, int ROWS>
__global__ void __launch_bounds__(128) gdn_decode_kernel(int H, int HV, const bf16* __restrict__ q,
                                                         const bf16* __restrict__ k, const bf16* __restrict__ v,
                                                         const float* __restrict__ g, const float* __restrict__ beta,
                                                         const float* state_in, float* state_out, bf16* __restrict__ o,
                                                         float scale, int l2norm) {
    constexpr int PER = D / 32;
    const int bj = blockIdx.y, b = bj / HV, j = bj % HV, h = j / (HV / H);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * 4 + warp) * ROWS;
    const size_t sbase = (size_t(bj) * D + row0) * D + lane * PER;
    float m[ROWS][PER];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const float* src = state_in + sbase + size_t(r) * D;
        if constexpr (PER == 4) {
            const float4 x = __ldcs(reinterpret_cast<const float4*>(src));
            m[r][0] = x.x, m[r][1] = x.y, m[r][2] = x.z, m[r][3] = x.w;
        } else {
            const float2 x = __ldcs(reinterpret_cast<const float2*>(src));
            m[r][0] = x.x, m[r][1] = x.y;
        }
    }
    float qv[PER], kv[PER];
    const bf16* qr = q + (size_t(b) * H + h) * D + lane * PER;
    const bf16* kr = k + (size_t(b) * H + h) * D + lane * PER;
#pragma unroll
    for (int i = 0; i < PER; ++i) qv[i] = __bfloat162float(qr[i]), kv[i] = __bfloat162float(kr[i]);
    float qs = scale, ks = 1.f;
    if (l2norm) {
        float sq = 0.f, sk = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) sq += qv[i] * qv[i], sk += kv[i] * kv[i];
        sq = warp_sum(sq), sk = warp_sum(sk);
        qs = scale / sqrtf(sq + 1e-6f), ks = 1.f / sqrtf(sk + 1e-6f);
    }
#pragma unroll
    for (int i = 0; i < PER; ++i) qv[i] *= qs, kv[i] *= ks;
    const float alpha = expf(g[bj]), bt = beta[bj];
    float e[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float x = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) x += m[r][i] * kv[i];
        e[r] = x;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) e[r] += __shfl_xor_sync(0xffffffffu, e[r], off);
    const bf16* vr = v + size_t(bj) * D + row0;
    float ov[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const float delta = bt * (__bfloat162float(vr[r]) - alpha * e[r]);
        float x = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            m[r][i] = alpha * m[r][i] + delta * kv[i];
            x += m[r][i] * qv[i];
        }
        ov[r] = x;
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        float* dst = state_out + sbase + size_t(r) * D;
        if constexpr (PER == 4) __stcs(reinterpret_cast<float4*>(dst), make_float4(m[r][0], m[r][1], m[r][2], m[r][3]));
        else __stcs(reinterpret_cast<float2*>(dst), make_float2(m[r][0], m[r][1]));
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) ov[r] += __shfl_xor_sync(0xffffffffu, ov[r], off);
    if (lane < ROWS) {
        float x = ov[0];
#pragma unroll
        for (int r = 1; r < ROWS; ++r)
            if (lane == r) x = ov[r];
        o[size_t(bj) * D + row0 + lane] = __float2bfloat16(x);
    }
}

void require(bool ok, const std::string& what) {
    if (!ok) throw ::hydra::Error("gdn cuda: " + what);
}

bool g_profile = false;

// Events between the kernels of one call when profiling; prints "name ms" per stage at the end.
struct Stages {
    cudaStream_t st;
    std::vector<cudaEvent_t> ev;
    std::vector<const char*> names;
    explicit Stages(cudaStream_t s) : st(s) {
        if (g_profile) mark(nullptr);
    }
    void mark(const char* name) {
        if (!g_profile) return;
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        CUDA_CHECK(cudaEventRecord(e, st));
        ev.push_back(e);
        names.push_back(name);
    }
    void report(const char* what) {
        if (!g_profile) return;
        CUDA_CHECK(cudaEventSynchronize(ev.back()));
        std::fprintf(stderr, "[gdn profile] %s:", what);
        for (size_t i = 1; i < ev.size(); ++i) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i - 1], ev[i]));
            std::fprintf(stderr, " %s %.3f ms", names[i], ms);
        }
        std::fprintf(stderr, "\n");
        for (auto e : ev) CUDA_CHECK(cudaEventDestroy(e));
    }
};

void check_shape(const GdnShape& s) {
    require(s.B > 0 && s.T > 0 && s.H > 0 && s.HV > 0,
            "bad shape B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
                " HV=" + std::to_string(s.HV));
    require(s.HV % s.H == 0, "HV=" + std::to_string(s.HV) + " is not a multiple of H=" + std::to_string(s.H));
    require(s.D == 64 || s.D == 128, "head dim " + std::to_string(s.D) + " not supported (64 or 128)");
}

// One value head per key head: the per-chunk backward finishes dq, dk itself (no sum over value heads to
// wait for), unless HYDRA_GDN_DIRECT_DQK=0 asks for the per-value-head buffers and the finishing pass.
bool direct_dqk(const GdnShape& s) {
    static const bool allowed = [] {
        const char* env = std::getenv("HYDRA_GDN_DIRECT_DQK");
        return !(env && std::strcmp(env, "0") == 0);
    }();
    return allowed && s.HV == s.H;
}

// The scans run one block per (sequence, value head, state slice) for the whole sequence. Variant
// 0: 16-row slices, double-buffered, when that still fits the GPU in one wave (long sequences, few
// heads: twice the blocks at work); 1: 32-row slices, double-buffered, when they fit one wave; 2:
// 32-row slices, single-buffered, two blocks per SM, when there are more blocks than SMs; 3: 64-row
// slices with 8 warps, double-buffered, at d 128 when those fill the GPU.
// gdn_set_scan_variant or HYDRA_GDN_SCAN (0-3) force one.
int g_scan_override = -2;  // -2: not read yet, -1: automatic

int scan_variant(const GdnShape& s) {
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    }
    if (g_scan_override == -2) {
        const char* env = std::getenv("HYDRA_GDN_SCAN");
        g_scan_override = -1;
        if (env && *env) {
            const int v = std::atoi(env);
            require(v >= 0 && v <= 3 && std::strlen(env) == 1,
                    std::string("HYDRA_GDN_SCAN must be 0, 1, 2 or 3 (got '") + env + "')");
            g_scan_override = v;
        }
    }
    if (g_scan_override >= 0) return g_scan_override;
    // d 128 with more 64-row slice blocks than SMs: the 8-warp scans (B8 T4096 H16: forward scan 0.54 vs
    // 0.72 ms, reverse 0.68 vs 0.77-0.81 ms on an H200); with fewer blocks the narrower slices put more
    // SMs to work and win (B2 T16384: 1.08 vs 1.02 ms; B1 T65536: 4.4 vs 3.0 ms)
    if (s.D == 128 && size_t(s.B) * s.HV * 2 > size_t(sms)) return 3;
    const size_t blocks32 = size_t(s.B) * s.HV * (s.D / 32);
    if (2 * blocks32 <= size_t(sms)) return 0;
    if (blocks32 <= size_t(sms)) return 1;
    return 2;
}

// One scan kernel over (D / VT slices, B * HV) blocks of NW warps, its shared-memory attribute set on the
// first launch of each instantiation (Args tells the forward from the reverse scan).
template <int D, int VT, int ST, int NW, class Args>
void launch_scan(void (*kern)(Args), size_t smem, const GdnShape& s, const Args& args, cudaStream_t st) {
    static bool attr = false;
    if (!attr) {
        set_smem(kern, smem);
        attr = true;
    }
    kern<<<dim3(D / VT, s.B * s.HV), NW * 32, smem, st>>>(args);
}

template <int D>
void forward_impl(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g, const float* beta,
                  const float* h0, bf16* o, float* ht, float scale, bool l2norm, bool save, GdnWorkspace& ws,
                  cudaStream_t st) {
    const int NT = s.num_chunks();
    const size_t rowsq = size_t(s.B) * s.T * s.H;
    const bf16 *qn = q, *kn = k;
    Stages stages(st);
    if (l2norm) {
        const unsigned blocks = unsigned((rowsq + 7) / 8);
        l2norm_rows_kernel<D><<<blocks, 256, 0, st>>>(q, ws.qn, ws.rq, rowsq);
        CUDA_CHECK(cudaGetLastError());
        l2norm_rows_kernel<D><<<blocks, 256, 0, st>>>(k, ws.kn, ws.rk, rowsq);
        CUDA_CHECK(cudaGetLastError());
        qn = ws.qn, kn = ws.kn;
        stages.mark("l2norm");
    }
    static bool attr = false;
    if (!attr) {
        set_smem(gdn_fwd_prep_kernel<D>, sizeof(PrepSmem<D>));
        attr = true;
    }
    FwdArgs fa{s.B, s.T, s.H, s.HV, NT, qn, kn, v, g, beta, ws.gam, ws.W, ws.U, ws.P, save ? ws.Tm : nullptr};
    gdn_fwd_prep_kernel<D><<<dim3(NT, s.B * s.HV), 256, sizeof(PrepSmem<D>), st>>>(fa);
    CUDA_CHECK(cudaGetLastError());
    stages.mark("prep");
    ScanArgs sa{s.B,    s.T,   s.H,   s.HV, NT, scale, qn, kn, ws.W, ws.U, ws.P, ws.gam, h0, o, ht,
                save ? ws.states : nullptr, save ? ws.delta : nullptr};
    switch (scan_variant(s)) {
        case 0:
            launch_scan<D, 16, 2, 4>(gdn_fwd_scan_kernel<D, 16, 2, 4>, sizeof(ScanSmem<D, 16, 2>), s, sa, st);
            break;
        case 1:
            launch_scan<D, 32, 2, 4>(gdn_fwd_scan_kernel<D, 32, 2, 4>, sizeof(ScanSmem<D, 32, 2>), s, sa, st);
            break;
        case 2:
            launch_scan<D, 32, 1, 4>(gdn_fwd_scan_kernel<D, 32, 1, 4>, sizeof(ScanSmem<D, 32, 1>), s, sa, st);
            break;
        default:
            launch_scan<D, 64, 2, 8>(gdn_fwd_scan_kernel<D, 64, 2, 8>, sizeof(ScanSmem<D, 64, 2>), s, sa, st);
    }
    CUDA_CHECK(cudaGetLastError());
    stages.mark("scan");
    stages.report(save ? "forward (saving)" : "forward");
}

template <int D>
void backward_impl(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* beta, const bf16* d_o,
                   const float* dht, bf16* dq, bf16* dk, bf16* dv, float* dg, float* dbeta, float* dh0, float scale,
                   bool l2norm, GdnWorkspace& ws, cudaStream_t st) {
    const int NT = s.num_chunks();
    const bf16* qn = l2norm ? ws.qn : q;
    const bf16* kn = l2norm ? ws.kn : k;
    static bool attr = false;
    if (!attr) {
        set_smem(gdn_bwd_chunk_kernel<D>, sizeof(BChunkSmem<D>));
        attr = true;
    }
    Stages stages(st);
    BScanArgs ba{s.B, s.T, s.H, s.HV, NT, scale, qn, kn, ws.W, ws.P, d_o, ws.gam, dht, dh0, ws.dstates, ws.ddelta};
    switch (scan_variant(s)) {
        case 0:
            launch_scan<D, 16, 2, 4>(gdn_bwd_scan_kernel<D, 16, 2, 4>, sizeof(BScanSmem<D, 16, 2>), s, ba,
                                     st);
            break;
        case 1:
            launch_scan<D, 32, 2, 4>(gdn_bwd_scan_kernel<D, 32, 2, 4>, sizeof(BScanSmem<D, 32, 2>), s, ba,
                                     st);
            break;
        case 2:
            launch_scan<D, 32, 1, 4>(gdn_bwd_scan_kernel<D, 32, 1, 4>, sizeof(BScanSmem<D, 32, 1>), s, ba,
                                     st);
            break;
        default:
            launch_scan<D, 64, 2, 8>(gdn_bwd_scan_kernel<D, 64, 2, 8>, sizeof(BScanSmem<D, 64, 2>), s, ba,
                                     st);
    }
    CUDA_CHECK(cudaGetLastError());
    stages.mark("bscan");
    const bool direct = direct_dqk(s);
    BChunkArgs ca{s.B,    s.T,   s.H,       s.HV,       NT,       scale,     qn,     kn,     v,  d_o, beta,
                  ws.gam, ws.Tm, ws.states, ws.dstates, ws.delta, ws.ddelta, ws.dqv, ws.dkv, dv, dg,  dbeta};
    if (direct) {
        ca.dq_out = dq, ca.dk_out = dk, ca.q_raw = q, ca.k_raw = k;
        ca.rq = l2norm ? ws.rq : nullptr, ca.rk = l2norm ? ws.rk : nullptr;
    }
    gdn_bwd_chunk_kernel<D><<<dim3(NT, s.B * s.HV), 256, sizeof(BChunkSmem<D>), st>>>(ca);
    CUDA_CHECK(cudaGetLastError());
    stages.mark("bchunk");
    if (!direct) {
        const size_t rowsq = size_t(s.B) * s.T * s.H;
        const unsigned blocks = unsigned((rowsq + 7) / 8);
        gdn_bwd_finish_kernel<D>
            <<<blocks, 256, 0, st>>>(s.B, s.T, s.H, s.HV, NT, ws.dqv, q, l2norm ? ws.rq : nullptr, dq);
        CUDA_CHECK(cudaGetLastError());
        gdn_bwd_finish_kernel<D>
            <<<blocks, 256, 0, st>>>(s.B, s.T, s.H, s.HV, NT, ws.dkv, k, l2norm ? ws.rk : nullptr, dk);
        CUDA_CHECK(cudaGetLastError());
        stages.mark("finish");
    }
    stages.report("backward");
}

}  // namespace

GdnWorkspace::GdnWorkspace(const GdnShape& s, bool train) : shape(s), training(train) {
    check_shape(s);
    const size_t NT = size_t(s.num_chunks()), D = size_t(s.D);
    const size_t rowsq = size_t(s.B) * s.T * s.H;
    const size_t hm = size_t(s.B) * s.HV * NT * kC;  // head-major padded rows
    const size_t chunks = size_t(s.B) * s.HV * NT;
    struct Item {
        void** ptr;
        size_t bytes;
    };
    std::vector<Item> items = {{(void**)&qn, rowsq * D * 2},  {(void**)&kn, rowsq * D * 2},
                               {(void**)&rq, rowsq * 4},      {(void**)&rk, rowsq * 4},
                               {(void**)&gam, hm * 4},        {(void**)&W, hm * D * 2},
                               {(void**)&U, hm * D * 2},      {(void**)&P, chunks * kC * kC * 2}};
    if (train) {
        items.push_back({(void**)&Tm, chunks * kC * kC * 4});
        items.push_back({(void**)&states, chunks * D * D * 2});
        items.push_back({(void**)&delta, hm * D * 2});
        items.push_back({(void**)&dstates, chunks * D * D * 2});
        items.push_back({(void**)&ddelta, hm * D * 4});
        if (!direct_dqk(s)) {  // otherwise the per-chunk backward writes dq, dk itself
            items.push_back({(void**)&dqv, hm * D * 4});
            items.push_back({(void**)&dkv, hm * D * 4});
        }
    }
    size_t total = 0;
    for (auto& it : items) total += (it.bytes + 255) / 256 * 256;
    CUDA_CHECK(cudaMalloc(&base_, total));
    bytes = total;
    char* p = static_cast<char*>(base_);
    for (auto& it : items) {
        *it.ptr = p;
        p += (it.bytes + 255) / 256 * 256;
    }
}

GdnWorkspace::~GdnWorkspace() {
    // checked, but reported rather than thrown (a destructor must not throw)
    if (base_) {
        const cudaError_t err = cudaFree(base_);
        if (err != cudaSuccess) std::fprintf(stderr, "gdn cuda: cudaFree failed: %s\n", cudaGetErrorString(err));
    }
}

void gdn_chunk_forward(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, const float* h0, bf16* o, float* ht, float scale, bool l2norm_qk, bool save,
                       GdnWorkspace& ws, cudaStream_t stream) {
    check_shape(s);
    require(ws.shape.B == s.B && ws.shape.T == s.T && ws.shape.H == s.H && ws.shape.HV == s.HV && ws.shape.D == s.D,
            "workspace made for another shape");
    require(!save || ws.training, "save needs a training workspace");
    if (s.D == 64) forward_impl<64>(s, q, k, v, g, beta, h0, o, ht, scale, l2norm_qk, save, ws, stream);
    else forward_impl<128>(s, q, k, v, g, beta, h0, o, ht, scale, l2norm_qk, save, ws, stream);
}

void gdn_chunk_backward(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* /*g*/,
                        const float* beta, const bf16* d_o, const float* dht, bf16* dq, bf16* dk, bf16* dv, float* dg,
                        float* dbeta, float* dh0, float scale, bool l2norm_qk, GdnWorkspace& ws, cudaStream_t stream) {
    check_shape(s);
    require(ws.training, "the backward needs a training workspace and a forward with save = true");
    require(ws.shape.B == s.B && ws.shape.T == s.T && ws.shape.H == s.H && ws.shape.HV == s.HV && ws.shape.D == s.D,
            "workspace made for another shape");
    if (s.D == 64)
        backward_impl<64>(s, q, k, v, beta, d_o, dht, dq, dk, dv, dg, dbeta, dh0, scale, l2norm_qk, ws, stream);
    else backward_impl<128>(s, q, k, v, beta, d_o, dht, dq, dk, dv, dg, dbeta, dh0, scale, l2norm_qk, ws, stream);
}

void gdn_set_profile(bool on) { g_profile = on; }

void gdn_set_scan_variant(int variant) {
    require(variant >= -1 && variant <= 3,
            "scan variant " + std::to_string(variant) + " (-1 automatic, 0 to 3)");
    g_scan_override = variant;
}

void gdn_decode_step(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v, const float* g,
                     const float* beta, const float* state_in, float* state_out, bf16* o, float scale, bool l2norm_qk,
                     cudaStream_t stream) {
    check_shape({B, 1, H, HV, D});
    constexpr int ROWS = 8;
    const dim3 grid(unsigned(D / (4 * ROWS)), unsigned(B * HV));
    if (D == 64)
        gdn_decode_kernel<64, ROWS><<<grid, 128, 0, stream>>>(H, HV, q, k, v, g, beta, state_in, state_out, o, scale,
                                                              l2norm_qk ? 1 : 0);
    else
        gdn_decode_kernel<128, ROWS><<<grid, 128, 0, stream>>>(H, HV, q, k, v, g, beta, state_in, state_out, o, scale,
                                                               l2norm_qk ? 1 : 0);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
