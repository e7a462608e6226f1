// Gated DeltaNet chunked forward/backward and decode step on the GPU (see gdn_chunk.h; the algorithm
// is research/gdn.md §2.2 / §3.2, the same formulas as ops/cpu/gdn_recurrence.cpp's chunked form).
//
// The q/k L2 norm is never materialised: the kernels read the raw rows, and the 1 / norms rq, rk (computed
// by the preparation) enter every product as diagonal factors (the backward's per-chunk kernel normalises
// its shared-memory copies instead).
// Forward, per sequence b and value head j (chunks of C = 64 tokens, L valid rows in the last one):
//   prep   (grid NT x B*HV, parallel over chunks, 8 warps): gamma = chunk-local cumsum of g; rq, rk; A =
//          strictly lower beta_r (k_r . k_c) E[r,c], E = exp(gamma_r - gamma_c), and P = (Q K^T) o E (causal)
//          on tensor cores, over the tiles on or below the diagonal; T = (I + A)^-1 in fp32 by 16 x 16
//          blocks; W = T diag(beta Gamma) K and U = T diag(beta) V on tensor cores with the fp32 factor split
//          into bf16 high and low parts.
//   scan   (grid D/VT x B*HV, sequential over chunks, a 16-, 32- or 64-row slice of the V x K state per
//          block, fp32 in registers, operands double-buffered with cp.async or single-buffered at two
//          blocks per SM, 4 to 16 warps: see gdn_scan_policy.h; the plain forward's 16- and 32-row slices
//          take W, Q, K as tensor-map tiles multicast to clusters of two slice blocks, cluster_copy.cuh,
//          every copy issued by a ninth, producer warp as soon as the cluster has freed the stage): delta = U
//          - W M0^T;  O = scale [diag(Gamma) Q M0^T + P delta];  M1 = Gamma_L M0 + (dec delta)^T K.
// Backward:
//   bscan  (reverse over chunks, V-slices): d delta = diag(dec) K dM^T + scale P^T dO (written out) and
//          dM0 = Gamma_L dM + (scale diag(Gamma) dO)^T Q - d delta^T W; dM of every chunk saved (bf16).
//   bchunk (parallel over chunks, 16 warps, persistent: one block an SM walks its share of the chunks,
//          copying the next chunk's operands under the current one's products): dq, dk (per value head,
//          fp32), dv, dbeta, dg from the saved state entering the chunk, the saved dM leaving it, delta,
//          d delta and T (gdn.md §3.2 steps 5-7).
//   finish: dq, dk summed over the value heads of each key head, then back through the L2 norm (with one
//          value head per key head the per-chunk kernel does this itself and the pass is skipped).
#include "ops/cuda/gdn_chunk.h"

#include <cuda.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/cuda/bf16_pack.cuh"
#include "ops/cuda/cluster_copy.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gdn_scan_policy.h"
#include "ops/cuda/gdn_triangle_parts.h"
#include "ops/cuda/mma_util.cuh"
#include "ops/cuda/ready_flags.cuh"
#include "ops/cuda/tile_store.cuh"

namespace hydra::cuda {

using namespace hydra::cuda::mma;
using namespace hydra::cuda::bf16_pack;
using namespace hydra::cuda::ready_flags;

namespace {

constexpr int kC = 64;  // chunk size

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

// The chunk's 64 gate cumsums and q / k 1/norms (head-major rows from hrow0, Args = ScanArgs or
// BScanArgs) into shared memory with threads 0..47, in the caller's copy group.
template <class Args>
__device__ __forceinline__ void load_chunk_scalars(float* gam, float* rq, float* rk, const Args& a,
                                                   size_t hrow0, int tid) {
    if (tid < 16)
        cp_async16(&gam[tid * 4], a.gam + hrow0 + tid * 4);
    else if (tid < 32)
        cp_async16(&rq[(tid - 16) * 4], a.rq + hrow0 + (tid - 16) * 4);
    else if (tid < 48)
        cp_async16(&rk[(tid - 32) * 4], a.rk + hrow0 + (tid - 32) * 4);
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
        if (r - r0 < 8)
            s0 += x;
        else
            s1 += x;
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

// Asks the driver to give kernel `kern` all of an SM's shared memory (none kept as L1), once per kernel: a
// flag per kernel, not per call site, since one call site launches kernels of the same type (the forward
// scan's tile-copy and cp.async instantiations).
template <class Kern>
void prefer_shared_once(Kern kern) {
    static std::vector<Kern> done;
    if (std::find(done.begin(), done.end(), kern) != done.end()) return;
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    int(cudaSharedmemCarveoutMaxShared)));
    done.push_back(kern);
}

// ---- forward: per-chunk preparation ---------------------------------------------------------------

struct FwdArgs {
    int B, T, H, HV, NT;
    int n0;  // the first chunk of this launch (blockIdx.x + n0; a part of the sequence, see forward_impl)
    bool l2norm;  // q, k rows divided by their L2 norms (folded into the products, see the prep kernel)
    const bf16 *q, *k, *v;
    const float *g, *beta;
    float *gam, *rq, *rk;  // (B, HV, NT*64): gate cumsum, 1 / ||q_t||, 1 / ||k_t|| (1 without the norm)
    bf16 *W, *U, *P;
    float* Tm;  // null unless saving for the backward
    // streamed forward (forward_impl): blocks run pair-major (blockIdx.x = pair, blockIdx.y = chunk) and
    // each sets its (pair, chunk) flag once its outputs are written; null: chunk-major, no flags
    int* ready;
#ifdef HYDRA_GDN_SCAN_CLOCKS
    // diagnostic builds only, streamed: per (chunk, pair) block the global timer at its start and end
    unsigned long long* timeline;
#endif
};

// The preparation. The q, k rows come in raw: with the L2 norm on, the 1 / norms rq, rk of the chunk's
// rows are computed here (and written for the other kernels), and every product takes them as diagonal
// factors: A = diag(beta rk) (K K^T o E) diag(rk), P = diag(rq) (Q K^T o E) diag(rk), W = T diag(beta Gamma
// rk) K. So no normalised copy of q, k is ever written or read (that pass moved 4 bytes per element).
// T = (I + A)^-1 is formed first (fp32, by 16 x 16 blocks) and W, U as products on tensor cores: W = F K
// and U = (T diag(beta)) V, the fp32 left factor F split into bf16 high and low parts (two products each;
// K and V are bf16 already, so the products carry about 16 bits of the factor, against bf16 storage of W
// and U).
// T: the four diagonal blocks by forward substitution (one column per thread), then the blocks below
// the diagonal, level by level on tensor cores: T_IJ = -T_II sum_{J <= K < I} A_IK T_KJ.
// Where T lives. d 128: in Q's place once P is done (Q's bf16 rows take as many bytes as T's fp32 ones
// there). d 64 (kSharedAT): in A's array, transposed on and above the diagonal (T[r][c] at As[c][r], A
// strictly below it), since Q's place holds only half of T: the block's shared memory falls from 58,624 to
// 49,408 bytes, so four 4-warp blocks fit an SM (three did) and two beside a d 64 scan block, where one
// fitted (the streamed forward, forward_impl; with the 4-warp prep, prep_config: call CO, from CUDA graphs,
// B8 T4096 H9 0.251 -> 0.224 ms). Its rows of 68 floats keep the transposed reads free of bank conflicts
// (call CM, 72 -> 68: the d 64 prep alone 0.155 -> 0.142 ms in profile runs); d 128 keeps 72 (the A
// epilogue's 8-byte stores).
template <int D>
struct PrepSmem {
    static constexpr bool kSharedAT = D == 64;
    static constexpr int LD = D + 8, LA = kSharedAT ? 68 : 72, LT = 68;
    static constexpr int QB = 64 * LD * 2,
                         TB = kSharedAT ? 0 : 64 * LT * 4;  // bytes of Q (bf16), of T (fp32)
    bf16 Ks[64 * LD];
    bf16 Vs[64 * LD];
    alignas(16) unsigned char QT[QB > TB ? QB : TB];  // Q, then at d 128 T once P is done
    alignas(16) float As[64 * LA];                    // A strictly lower; at d 64 T transposed on and above
    alignas(16) float Zs[3 * 256];                    // a level's Z strips: 16 x 8 for each of up to 6 warps
    alignas(16) float gam[64];                        // then beta and bgam: 16-byte reads in the factor split
    float beta[64], bgam[64], rq[64], rk[64];
};

// NW = 4 or 8 warps (prep_config below says which runs where).
template <int D, int MINB, int NW>
__global__ void __launch_bounds__(NW * 32, MINB) gdn_fwd_prep_kernel(FwdArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using S = PrepSmem<D>;
    auto& s = *reinterpret_cast<S*>(smem_raw);
    constexpr int LD = S::LD, LA = S::LA, LT = S::LT;
    // streamed: the pairs vary fastest, so the first chunks of every pair come first (the scan waits for
    // them)
    const int n = (a.ready ? blockIdx.y : blockIdx.x) + a.n0, bj = a.ready ? blockIdx.x : blockIdx.y;
    const int b = bj / a.HV, j = bj % a.HV, h = j / (a.HV / a.H);
    const int t0 = n * kC, L = min(kC, a.T - t0);
    static_assert(NW == 4 || NW == 8, "gdn_fwd_prep_kernel: 4 or 8 warps");
    constexpr int NTH = NW * 32;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t Tp = size_t(a.NT) * kC;
    const size_t qrow0 = (size_t(b) * a.T + t0) * a.H + h;
    const size_t vrow0 = (size_t(b) * a.T + t0) * a.HV + j;
    const size_t hrow0 = size_t(bj) * Tp + t0;
#ifdef HYDRA_GDN_SCAN_CLOCKS
    unsigned long long* tl_ = a.timeline && a.ready ? a.timeline + (size_t(n) * gridDim.x + bj) * 2 : nullptr;
    if (tl_ && tid == 0) tl_[0] = global_ns();
#endif
    bf16* Qs = reinterpret_cast<bf16*>(s.QT);
    float* As = s.As;
    float* Tf = reinterpret_cast<float*>(s.QT);  // d 128
    // T's element (r, c), r >= c
    auto t_at = [&](int r, int c) -> float& {
        if constexpr (S::kSharedAT)
            return As[c * LA + r];
        else
            return Tf[r * LT + c];
    };
    // T's element (r, c) anywhere: zero above the diagonal (d 64: where the array holds A; d 128: stored
    // zeros)
    auto t_or_0 = [&](int r, int c) {
        if constexpr (S::kSharedAT)
            return r >= c ? t_at(r, c) : 0.f;
        else
            return t_at(r, c);
    };

    // two copy groups: K and Q, needed first, then V, needed only by U at the end (its copy overlaps A, P and
    // T)
    load_rows<64, D, NTH>(s.Ks, LD, a.k + qrow0 * D, size_t(a.H) * D, L, tid);
    load_rows<64, D, NTH>(Qs, LD, a.q + qrow0 * D, size_t(a.H) * D, L, tid);
    cp_async_commit();
    load_rows<64, D, NTH>(s.Vs, LD, a.v + vrow0 * D, size_t(a.HV) * D, L, tid);
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
        const float b0 = r0 < L ? a.beta[vrow0 + size_t(r0) * a.HV] : 0.f;
        const float b1 = r1 < L ? a.beta[vrow0 + size_t(r1) * a.HV] : 0.f;
        s.gam[r0] = excl + x0;
        s.gam[r1] = excl + x0 + x1;
        a.gam[hrow0 + r0] = excl + x0;
        a.gam[hrow0 + r1] = excl + x0 + x1;
        s.beta[r0] = b0, s.beta[r1] = b1;
        s.bgam[r0] = b0 * expf(excl + x0), s.bgam[r1] = b1 * expf(excl + x0 + x1);
    }
    cp_async_wait<1>();  // K and Q
    __syncthreads();
    using G64 = BlockGemm<64, 64, D, 4, NW / 4, false, true>;  // a warp: 16 rows x 64 or 32 columns
    // K K^T and Q K^T on the raw rows, K's fragments loaded once for both; their epilogues need the 1 / norms
    // computed meanwhile. Both are read only on and below the diagonal (A strictly lower, P lower): a warp
    // computes its live n-tiles only, the nt1 first (some element on or below the diagonal); the warps whose
    // tile lies wholly above it (none of 4, 2 of 8) skip them. Dead tiles stay zero.
    const int below = G64::row0(warp) + 15 - G64::col0(warp);  // the warp's last row less its first column
    const int nt1 = below < 0 ? 0 : min(G64::NT, below / 8 + 1);
    float accA[G64::MT][G64::NT][4], accP[G64::MT][G64::NT][4];
    zero(accA);
    zero(accP);
    if (nt1 > 0) G64::run_shared_b(accA, s.Ks, accP, Qs, LD, s.Ks, LD, warp, lane, 0, D / 16, nt1);
    // 1 / ||row|| of the chunk's k rows (the first half of the threads) and q rows (the second), NW / 4
    // threads a row, each summing the squares of eight-element groups (fp32 from bf16; padded rows are zero
    // and give 1 / sqrt(1e-6), never used); 1 without the norm
    {
        constexpr int TPR = NTH / 128;  // threads a row: 1 or 2
        const int rr = int(unsigned(tid) / TPR),
                  part = int(unsigned(tid) % TPR);  // shifts, not signed divisions
        const bf16* x = rr < 64 ? &s.Ks[rr * LD] : &Qs[(rr - 64) * LD];
        float ss[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < D / (8 * TPR); ++i) {
            const uint4 u = *reinterpret_cast<const uint4*>(x + part * 8 + 8 * TPR * i);
            const raw_t<2> w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float f0 = raw_get<2>(w[e], 0), f1 = raw_get<2>(w[e], 1);
                ss[e] += f0 * f0 + f1 * f1;
            }
        }
        float sum = (ss[0] + ss[1]) + (ss[2] + ss[3]);
#pragma unroll
        for (int o = 1; o < TPR; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (part == 0) {
            const float r = a.l2norm ? 1.0f / sqrtf(sum + 1e-6f) : 1.f;
            if (rr < 64)
                s.rk[rr] = r, a.rk[hrow0 + rr] = r;
            else
                s.rq[rr - 64] = r, a.rq[hrow0 + rr - 64] = r;
        }
    }
    __syncthreads();
    // A and P from the same tiling: each of this thread's rows and columns' factors loaded once into
    // registers (the stores to As would otherwise force the compiler to reload them for every element), and
    // E[r, c] computed once for both; in a live n-tile everything computed, then selected (no branches); a
    // dead one (wholly above the diagonal, never read from As) gives P zeros only. E by __expf (ex2.approx):
    // its exponent is at most 0 where kept, and its error (a few ulp) is far below the bf16 rounding of P and
    // of the products A enters.
    {
        static_assert(G64::MT == 1, "gdn_fwd_prep_kernel: the epilogue assumes one m-tile per warp");
        bf16* Pg = a.P + (size_t(bj) * a.NT + n) * (kC * kC);
        const int r0 = G64::row0(warp), c0 = G64::col0(warp);
        float rowA[1][2], rowP[1][2], rowG[1][2], colK[G64::NT][2], colG[G64::NT][2];
        // padded rows: A and P rows are zero
        G64::row_values(
            warp, lane, [&](int r) { return r < L ? s.beta[r] * s.rk[r] : 0.f; }, rowA);
        G64::row_values(
            warp, lane, [&](int r) { return r < L ? s.rq[r] : 0.f; }, rowP);
        G64::row_values(
            warp, lane, [&](int r) { return s.gam[r]; }, rowG);
        G64::col_values(
            warp, lane, [&](int c) { return s.rk[c]; }, colK);
        G64::col_values(
            warp, lane, [&](int c) { return s.gam[c]; }, colG);
        uint32_t pw[2][G64::NT];  // P as bf16 pairs, stored in whole sectors after the loop (tile_store.cuh)
#pragma unroll
        for (int nt = 0; nt < G64::NT; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (nt >= nt1) {  // warp-uniform
                    pw[h][nt] = 0u;
                    continue;
                }
                const int r = r0 + frag_row(0, 2 * h, lane), c = c0 + frag_col(nt, 0, lane);
                float va[2], vp[2];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    // above the diagonal gamma_r - gamma_c may be large: its exp is discarded by the select
                    const float E = __expf(rowG[0][h] - colG[nt][e]) * colK[nt][e];
                    va[e] = c + e < r ? rowA[0][h] * accA[0][nt][2 * h + e] * E : 0.f;
                    vp[e] = c + e <= r ? rowP[0][h] * accP[0][nt][2 * h + e] * E : 0.f;
                }
                *reinterpret_cast<float2*>(&As[r * LA + c]) = make_float2(va[0], va[1]);
                pw[h][nt] = pack_bf16(vp[0], vp[1]);
            }
        store_tile_bf16<G64::NT>(pw, Pg + r0 * kC + c0, kC, 16, lane);
    }
    if (tid < 64) s.bgam[tid] *= s.rk[tid];  // read after the next barrier
    __syncthreads();                         // A complete

    // T's diagonal blocks: column c of (I + A_II)^-1, 16 rows, for the 64 (block, column) pairs
    if (tid < 64) {
        const int o = (tid >> 4) * 16, c = tid & 15;
        float x[16];
#pragma unroll
        for (int r = 0; r < 16; ++r) x[r] = r == c ? 1.f : 0.f;
#pragma unroll
        for (int r = 1; r < 16; ++r) {
            float a0 = x[r], a1 = 0.f;
#pragma unroll
            for (int m = 0; m < r; m += 4) {
                // row r's entries left of the diagonal only (at and right of it the array holds T, which
                // other threads of the block are writing): masks known at compile time
                const float4 w = *reinterpret_cast<const float4*>(&As[(o + r) * LA + o + m]);
                a0 -= w.x * x[m];
                if (m + 1 < r) a1 -= w.y * x[m + 1];
                if (m + 2 < r) a0 -= w.z * x[m + 2];
                if (m + 3 < r) a1 -= w.w * x[m + 3];
            }
            x[r] = a0 + a1;
        }
        // T's column c of the block: d 64 on and below its diagonal only (above it the array holds A), d 128
        // with the zeros above it
#pragma unroll
        for (int r = 0; r < 16; ++r)
            if (!S::kSharedAT || r >= c) t_at(o + r, o + c) = x[r];
    }
    __syncthreads();
    // the blocks d below the diagonal, level by level on tensor cores: Z = sum_{K = J}^{I - 1} A_IK T_KJ,
    // then T_IJ = -T_II Z (I = J + d). A warp forms one 16 x 8 strip of a block ((4 - d) x 2 strips: 6, 4, 2
    // of them; with 4 warps a warp may take two), Z through the strip's own 16 x 8 scratch in Zs (same warp,
    // so no block barrier between the two products). tf32 with both operands split in big and small parts,
    // three products (mma_tf32_3x, about fp32's accuracy, as in the per-chunk backward). In call AO's ncu the
    // FMA loops these replace held 36% of the prep's shared-memory wavefronts (float4 rows re-read by every
    // thread) and 23% of its stall samples.
    {
        const int g = lane >> 2, t = lane & 3;
        // c (16 x 8) += X (16 x 8) Y (8 x 8), X(r, k) and Y(k, n) giving the operands' elements
        auto mma3 = [&](float(&c)[4], auto X, auto Y) {
            uint32_t ab[4], as[4], b0b, b0s, b1b, b1s;
            tf32_split(X(g, t), ab[0], as[0]);
            tf32_split(X(g + 8, t), ab[1], as[1]);
            tf32_split(X(g, t + 4), ab[2], as[2]);
            tf32_split(X(g + 8, t + 4), ab[3], as[3]);
            tf32_split(Y(t, g), b0b, b0s);
            tf32_split(Y(t + 4, g), b1b, b1s);
            mma_tf32_3x(c, ab, as, b0b, b0s, b1b, b1s);
        };
#pragma unroll
        for (int d = 1; d < 4; ++d) {
            for (int strip = warp; strip < 2 * (4 - d); strip += NW) {
                const int J = strip >> 1, I = J + d, c0 = 16 * J + 8 * (strip & 1);
                float z[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int kk = 0; kk < 2 * d; ++kk) {  // k = 16 J .. 16 I - 1
                    const int k0 = 16 * J + 8 * kk;
                    mma3(
                        z, [&](int r, int k) { return As[(16 * I + r) * LA + k0 + k]; },
                        [&](int k, int n) { return t_or_0(k0 + k, c0 + n); });
                }
                float* zs = &s.Zs[strip * 128];  // 16 x 8, row stride 8
                *reinterpret_cast<float2*>(&zs[g * 8 + 2 * t]) = make_float2(z[0], z[1]);
                *reinterpret_cast<float2*>(&zs[(g + 8) * 8 + 2 * t]) = make_float2(z[2], z[3]);
                __syncwarp();
                float o[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int k0 = 0; k0 < 16; k0 += 8)
                    mma3(
                        o, [&](int r, int k) { return t_or_0(16 * I + r, 16 * I + k0 + k); },
                        [&](int k, int n) { return zs[(k0 + k) * 8 + n]; });
                if constexpr (S::kSharedAT) {
                    t_at(16 * I + g, c0 + 2 * t) = -o[0];
                    t_at(16 * I + g, c0 + 2 * t + 1) = -o[1];
                    t_at(16 * I + g + 8, c0 + 2 * t) = -o[2];
                    t_at(16 * I + g + 8, c0 + 2 * t + 1) = -o[3];
                } else {
                    *reinterpret_cast<float2*>(&t_at(16 * I + g, c0 + 2 * t)) = make_float2(-o[0], -o[1]);
                    *reinterpret_cast<float2*>(&t_at(16 * I + g + 8, c0 + 2 * t)) = make_float2(-o[2], -o[3]);
                }
            }
            __syncthreads();
        }
    }
    if (a.Tm) {  // T for the backward: the 16-byte pieces on or below the diagonal only (the per-chunk
                 // backward reads no others), zeros above it within them
        float* dst = a.Tm + (size_t(bj) * a.NT + n) * (kC * kC);
        for (int idx = tid; idx < 64 * 16; idx += NTH) {
            const int r = idx >> 4, c = (idx & 15) * 4;
            if (c > r) continue;
            *reinterpret_cast<float4*>(dst + r * kC + c) =
                make_float4(t_at(r, c), c + 1 <= r ? t_at(r, c + 1) : 0.f, c + 2 <= r ? t_at(r, c + 2) : 0.f,
                            c + 3 <= r ? t_at(r, c + 3) : 0.f);
        }
    }
    // W = F K, then U = F V, with F = T diag(f) (f = beta Gamma rk for W, beta for U), lower triangular.
    // Each warp forms its A fragments straight from fp32 T in shared memory: scaled by f and split into bf16
    // high and low parts in registers (two products; K and V are bf16 already, so the products carry about
    // 16 bits of the factor, against bf16 storage of W and U), over the k-blocks 0 .. I of its 16 rows in
    // block I only (the blocks above are never read; in the diagonal block the elements above the diagonal
    // are masked to zero). No split pass through shared memory and no barrier between W and U but the one for
    // V's copy.
    {
        using GK = BlockGemm<64, D, 64, 4, NW / 4, false, false>;
        static_assert(GK::MT == 1 && GK::NT % 2 == 0, "one 16-row block a warp, n-tiles in pairs");
        const int r0 = GK::row0(warp), c0 = GK::col0(warp), I = r0 / 16;
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int pass = 0; pass < 2; ++pass) {
            if (pass == 1) {
                cp_async_wait_all();  // V
                __syncthreads();
            }
            const float* f = pass == 0 ? s.bgam : s.beta;
            const bf16* X = pass == 0 ? s.Ks : s.Vs;
            float acc[1][GK::NT][4];
            zero(acc);
#pragma unroll
            for (int kb = 0; kb < 4; ++kb) {
                if (kb > I) break;  // warp-uniform: F is zero right of the warp's diagonal block
                // a[0]: (row g, k 2t), a[1]: (g + 8, 2t), a[2]: (g, 2t + 8), a[3]: (g + 8, 2t + 8); pairs
                // along k
                uint32_t hi[4], lo[4];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int r = r0 + g + 8 * (i & 1), c = 16 * kb + 2 * t + 8 * (i >> 1);
                    const float2 fv = *reinterpret_cast<const float2*>(&f[c]);
                    float x0, x1;
                    if constexpr (S::kSharedAT) {
                        x0 = t_or_0(r, c) * fv.x, x1 = t_or_0(r, c + 1) * fv.y;
                    } else {
                        const float2 tv = *reinterpret_cast<const float2*>(&t_at(r, c));
                        x0 = tv.x * fv.x, x1 = tv.y * fv.y;
                    }
                    hi[i] = pack_bf16(x0, x1);
                    const float2 h = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&hi[i]));
                    lo[i] = pack_bf16(x0 - h.x, x1 - h.y);
                }
#pragma unroll
                for (int np = 0; np < GK::NT / 2; ++np) {
                    uint32_t b[4];
                    load_b2<false>(b, X + (16 * kb) * LD + c0 + 16 * np, LD, lane);
                    mma_bf16(acc[0][2 * np], hi, b[0], b[1]);
                    mma_bf16(acc[0][2 * np + 1], hi, b[2], b[3]);
                    mma_bf16(acc[0][2 * np], lo, b[0], b[1]);
                    mma_bf16(acc[0][2 * np + 1], lo, b[2], b[3]);
                }
            }
            // W or U as bf16, in whole 32-byte sectors (tile_store.cuh)
            bf16* dst = (pass == 0 ? a.W : a.U) + hrow0 * D;
            uint32_t wds[2][GK::NT];
#pragma unroll
            for (int nt = 0; nt < GK::NT; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h) wds[h][nt] = pack_bf16(acc[0][nt][2 * h], acc[0][nt][2 * h + 1]);
            store_tile_bf16<GK::NT>(wds, dst + size_t(r0) * D + c0, D, L - r0, lane);
        }
    }
    if (a.ready) {
        __syncthreads();  // every thread's stores of this chunk (gam, rq, rk, P, W, U) are issued
#ifdef HYDRA_GDN_SCAN_CLOCKS
        if (tl_ && tid == 0) tl_[1] = global_ns();
#endif
        if (tid == 0) signal_ready(a.ready + size_t(bj) * a.NT + n);
    }
}

// ---- forward: the state scan with the outputs ------------------------------------------------------

struct ScanArgs {
    int B, T, H, HV, NT;
    int n0, n1;  // the chunks n0 .. n1 - 1 of this launch, from state h0 to state ht (a part of the sequence)
    float scale;
    const bf16 *q, *k, *W, *U, *P;  // q, k raw: their 1 / norms rq, rk are diagonal factors
    const float *gam, *rq, *rk;
    const float* h0;
    bf16* o;
    float* ht;
    bf16* states;  // null unless saving
    bf16* delta;   // null unless saving
    // streamed forward: the prep's (pair, chunk) flags, waited for before each chunk's copies; null: the prep
    // has finished before the scan starts
    int* ready;  // d 64: cleared by the pair's last block to finish (kGdnScanClearsFlags)
    // the tile-copy scan (MC): tensor maps of W (D, T, B * HV, 1), q and k (D, H, T, B), boxes of 64 x 64
    // with a 128-byte swizzle
    CUtensorMap tm_w, tm_q, tm_k;
#ifdef HYDRA_GDN_SCAN_CLOCKS
    // diagnostic builds only: per block and warp, the SM cycles spent in each phase of the chunk loop
    // (kScanClockPhases sums over the chunks), printed by the profile mode (gdn_set_profile); and per block
    // the global timer at its start, once its first chunk's copies have landed, and at its loop's end
    unsigned long long* clocks;
    unsigned long long* timeline;
#endif
    int* done;  // streamed, d 64 slices: per pair, its blocks that have finished (zero between forwards)
};

// Whether the forward scan clears the streamed forward's ready flags as it ends (fwd_scan), so that they are
// zero between forwards without a memset before each (d 64), or the forward zeroes them first (d 128).
template <int D>
inline constexpr bool kGdnScanClearsFlags = D == 64;

#ifdef HYDRA_GDN_SCAN_CLOCKS
// The forward scan's loop phases, timed by each warp (cycles summed over the chunks): 0 the top barrier (and
// the waits for the chunk's flag and copies), 1 [W; Q] M0^T and its epilogue, 2 the copies issued / states
// saved after it, 3 the middle barrier, 4 the state update (owners) or the outputs (Q-row warps), 5 the rest.
constexpr int kScanClockPhases = 6;
#define SCAN_CLOCK(i)                                                    \
    do {                                                                 \
        long long now_;                                                  \
        asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(now_)::"memory"); \
        clk_[i] += now_ - clk_t_;                                        \
        clk_t_ = now_;                                                   \
    } while (0)
#else
#define SCAN_CLOCK(i) \
    do {              \
    } while (0)
#endif

// One block per (sequence, value head, VT-row state slice) with NW warps (4, 8 or 16), walking the chunks in
// order. VT = 16, 32 or 64 (16 when there are too few (sequence, head) pairs to fill the GPU with wider
// slices; 64-row slices halve the operand loads that every slice block of a head repeats: the chunk's
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
    float gam[ST][64], rq[ST][64], rk[ST][64];
    bf16 Mb[VT * LD];
    bf16 Db[64 * LV];  // delta
    bf16 Dd[64 * LV];  // dec * delta
};

// The tile-copy scan's shared memory (MC): W, Q and K of a chunk as 64 x 64 tiles written by the copy engine
// with a 128-byte swizzle (swz64 below), the rest as ScanSmem; the start aligned to 1024 bytes by the
// kernel (the launch asks for 1 KB more).
template <int D, int VT, int ST>
struct ScanSmemTile {
    static constexpr int LD = D + 8, LV = VT + 8;
    alignas(1024) bf16 Wt[ST][64 * D];  // D / 64 tiles side by side (columns 0..63, 64..127)
    alignas(1024) bf16 Qt[ST][64 * D];
    alignas(1024) bf16 Kt[ST][64 * D];
    bf16 Us[ST][64 * LV];
    bf16 Ps[ST][64 * 72];
    float gam[ST][64], rq[ST][64], rk[ST][64];
    bf16 Mb[VT * LD];
    bf16 Db[64 * LV];
    bf16 Dd[64 * LV];
    // per stage: the barrier of the copies phase A reads (full: W, Q, the U slice, the scalars) and of those
    // read after the middle barrier (later: K, P), and the cluster's "done reading" (empty)
    alignas(8) uint64_t full[ST], later[ST], empty[ST];
};

// Element (r, c) of a 64-row tile stack written by a 128-byte-swizzled tensor-map copy: column c / 64 picks
// the 64 x 64 tile, and within it the 16-byte piece c % 64 / 8 of row r sits at piece (c % 64 / 8) ^ (r % 8).
// ldmatrix's eight rows of one piece then land in eight different bank groups.
__device__ __forceinline__ const bf16* swz64(const bf16* tiles, int r, int c) {
    return tiles + (c >> 6) * 4096 + r * 64 + ((((c & 63) >> 3) ^ (r & 7)) << 3) + (c & 7);
}

// SAVE: the saving forward's instantiation, which also writes each chunk's entering state and delta
// (a.states, a.delta) for the backward; the plain forward's has none of that code.
// MC: W, Q and K by tensor-map tile copies (cluster_copy.cuh) in 64 x 64 swizzled tiles (ScanSmemTile), one
// instruction a tile; launched in clusters of the head's slice blocks, which read the same tiles, each tile
// is copied once for the cluster and multicast into every block's shared memory (each block issuing its
// share); the U slice, P and the scalars stay per-block cp.async copies. A stage is copied into again once
// every block of the cluster has reported (on the stage's empty barrier) that it finished reading it. ST = 2.
// MC: one more warp, the producer (warp NW), issues every copy of the block (the tile copies, and the U
// slice, P and the scalars by cp.async completing on mbarriers too), each chunk as soon as every block of
// the cluster has finished reading its stage (and, streamed, the prep's flag is set); the NW compute warps
// only wait for the stage's mbarriers (full before phase A, later for K and P after the middle barrier) and
// synchronise among themselves (named barrier 1). Before, one compute warp issued the tile copies before the
// middle barrier: call CF/CG's phase clocks (B1 T65536, the scan alone) put that warp ~700 cycles a chunk
// behind the W-row warps there, and the copies, issued that late, were still landing at the next chunk's top
// barrier. Call CI (H200, from CUDA graphs, streamed): B1 T65536 forward 2.165 -> 1.914 ms, B2 T16384 0.744
// -> 0.742; the scan alone (phase-clock builds, calls CF and CI) 1.91 -> 1.48 ms at B1 and 0.61 -> 0.50 at B2
// (B2's forward is bound by the prep beside it).
template <int D, int VT, int ST, int NW, bool SAVE, bool MC>
__device__ __forceinline__ void fwd_scan(const ScanArgs& a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using S = std::conditional_t<MC, ScanSmemTile<D, VT, ST>, ScanSmem<D, VT, ST>>;
    auto& s =
        *reinterpret_cast<S*>(MC ? reinterpret_cast<unsigned char*>(
                                       (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))
                                 : smem_raw);
    constexpr int NTH = NW * 32, LD = S::LD, LV = S::LV;
    constexpr int NCG = NW / 4, NV = VT / NCG / 8;  // column groups of [W; Q] M0^T, n-tiles per warp
    // warps owning the state and its 16-row groups: the W-row warps, or for whole heads every warp (16 rows x
    // D / 2 columns each: the state update's products spread over all 16 warps, and 32 state registers a
    // warp instead of 64, where the W-row warps alone spilled a loop counter in call AW)
    constexpr bool kAllOwn = VT == 128;
    constexpr int NWW = kAllOwn ? NW : NW / 2, RG = VT / 16;
    static_assert(RG <= NWW, "gdn_fwd_scan_kernel: more 16-row groups than state-owning warps");
    constexpr int MCOLS = D * RG / NWW;  // state columns per owning warp
    const int v0 = blockIdx.x * VT, bj = blockIdx.y, b = bj / a.HV, j = bj % a.HV, h = j / (a.HV / a.H);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t Tp = size_t(a.NT) * kC;
    const int r0 = 32 * (warp / NCG), c0 = (warp % NCG) * (VT / NCG);  // this warp's tile of [W; Q] M0^T
    // wrows: the warp computes W rows of [W; Q] M0^T (r0 < 64); owner: it holds a part of the state
    const bool wrows = warp < NW / 2, owner = warp < NWW;
    const int mrow0 = 16 * (warp / (NWW / RG)), mcol0 = (warp % (NWW / RG)) * MCOLS;  // its state part

    static_assert(!MC || (ST == 2 && !SAVE), "gdn_fwd_scan_kernel: cluster copies need two stages");
    // the compute warps' barrier: named barrier 1 beside the producer warp (MC), else the block's
    auto compute_sync = [] {
        if constexpr (MC)
            asm volatile("bar.sync 1, %0;\n" ::"n"(NTH) : "memory");
        else
            __syncthreads();
    };
    // without MC: this block's copies of chunk n into stage st by all its threads
    auto issue = [&](int n, int st) {
        if constexpr (!MC) {
            const int t0 = n * kC, L = min(kC, a.T - t0);
            const size_t hrow0 = size_t(bj) * Tp + t0, qrow0 = (size_t(b) * a.T + t0) * a.H + h;
            load_rows<64, D, NTH>(s.QW[st], LD, a.W + hrow0 * D, D, L, tid);
            load_rows<64, D, NTH>(s.QW[st] + 64 * LD, LD, a.q + qrow0 * D, size_t(a.H) * D, L, tid);
            load_rows<64, D, NTH>(s.Ks[st], LD, a.k + qrow0 * D, size_t(a.H) * D, L, tid);
            load_rows<64, 64, NTH>(s.Ps[st], 72, a.P + (size_t(bj) * a.NT + n) * (kC * kC), kC, 64, tid);
            load_rows<64, VT, NTH>(s.Us[st], LV, a.U + hrow0 * D + v0, D, L, tid);
            load_chunk_scalars(s.gam[st], s.rq[st], s.rk[st], a, hrow0, tid);
            cp_async_commit();
        }
    };
#ifdef HYDRA_GDN_SCAN_CLOCKS
    long long clk_[kScanClockPhases] = {}, clk_t_ = clock64();
    unsigned long long* tl_ =
        a.timeline ? a.timeline + (size_t(blockIdx.y) * gridDim.x + blockIdx.x) * 3 : nullptr;
    if (tl_ && threadIdx.x == 0) tl_[0] = global_ns();
#endif
    // streamed: the prep's per-chunk flags of this (sequence, head)
    int* ready = a.ready ? a.ready + size_t(bj) * a.NT : nullptr;
    if constexpr (MC) {
        const uint32_t rank = cluster_copy::rank(), CL = cluster_copy::size();
        if (tid == 0) {
            for (int i = 0; i < ST; ++i) {
                // each: the producer's expected bytes (one arrival) and its lanes' cp.async copies (32
                // arrivals)
                cluster_copy::init(&s.full[i], 33);
                cluster_copy::init(&s.later[i], 33);
                cluster_copy::init(&s.empty[i], CL);
            }
        }
        cluster_copy::sync();  // every block's barriers initialised before any copy or arrival reaches them
        if (warp == NW) {
            // the producer: chunk n into stage st once every block of the cluster has finished reading the
            // stage's previous chunk (n - 2; from the second use of each stage on) and, streamed, the prep's
            // flag is set: this block's share of the W, Q, K tiles (tile i of 3 D / 64 by rank i % CL; rows
            // past the sequence's end come as zeros, outside the tensor maps), and its own U slice, P and
            // scalars by cp.async, completing on the stage's mbarrier
            constexpr int kTiles = 3 * (D / 64);
            const uint16_t mask = CL > 1 ? uint16_t((1u << CL) - 1) : uint16_t(1);
            for (int n = a.n0; n < a.n1; ++n) {
                const int st = (n - a.n0) & 1, use = (n - a.n0) >> 1, t0 = n * kC, L = min(kC, a.T - t0);
                const size_t hrow0 = size_t(bj) * Tp + t0;
                if (use > 0) cluster_copy::wait(&s.empty[st], (use - 1) & 1);
                // streamed: the cp.async copies read L2, where the prep's fenced stores are, after lane 0 has
                // seen the flag (ready_flags.cuh); the tile copies after a proxy fence too
                if (ready && lane == 0) wait_ready(ready + n);
                __syncwarp();
                uint64_t* later = &s.later[st];
                load_rows<64, VT, 32>(s.Us[st], LV, a.U + hrow0 * D + v0, D, L, lane);
                load_chunk_scalars(s.gam[st], s.rq[st], s.rk[st], a, hrow0, lane);
                if (lane < 16) load_chunk_scalars(s.gam[st], s.rq[st], s.rk[st], a, hrow0, lane + 32);
                cluster_copy::arrive_on_copies(&s.full[st]);
                load_rows<64, 64, 32>(s.Ps[st], 72, a.P + (size_t(bj) * a.NT + n) * (kC * kC), kC, 64, lane);
                cluster_copy::arrive_on_copies(later);
                // the zero rows of a last chunk's U slice, stored by the lanes, released by lane 0's arrival
                __syncwarp();
                if (lane == 0) {
                    constexpr uint32_t kTileBytes = 64 * 64 * 2;
                    cluster_copy::expect(&s.full[st], uint32_t(2 * (D / 64)) * kTileBytes);
                    cluster_copy::expect(later, uint32_t(D / 64) * kTileBytes);
                    if (ready) cluster_copy::fence_async_global();
                    // W and Q first: phase A waits for them
                    for (int i = int(rank); i < kTiles; i += int(CL)) {
                        const int m = i / (D / 64), c0 = (i % (D / 64)) * 64;
                        bf16* dst = (m == 0 ? s.Wt[st] : m == 1 ? s.Qt[st] : s.Kt[st]) + (c0 / 64) * 4096;
                        if (m == 0)
                            cluster_copy::tile4(dst, &a.tm_w, c0, t0, bj, 0, &s.full[st], mask);
                        else
                            cluster_copy::tile4(dst, m == 1 ? &a.tm_q : &a.tm_k, c0, h, t0, b,
                                                m == 1 ? &s.full[st] : later, mask);
                    }
                }
                __syncwarp();
            }
            cluster_copy::sync();  // the compute warps' closing cluster barrier, this warp's part of it
            return;
        }
    }

    float M[1][MCOLS / 8][4];
    if (owner) {
#pragma unroll
        for (int nt = 0; nt < MCOLS / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = mrow0 + frag_row(0, e, lane), c = mcol0 + frag_col(nt, e, lane);
                const float x = a.h0 ? a.h0[(size_t(bj) * D + v0 + r) * D + c] : 0.f;
                M[0][nt][e] = x;
                s.Mb[r * LD + c] = __float2bfloat16(x);
            }
    }
    // without MC, streamed: thread 0 waits for a chunk's flag before the barrier that precedes its copies;
    // the flag of the chunk copied next (ST chunks ahead) is loaded a chunk early, so only a chunk the prep
    // has not finished yet costs a wait
    int next_ready = 1;  // thread 0: the flag of the next chunk to copy, as loaded a chunk ago
    if constexpr (!MC) {
        if (ready) {
            if (tid == 0) {
                wait_ready(ready + a.n0);
                if (a.n0 + 1 < a.n1) next_ready = peek_ready(ready + a.n0 + 1);
            }
            __syncthreads();
        }
        issue(a.n0, 0);
    }
#ifdef HYDRA_GDN_SCAN_CLOCKS
    for (long long& c : clk_) c = 0;
    clk_t_ = clock64();
#endif
    for (int n = a.n0; n < a.n1; ++n) {
        const int st = ST == 2 ? ((n - a.n0) & 1) : 0, t0 = n * kC, L = min(kC, a.T - t0);
        SCAN_CLOCK(5);
        if constexpr (MC) {
            cluster_copy::wait(&s.full[st], ((n - a.n0) >> 1) & 1);
            compute_sync();  // and the state of the previous chunk's update in Mb
            SCAN_CLOCK(0);
#ifdef HYDRA_GDN_SCAN_CLOCKS
            if (tl_ && n == a.n0 && threadIdx.x == 0) tl_[1] = global_ns();
#endif
            // this block is done with the other stage (chunk n - 1): told to every block whose producer will
            // copy into it (chunk n + 1), by the first Q-row warp (off the W-row warps' chain)
            const int CL = int(cluster_copy::size());
            if (n - 1 >= a.n0 && n + 1 < a.n1 && tid >= NTH / 2 && tid < NTH / 2 + CL)
                cluster_copy::arrive_remote(&s.empty[st ^ 1], tid - NTH / 2);
        } else {
            if (ST == 2 && ready && tid == 0 && n + 1 < a.n1 && !next_ready) wait_ready(ready + n + 1);
            cp_async_wait_all();
            __syncthreads();
            SCAN_CLOCK(0);
#ifdef HYDRA_GDN_SCAN_CLOCKS
            if (tl_ && n == a.n0 && threadIdx.x == 0) tl_[1] = global_ns();
#endif
            if (ST == 2 && n + 1 < a.n1) issue(n + 1, st ^ 1);
            if (ready && tid == 0 && n + ST < a.n1) next_ready = peek_ready(ready + n + ST);
        }
        const float* gm = s.gam[st];
        const float glast = gm[L - 1];
        float acc[2][NV][4];
        zero(acc);
        // [W; Q] M0^T: the W rows (-> delta) and the Q rows (-> outputs)
        if constexpr (MC) {
            const bf16* tiles = r0 < 64 ? s.Wt[st] : s.Qt[st];
#pragma unroll
            for (int ks = 0; ks < D / 16; ++ks) {
                uint32_t af[2][4];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
                    ldsm_x4(af[mt],
                            swz64(tiles, (r0 & 63) + mt * 16 + (lane & 15), ks * 16 + ((lane >> 4) << 3)));
#pragma unroll
                for (int nt = 0; nt < NV; ++nt) {
                    uint32_t bf[2];
                    load_b1<true>(bf, s.Mb + (c0 + nt * 8) * LD + ks * 16, LD, lane);
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt) mma_bf16(acc[mt][nt], af[mt], bf[0], bf[1]);
                }
            }
        } else {
            warp_gemm<2, NV, D / 16, false, true>(acc, s.QW[st] + r0 * LD, LD, s.Mb + c0 * LD, LD, lane);
        }
        if (wrows) {  // delta = U - W M0^T (rows t = r0 ..)
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {  // the accumulator's column pairs: 4-byte accesses
                    const int t = r0 + frag_row(mt, e, lane);
                    // with k_t's 1 / norm; computed for every row, then selected (no branch in the warp)
                    // __expf: the exponent is at most 0 (g <= 0: gam falls along the chunk)
                    const float dec_t = __expf(glast - gm[t]) * s.rk[st][t], dec = t < L ? dec_t : 0.f;
#pragma unroll
                    for (int nt = 0; nt < NV; ++nt) {
                        const int c = c0 + frag_col(nt, e, lane);
                        const float2 u = __bfloat1622float2(
                            *reinterpret_cast<const __nv_bfloat162*>(&s.Us[st][t * LV + c]));
                        const float d0 = u.x - acc[mt][nt][e], d1 = u.y - acc[mt][nt][e + 1];
                        const __nv_bfloat162 dl = __floats2bfloat162_rn(d0, d1);
                        *reinterpret_cast<__nv_bfloat162*>(&s.Db[t * LV + c]) = dl;
                        *reinterpret_cast<__nv_bfloat162*>(&s.Dd[t * LV + c]) =
                            __floats2bfloat162_rn(dec * d0, dec * d1);
                    }
                }
            SCAN_CLOCK(1);
        } else {  // diag(Gamma rq) Q M0^T (rows t = r0 - 64 ..)
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int t = r0 - 64 + frag_row(mt, e, lane);
                    const float G = __expf(gm[t]) * s.rq[st][t];
#pragma unroll
                    for (int nt = 0; nt < NV; ++nt) acc[mt][nt][e] *= G;
                }
            SCAN_CLOCK(1);
            // saving: the state entering this chunk, by the Q-row warps, whose part before the barrier is
            // shorter than the W-row warps' delta epilogue (the stores stay off the chain of the next chunk)
            if constexpr (SAVE)
                store_slice<D, VT, NTH / 2>(a.states + ((size_t(bj) * a.NT + n) * D + v0) * D, s.Mb,
                                            tid - NTH / 2);
        }
        SCAN_CLOCK(2);
        compute_sync();
        SCAN_CLOCK(3);
        if constexpr (MC) cluster_copy::wait(&s.later[st], ((n - a.n0) >> 1) & 1);  // K and P
        // the state update first (the next chunk waits for it), then the outputs of the Q-row warps
        if (owner) {
            // M1 = Gamma_L M0 + (dec delta)^T K
            const float gl = expf(glast);
#pragma unroll
            for (int nt = 0; nt < MCOLS / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) M[0][nt][e] *= gl;
            if constexpr (MC) {
                static_assert(MCOLS % 16 == 0, "gdn_fwd_scan_kernel: state columns in pairs of n-tiles");
#pragma unroll
                for (int ks = 0; ks < 4; ++ks) {
                    uint32_t af[4];
                    load_a<true>(af, s.Dd + (ks * 16) * LV + mrow0, LV, lane);
                    const int i = lane >> 3, kr = ks * 16 + ((i & 1) << 3) + (lane & 7);
#pragma unroll
                    for (int np = 0; np < MCOLS / 16; ++np) {
                        uint32_t bf[4];
                        ldsm_x4_t(bf, swz64(s.Kt[st], kr, mcol0 + np * 16 + ((i >> 1) << 3)));
                        mma_bf16(M[0][2 * np], af, bf[0], bf[1]);
                        mma_bf16(M[0][2 * np + 1], af, bf[2], bf[3]);
                    }
                }
            } else {
                warp_gemm<1, MCOLS / 8, 4, true, false>(M, s.Dd + mrow0, LV, s.Ks[st] + mcol0, LD, lane);
            }
#pragma unroll
            for (int nt = 0; nt < MCOLS / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int r = mrow0 + frag_row(0, e, lane), c = mcol0 + frag_col(nt, e, lane);
                    *reinterpret_cast<__nv_bfloat162*>(&s.Mb[r * LD + c]) =
                        __floats2bfloat162_rn(M[0][nt][e], M[0][nt][e + 1]);
                }
        }
        if (SAVE && wrows) {
            // saving: delta from shared memory in 16-byte pieces by the W-row warps, while the Q-row warps
            // compute the outputs (Db is rewritten only after the next chunk's first barrier)
            for (int idx = tid; idx < L * (VT / 8); idx += NTH / 2) {
                const int t = idx / (VT / 8), c = (idx % (VT / 8)) * 8;
                *reinterpret_cast<uint4*>(&a.delta[(size_t(bj) * Tp + t0 + t) * D + v0 + c]) =
                    *reinterpret_cast<const uint4*>(&s.Db[t * LV + c]);
            }
        }
        if (!wrows) {
            // O = scale [diag(Gamma) Q M0^T + P delta]
            // P is lower triangular: rows r0 - 64 .. +32 need the k-steps up to their last 16-row block
            warp_gemm<2, NV, 4, false, false>(acc, s.Ps[st] + (r0 - 64) * 72, 72, s.Db + c0, LV, lane, 0,
                                              (r0 - 64) / 16 + 2);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int nt = 0; nt < NV; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; e += 2) {
                        const int t = r0 - 64 + frag_row(mt, e, lane), c = c0 + frag_col(nt, e, lane);
                        if (t < L)
                            *reinterpret_cast<__nv_bfloat162*>(
                                a.o + ((size_t(b) * a.T + t0 + t) * a.HV + j) * D + v0 + c) =
                                __floats2bfloat162_rn(a.scale * acc[mt][nt][e], a.scale * acc[mt][nt][e + 1]);
                    }
        }
        SCAN_CLOCK(4);
        if constexpr (ST == 1) {
            if (n + 1 < a.n1) {
                if (ready && tid == 0 && !next_ready) wait_ready(ready + n + 1);
                __syncthreads();  // every read of this chunk's buffers is done
                issue(n + 1, 0);
            }
        }
    }
#ifdef HYDRA_GDN_SCAN_CLOCKS
    if (tl_ && threadIdx.x == 0) tl_[2] = global_ns();
#endif
    // Streamed: the last of the pair's blocks to get here (the only one for whole heads; else the one whose
    // count in a.done completes it) clears the pair's flags for the next forward, which then needs no memset
    // before its kernels (forward_impl; call DC, B8 T4096 H9 d 64 from graphs: 0.2243 -> 0.2195 ms). Every
    // read of a flag by this block is behind it: thread 0's waits (cp.async copies) or the producer warp's
    // (MC), whose copies the compute warps have consumed; the other blocks' reads are behind their counts.
    // Slices clear by one thread, and only their instantiations hold that code: a warp-wide form, or the
    // slices' code compiled into the whole-head scans, changed the whole-head scans' register allocation (the
    // d 64 saving scan 128 -> 161 registers, too many for a prep block beside it). d 64 only
    // (kGdnScanClearsFlags): at d 128 the clearing code changed the scans' allocation too (call DD, B8
    // forward 0.623 -> 0.634 ms), for no gain there, where the forward keeps its memset before the kernels.
    if constexpr (kGdnScanClearsFlags<D>) {
        if (ready) {
            if constexpr (VT == D) {  // whole heads: one block a pair
                for (int i = tid; i < a.n1 - a.n0; i += NTH) ready[a.n0 + i] = 0;
            } else {
                if (tid == 0 && atomicAdd(a.done + bj, 1) == int(gridDim.x) - 1) {
                    for (int i = a.n0; i < a.n1; ++i) ready[i] = 0;
                    a.done[bj] = 0;
                }
            }
        }
    }
    if (a.ht && owner) {
#pragma unroll
        for (int nt = 0; nt < MCOLS / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = mrow0 + frag_row(0, e, lane), c = mcol0 + frag_col(nt, e, lane);
                a.ht[(size_t(bj) * D + v0 + r) * D + c] = M[0][nt][e];
            }
    }
#ifdef HYDRA_GDN_SCAN_CLOCKS
    if (lane == 0 && a.clocks && warp < NW) {
        unsigned long long* dst =
            a.clocks + ((size_t(blockIdx.y) * gridDim.x + blockIdx.x) * NW + warp) * kScanClockPhases;
        for (int i = 0; i < kScanClockPhases; ++i) dst[i] = (unsigned long long)clk_[i];
    }
#endif
    if constexpr (MC) cluster_copy::sync();  // no block leaves while another may still signal its barriers
}

// The forward scan's kernels: the cp.async instantiations, and the tile-copy one (MC) with its producer warp,
// held to 112 registers so that an 8-warp prep block (up to 88 registers) fits beside it in the streamed
// forward, in each of the SM's four register files too (gdn_prep_fits_beside_scan: three of its warps and two
// of the prep's in one). No spills at 112 (ptxas, every instantiation).
template <int D, int VT, int ST, int NW, bool SAVE>
__global__ void __launch_bounds__(NW * 32) gdn_fwd_scan_kernel(const __grid_constant__ ScanArgs a) {
    fwd_scan<D, VT, ST, NW, SAVE, false>(a);
}
template <int D, int VT>
__global__ void __maxnreg__(112) gdn_fwd_scan_tile_kernel(const __grid_constant__ ScanArgs a) {
    fwd_scan<D, VT, 2, 8, false, true>(a);
}
// Threads of the tile-copy scan's block: 8 compute warps and the producer.
constexpr int kScanTileThreads = 9 * 32;

// ---- backward: reverse state-gradient scan ---------------------------------------------------------

struct BScanArgs {
    int B, T, H, HV, NT;
    float scale;
    const bf16 *q, *k, *W, *P, *d_o;  // q, k raw, as in the forward scan
    const float *gam, *rq, *rk;
    const float* dht;
    float* dh0;
    bf16* dstates;
    bf16* ddelta;  // bf16: its one reader, the per-chunk backward, takes it as a bf16 product operand
};

// The reverse scan, one block per (sequence, value head, VT-row slice of dM) with NW warps (4, 8 or 16), the
// same variants as the forward scan: warp w computes d delta rows 16 (w % 4) .. +16 for its share of the
// slice's columns; dM is held in registers over all warps (BlockGemm tiling GM).
template <int D, int VT, int ST>
struct BScanSmem {
    static constexpr int LD = D + 8, LV = VT + 8;
    bf16 QW[ST][128 * LD];  // rows 0..63: Q, rows 64..127: W
    bf16 Ks[ST][64 * LD];
    bf16 dOs[ST][64 * LV];
    bf16 Ps[ST][64 * 72];
    float gam[ST][64], rq[ST][64], rk[ST][64];
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
        load_rows<64, D, NTH>(s.QW[st], LD, a.q + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, D, NTH>(s.QW[st] + 64 * LD, LD, a.W + hrow0 * D, D, L, tid);
        load_rows<64, D, NTH>(s.Ks[st], LD, a.k + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, VT, NTH>(s.dOs[st], LV, a.d_o + vrow0 * D + v0, size_t(a.HV) * D, L, tid);
        load_rows<64, 64, NTH>(s.Ps[st], 72, a.P + (size_t(bj) * a.NT + n) * (kC * kC), kC, 64, tid);
        load_chunk_scalars(s.gam[st], s.rq[st], s.rk[st], a, hrow0, tid);
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
        // P^T is upper triangular: rows r0 .. +16 need the k-steps from their 16-row block on
        warp_gemm<1, NV, 4, true, false>(a2, s.Ps[st] + r0, 72, s.dOs[st] + c0, LV, lane, r0 / 16, 4);
#pragma unroll
        for (int e = 0; e < 4; e += 2) {  // the accumulator's column pairs: 8- and 4-byte accesses
            const int t = r0 + frag_row(0, e, lane);
            // with k_t's 1 / norm; computed for every row, then selected (no branch in the warp)
            const float dec_t = expf(glast - gm[t]) * s.rk[st][t], dec = t < L ? dec_t : 0.f;
#pragma unroll
            for (int nt = 0; nt < NV; ++nt) {
                const int c = c0 + frag_col(nt, e, lane);
                const float d0 = dec * a1[0][nt][e] + a.scale * a2[0][nt][e];
                const float d1 = dec * a1[0][nt][e + 1] + a.scale * a2[0][nt][e + 1];
                if (t < L)
                    *reinterpret_cast<__nv_bfloat162*>(&a.ddelta[(size_t(bj) * Tp + t0 + t) * D + v0 + c]) =
                        __floats2bfloat162_rn(d0, d1);
                *reinterpret_cast<__nv_bfloat162*>(&s.AD[(64 + t) * LV + c]) =
                    __floats2bfloat162_rn(-d0, -d1);
            }
        }
        // scale diag(Gamma rq) dO: eight columns (16 bytes) at a time, the row factor once per piece
        for (int idx = tid; idx < 64 * VT / 8; idx += NTH) {
            const int t = idx / (VT / 8), c = (idx % (VT / 8)) * 8;
            const float f = a.scale * expf(gm[t]) * s.rq[st][t];
            uint4 u = *reinterpret_cast<const uint4*>(&s.dOs[st][t * LV + c]);
            raw_t<2>* w = reinterpret_cast<raw_t<2>*>(&u);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                w[e] = raw_pack<2>({raw_get<2>(w[e], 0) * f, raw_get<2>(w[e], 1) * f});
            *reinterpret_cast<uint4*>(&s.AD[t * LV + c]) = u;
        }
        __syncthreads();
        // dM0 = Gamma_L dM + [scale Gamma dO; -d delta]^T [Q; W]
        const float gl = expf(glast);
        GM::each(dM, warp, lane, [&](int, int, float& x) { x *= gl; });
        GM::run(dM, s.AD, LV, s.QW[st], LD, warp, lane);
        GM::each_pair(dM, warp, lane, [&](int r, int c, float& x0, float& x1) {
            *reinterpret_cast<__nv_bfloat162*>(&s.dMb[r * LD + c]) = __floats2bfloat162_rn(x0, x1);
        });
        if (ST == 1 && n > 0) {
            __syncthreads();
            issue(n - 1, 0);
        }
    }
    if (a.dh0)
        GM::each(dM, warp, lane,
                 [&](int r, int c, float& x) { a.dh0[(size_t(bj) * D + v0 + r) * D + c] = x; });
}

// ---- backward: per-chunk gradients ---------------------------------------------------------------

struct BChunkArgs {
    int B, T, H, HV, NT;
    float scale;
    bool l2norm;
    const bf16 *q, *k, *v, *d_o;  // q, k raw: normalised in shared memory with rq, rk
    const float *beta, *gam, *rq, *rk, *Tm;
    const bf16 *states, *dstates, *delta, *ddelta;
    float *dqv, *dkv;
    bf16* dv;
    float *dg, *dbeta;
    // HV == H: dq, dk (B, T, H, D) bf16 written here (through the L2-norm backward when l2norm), instead
    // of dqv / dkv and the finishing pass
    bf16 *dq_out, *dk_out;
};

template <int D>
struct BChunkSmem {
    static constexpr int LD = D + 8;
    static constexpr int LF = 68;  // row stride of the fp32 64 x 64 matrices: 16-byte rows for float4 reads
    static constexpr int BIG1 = 2 * D * LD;  // M0, dM (bf16)
    // dW (bf16, then the second half of tL in fp32: at d 128 the same bytes) + T, the second half of dA,
    // dT (then dA), tL (fp32), in bf16 units
    static constexpr int DW = 64 * LD > 64 * LF * 2 ? 64 * LD : 64 * LF * 2;
    static constexpr int BIG2 = DW + 4 * 64 * LF * 2;
    static constexpr int BIG = BIG1 > BIG2 ? BIG1 : BIG2;
    bf16 Qs[64 * LD], Ks[64 * LD], Vs[64 * LD], dOs[64 * LD], Dls[64 * LD], dDs[64 * LD];
    bf16 big[BIG];
    bf16 GPs[64 * 72];
    bf16 LGs[64 * 72];  // T (bf16) first, then Gb
    float KKf[64 * LF];
    alignas(16) float gam[64];  // 16-byte reads in the strictly-lower pass
    float beta[64], dgam[64], dbet[64], tmp[64], tmpX[64], tmpY[64], dotq[64], dotk[64];
    float rqs[64], rks[64];  // 1 / ||q_t||, 1 / ||k_t|| (1 without the norm)
    float glast;
};

static_assert(sizeof(BChunkSmem<128>) <= 227 * 1024,
              "gdn_bwd_chunk_kernel: shared memory over the sm_90 limit");

// The per-chunk backward's split of its two triangular tf32 products over 16 warps (gdn_triangle_parts.h),
// in constant memory: a table indexed by the warp in registers would sit in local memory.
__constant__ TriangleParts cTrianglePartsTL = kTrianglePartsTL;
__constant__ TriangleParts cTrianglePartsDA = kTrianglePartsDA;

template <int D, int NW>
__global__ void __launch_bounds__(NW * 32) gdn_bwd_chunk_kernel(BChunkArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    auto& s = *reinterpret_cast<BChunkSmem<D>*>(smem_raw);
    constexpr int LD = BChunkSmem<D>::LD, LF = BChunkSmem<D>::LF, NTH = NW * 32;
    static_assert(NW == 8 || NW == 16, "gdn_bwd_chunk_kernel: 8 or 16 warps");
    constexpr int WC = NW / 4;  // warp columns of every block product (4 warp rows of 16)
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t Tp = size_t(a.NT) * kC;
    bf16* M0s = s.big;
    bf16* dMs = s.big + D * LD;
    // Items are (chunk, sequence x value head) pairs, chunks fastest. A block takes items blockIdx.x,
    // + gridDim.x, ...: with as many blocks as fit the GPU at once (one an SM), each block copies the next
    // item's operands into their buffers as soon as the current item has stopped reading them, so a chunk's
    // copies overlap the previous chunk's products:
    //   dO, delta, d delta, V, Q   after the dY product (none is read past it),
    //   dM and K                   before the epilogue (the dM slot and K are free by then),
    //   M0                         at the item's start (its slot holds the staged q, k rows until the end),
    // and the item starts with the products on dM, so only M0's 32 KB copy is in flight when it begins.
    // With one item a block (the grid as large as the items) the same code copies everything at the start.
    // Call BJ, B8 T4096 d 128, two alternating runs: forward+backward 2.530 / 2.535 -> 2.500 / 2.502 ms
    // against 33fa9a8, one block a chunk (the gain is small: the copies in flight now share the
    // memory-instruction queue with the phases they run under).
    const int items = a.NT * a.B * a.HV;
    struct Item {
        int n, bj, b, j, h, t0, L;
        size_t qrow0, vrow0, hrow0, chunk;
    };
    auto item_at = [&](int it) {
        Item p;
        p.n = it % a.NT, p.bj = it / a.NT, p.b = p.bj / a.HV, p.j = p.bj % a.HV, p.h = p.j / (a.HV / a.H);
        p.t0 = p.n * kC, p.L = min(kC, a.T - p.t0);
        p.qrow0 = (size_t(p.b) * a.T + p.t0) * a.H + p.h;
        p.vrow0 = (size_t(p.b) * a.T + p.t0) * a.HV + p.j;
        p.hrow0 = size_t(p.bj) * Tp + p.t0;
        p.chunk = size_t(p.bj) * a.NT + p.n;
        return p;
    };
    auto copy_early = [&](const Item& p) {  // dO, delta, d delta, V, Q
        load_rows<64, D, NTH>(s.dOs, LD, a.d_o + p.vrow0 * D, size_t(a.HV) * D, p.L, tid);
        load_rows<64, D, NTH>(s.Dls, LD, a.delta + p.hrow0 * D, D, p.L, tid);
        load_rows<64, D, NTH>(s.dDs, LD, a.ddelta + p.hrow0 * D, D, p.L, tid);
        load_rows<64, D, NTH>(s.Vs, LD, a.v + p.vrow0 * D, size_t(a.HV) * D, p.L, tid);
        load_rows<64, D, NTH>(s.Qs, LD, a.q + p.qrow0 * D, size_t(a.H) * D, p.L, tid);
    };
    auto copy_late = [&](const Item& p) {  // dM, K
        load_rows<D, D, NTH>(dMs, LD, a.dstates + p.chunk * D * D, D, D, tid);
        load_rows<64, D, NTH>(s.Ks, LD, a.k + p.qrow0 * D, size_t(a.H) * D, p.L, tid);
    };
    // copy groups in flight at an item's start, oldest first: [early], [late], then [M0] issued there
    if (int(blockIdx.x) < items) {
        const Item p = item_at(blockIdx.x);
        copy_early(p);
        cp_async_commit();
        copy_late(p);
        cp_async_commit();
    }
    for (int item = blockIdx.x; item < items; item += gridDim.x) {
        const Item cur = item_at(item);
        const bool has_next = item + int(gridDim.x) < items;
        const Item next = item_at(has_next ? item + int(gridDim.x) : item);
        const int L = cur.L;
        const size_t qrow0 = cur.qrow0, vrow0 = cur.vrow0, hrow0 = cur.hrow0, chunk = cur.chunk;
        load_rows<D, D, NTH>(M0s, LD, a.states + chunk * D * D, D, D, tid);
        cp_async_commit();
        // this thread's 16 entries of T (fp32), fetched now and stored to shared memory in phase 2, so the
        // loads overlap phase 1
        constexpr int TPT = 64 * 64 / NTH;
        float treg[TPT];
        {
            const float* Tg = a.Tm + chunk * (kC * kC);
            // only the prep's pieces on or below the diagonal were written: the rest is zero, not read
#pragma unroll
            for (int k = 0; k < TPT; ++k) {
                const int i = tid + NTH * k;
                treg[k] = (i & 63) <= (i >> 6) ? Tg[i] : 0.f;
            }
        }
        if (tid < 64) {
            s.gam[tid] = a.gam[hrow0 + tid];
            s.beta[tid] = tid < L ? a.beta[vrow0 + size_t(tid) * a.HV] : 0.f;
            s.dgam[tid] = 0.f, s.dbet[tid] = 0.f, s.tmp[tid] = 0.f, s.tmpX[tid] = 0.f, s.tmpY[tid] = 0.f;
            s.dotq[tid] = 0.f, s.dotk[tid] = 0.f;
            s.rqs[tid] = a.rq[hrow0 + tid], s.rks[tid] = a.rk[hrow0 + tid];
        }
        // x <- bf16(x / ||x||) for the rows of Q or K in shared memory: the forward's normalised rows
        auto normalise = [&](bf16* X, const float* r) {
            if (!a.l2norm) return;
#pragma unroll
            for (int it = 0; it < 64 * D / 8 / NTH; ++it) {  // eight elements (16 bytes) at a time
                const int idx = tid + it * NTH, row = idx / (D / 8), c = (idx % (D / 8)) * 8;
                uint4* p = reinterpret_cast<uint4*>(&X[row * LD + c]);
                uint4 u = *p;
                raw_t<2>* w = reinterpret_cast<raw_t<2>*>(&u);
                const float k = r[row];
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    w[e] = raw_pack<2>({raw_get<2>(w[e], 0) * k, raw_get<2>(w[e], 1) * k});
                *p = u;
            }
        };
        if (tid == 0) s.glast = 0.f;
        cp_async_wait<1>();  // all but M0
        __syncthreads();
        const float gL = s.gam[L - 1];
        auto Gam = [&](int r) { return expf(s.gam[r]); };
        auto dec = [&](int r) { return r < L ? expf(gL - s.gam[r]) : 0.f; };
        const float scale = a.scale;

        // ---- phase 1: products with the states ----
        using GD = BlockGemm<64, D, D, 4, WC, false, false>;
        // dq and dk of the chunk accumulate in registers (one tiling for every 64 x D product below) and
        // are written once at the end
        float dqA[GD::MT][GD::NT][4], dkA[GD::MT][GD::NT][4];
        zero(dqA);
        zero(dkA);
        // dk (leaving state) = diag(dec) delta dM;  d gamma_r -= k_r . that, glast += the same (first: M0 may
        // still be in flight)
        GD::run(dkA, s.Dls, LD, dMs, LD, warp, lane);
        normalise(s.Ks, s.rks);
        normalise(s.Qs, s.rqs);
        __syncthreads();
        // per-row factors from registers (BlockGemm::row_values), here and in the epilogues below
        float fr[1][2];
        GD::row_values(warp, lane, dec, fr);
        each_rowsum<GD>(dkA, warp, lane, s.tmp, [&](int r, int c, float& v) {
            v *= fr[0][r - GD::row0(warp) >= 8];
            return __bfloat162float(s.Ks[r * LD + c]) * v;
        });
        cp_async_wait<0>();  // M0
        __syncthreads();
        // dq (inter-chunk) = scale Gamma dO M0;  d gamma_r += q_r . dq_r. At d 128 with it -dW = d delta M0,
        // M0's fragments loaded once for both products (at d 64 ptxas then spills: -dW comes after dq there).
        float accW[GD::MT][GD::NT][4];
        zero(accW);
        if constexpr (D == 128)
            GD::run_shared_b(dqA, s.dOs, accW, s.dDs, LD, M0s, LD, warp, lane);
        else
            GD::run(dqA, s.dOs, LD, M0s, LD, warp, lane);
        GD::row_values(
            warp, lane, [&](int r) { return scale * Gam(r); }, fr);
        each_rowsum<GD>(dqA, warp, lane, s.dgam, [&](int r, int c, float& v) {
            v *= fr[0][r - GD::row0(warp) >= 8];
            return __bfloat162float(s.Qs[r * LD + c]) * v;
        });
        if constexpr (D != 128) GD::run(accW, s.dDs, LD, M0s, LD, warp, lane);  // -dW = d delta M0
        {  // <M0, dM>_F, eight elements (16 bytes) of each a step
            float f = 0.f;
#pragma unroll
            for (int it = 0; it < D * D / 8 / NTH; ++it) {
                const int idx = tid + it * NTH, r = idx / (D / 8), c = (idx % (D / 8)) * 8;
                const uint4 xu = *reinterpret_cast<const uint4*>(&M0s[r * LD + c]);
                const uint4 yu = *reinterpret_cast<const uint4*>(&dMs[r * LD + c]);
                const uint32_t xw[4] = {xu.x, xu.y, xu.z, xu.w}, yw[4] = {yu.x, yu.y, yu.z, yu.w};
#pragma unroll
                for (int e = 0; e < 4; ++e) {  // a bf16 is the top half of its fp32
                    f = fmaf(__uint_as_float(xw[e] << 16), __uint_as_float(yw[e] << 16), f);
                    f = fmaf(__uint_as_float(xw[e] & 0xffff0000u), __uint_as_float(yw[e] & 0xffff0000u), f);
                }
            }
            f = warp_sum(f);
            if (lane == 0) atomicAdd(&s.glast, f);
        }
        __syncthreads();

        // ---- phase 2 ----
        bf16* dWs = s.big;
        float* Tf = reinterpret_cast<float*>(s.big + BChunkSmem<D>::DW);  // T, row-major
        float* dA2 = Tf + 64 * LF;                                        // the second half of dA (below)
        float* dTf = dA2 + 64 * LF;                                       // dT, later dA (both row-major)
        float* tLf = dTf + 64 * LF;
        GD::each_pair(accW, warp, lane, [&](int r, int c, float& v0, float& v1) {
            *reinterpret_cast<__nv_bfloat162*>(&dWs[r * LD + c]) = __floats2bfloat162_rn(-v0, -v1);
        });
        {
#pragma unroll
            for (int k = 0; k < TPT; ++k) {
                const int idx = tid + NTH * k, r = idx >> 6, c = idx & 63;
                const float t = treg[k];
                Tf[r * LF + c] = t;
                s.LGs[r * 72 + c] = __float2bfloat16(t);
            }
        }
        if (tid < 64) atomicAdd(&s.dgam[tid], -s.tmp[tid]);
        if (warp == 0) {  // glast = sum of tmp + exp(gL) <M0, dM>
            const float sum = warp_sum(s.tmp[lane] + s.tmp[lane + 32]);
            if (lane == 0) s.glast = sum + expf(gL) * s.glast;
        }
        using G64 = BlockGemm<64, 64, D, 4, WC, false, true>;
        // dP, Q K^T, K K^T and dT are read only on and below their diagonals (dP, Q K^T through the causal
        // mask E, K K^T and dT in the strictly-lower pass and the triangular tL), so a warp whose tile lies
        // wholly above the diagonal skips the products and stores zeros: 6 of 16 tiles, less shared-memory
        // traffic
        const bool g64_upper = G64::col0(warp) >= G64::row0(warp) + 16;
        {  // intra-chunk scores: dP = scale dO delta^T; gamma terms of dP o P; G_P = dP o E (causal)
            float accP[G64::MT][G64::NT][4], accQ[G64::MT][G64::NT][4];
            zero(accP);
            zero(accQ);
            if (!g64_upper) {
                G64::run(accP, s.dOs, LD, s.Dls, LD, warp, lane);
                G64::run(accQ, s.Qs, LD, s.Ks, LD, warp, lane);
            }
            const int r0 = G64::row0(warp), c0 = G64::col0(warp);
            float rs0 = 0.f, rs1 = 0.f, cs[G64::NT][2], gr[1][2], gc[G64::NT][2];
            G64::row_values(
                warp, lane, [&](int r) { return s.gam[r]; }, gr);
            G64::col_values(
                warp, lane, [&](int c) { return s.gam[c]; }, gc);
#pragma unroll
            for (int nt = 0; nt < G64::NT; ++nt) {
                cs[nt][0] = cs[nt][1] = 0.f;
                float gpe[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = r0 + frag_row(0, e, lane), c = c0 + frag_col(nt, e, lane);
                    // computed, then selected: above the diagonal the exponent may be large
                    const float Ex = expf(gr[0][e >> 1] - gc[nt][e & 1]), E = c <= r ? Ex : 0.f;
                    const float gp = scale * accP[0][nt][e];
                    const float hh = gp * accQ[0][nt][e] * E;
                    if (e < 2)
                        rs0 += hh;
                    else
                        rs1 += hh;
                    cs[nt][e & 1] += hh;
                    gpe[e] = gp * E;
                }
#pragma unroll
                for (int e = 0; e < 4; e += 2)  // columns c, c + 1 of row r as one bf16 pair
                    *reinterpret_cast<__nv_bfloat162*>(
                        &s.GPs[(r0 + frag_row(0, e, lane)) * 72 + c0 + frag_col(nt, e, lane)]) =
                        __floats2bfloat162_rn(gpe[e], gpe[e + 1]);
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
            if (!g64_upper) G64::run(acc, s.Ks, LD, s.Ks, LD, warp, lane);
            G64::each_pair(acc, warp, lane, [&](int r, int c, float& v0, float& v1) {
                *reinterpret_cast<float2*>(&s.KKf[r * LF + c]) = make_float2(v0, v1);
            });
        }
        __syncthreads();

        {  // dT = dW X^T + d delta Y^T = (dW K^T) diag(beta Gamma) + (d delta V^T) diag(beta)
            float acc1[G64::MT][G64::NT][4], acc2[G64::MT][G64::NT][4];
            zero(acc1);
            zero(acc2);
            if (!g64_upper) {
                G64::run(acc1, dWs, LD, s.Ks, LD, warp, lane);
                G64::run(acc2, s.dDs, LD, s.Vs, LD, warp, lane);
            }
            const int r0 = G64::row0(warp), c0 = G64::col0(warp);
            float bc[G64::NT][2], bgc[G64::NT][2];  // beta_c, beta_c Gamma_c of this thread's columns
            G64::col_values(
                warp, lane, [&](int c) { return s.beta[c]; }, bc);
            G64::col_values(
                warp, lane, [&](int c) { return s.beta[c] * Gam(c); }, bgc);
#pragma unroll
            for (int nt = 0; nt < G64::NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int r = r0 + frag_row(0, e, lane), c = c0 + frag_col(nt, e, lane);
                    *reinterpret_cast<float2*>(&dTf[r * LF + c]) =
                        make_float2(bgc[nt][0] * acc1[0][nt][e] + bc[nt][0] * acc2[0][nt][e],
                                    bgc[nt][1] * acc1[0][nt][e + 1] + bc[nt][1] * acc2[0][nt][e + 1]);
                }
        }
        using GK = BlockGemm<64, D, 64, 4, WC, false, false>;
        using GKT = BlockGemm<64, D, 64, 4, WC, true, false>;
        static_assert(GK::MT == GD::MT && GK::NT == GD::NT && GKT::NT == GD::NT, "one output tiling");
        // The 64 x 64 left operands below are triangular (G_P and Gb lower, T^T upper), so each warp runs
        // only the k-steps of 16 where its 16 rows of the operand are not zero: rows of block I, k-blocks 0
        // .. I (lower) or I .. 3 (upper). A lower and an upper product back to back take 5 k-steps on every
        // warp, not 8.
        const int rb = GK::row0(warp) / 16;
        static_assert(GK::MT == 1 && GKT::MT == 1, "one 16-row block a warp");
        GK::run_steps(dqA, s.GPs, 72, s.Ks, LD, warp, lane, 0, rb + 1);  // dq += G_P K
        GKT::run_steps(dkA, s.GPs, 72, s.Qs, LD, warp, lane, rb, 4);     // dk += G_P^T Q
        {  // dX = T^T dW: dk += beta Gamma dX; row sums dX . k for dbeta / d gamma
            float acc[GKT::MT][GKT::NT][4];
            zero(acc);
            GKT::run_steps(acc, s.LGs, 72, dWs, LD, warp, lane, rb, 4);
            each_rowsum<GKT>(acc, warp, lane, s.tmpX,
                             [&](int r, int c, float& v) { return v * __bfloat162float(s.Ks[r * LD + c]); });
            float bg[1][2];
            GKT::row_values(
                warp, lane, [&](int r) { return s.beta[r] * Gam(r); }, bg);
#pragma unroll
            for (int nt = 0; nt < GKT::NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) dkA[0][nt][e] += bg[0][e >> 1] * acc[0][nt][e];
        }
        {  // dY = T^T d delta: dv = beta dY; row sums dY . v for dbeta
            float acc[GKT::MT][GKT::NT][4];
            zero(acc);
            GKT::run_steps(acc, s.LGs, 72, s.dDs, LD, warp, lane, rb, 4);
            // dv as bf16 pairs; the row sums as each_rowsum forms them
            float br[1][2], ys[2] = {0.f, 0.f};
            GKT::row_values(
                warp, lane, [&](int r) { return s.beta[r]; }, br);
            const int r0 = GKT::row0(warp), c0 = GKT::col0(warp);
            constexpr bool kWhole = GKT::NT % 4 == 0;  // dv in whole 32-byte sectors (tile_store.cuh)
            [[maybe_unused]] uint32_t wv[2][GKT::NT];
#pragma unroll
            for (int nt = 0; nt < GKT::NT; ++nt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = r0 + (lane >> 2) + 8 * h, c = c0 + frag_col(nt, 0, lane);
                    const float y0 = acc[0][nt][2 * h], y1 = acc[0][nt][2 * h + 1];
                    if constexpr (kWhole)
                        wv[h][nt] = pack_bf16(br[0][h] * y0, br[0][h] * y1);
                    else if (r < L)
                        *reinterpret_cast<__nv_bfloat162*>(&a.dv[(vrow0 + size_t(r) * a.HV) * D + c]) =
                            __floats2bfloat162_rn(br[0][h] * y0, br[0][h] * y1);
                    const float2 vv =
                        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&s.Vs[r * LD + c]));
                    ys[h] += y0 * vv.x + y1 * vv.y;
                }
            if constexpr (kWhole)
                store_tile_bf16<GKT::NT>(wv, a.dv + (vrow0 + size_t(r0) * a.HV) * D + c0, size_t(a.HV) * D,
                                         L - r0, lane);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                ys[h] += __shfl_xor_sync(0xffffffffu, ys[h], 1);
                ys[h] += __shfl_xor_sync(0xffffffffu, ys[h], 2);
            }
            if ((lane & 3) == 0) {
                atomicAdd(&s.tmpY[r0 + (lane >> 2)], ys[0]);
                atomicAdd(&s.tmpY[r0 + 8 + (lane >> 2)], ys[1]);
            }
        }
        __syncthreads();
        // dO, delta, d delta, V and Q are read no more: the next item's copies into them start here
        if (has_next) copy_early(next);
        cp_async_commit();
        if (tid < 64) {
            const float px = s.tmpX[tid], g = Gam(tid);
            atomicAdd(&s.dbet[tid], g * px + s.tmpY[tid]);
            atomicAdd(&s.dgam[tid], s.beta[tid] * g * px);
        }
        // tL = dT T^T, then dA = -T^T tL, on tensor cores: out = sign A B (A, B fp32 in shared memory, row
        // stride LF) as three tf32 products of the operands' big and small parts (mma_tf32_3x: about fp32's
        // accuracy, relative error 8e-8 against 1.5-1.8e-7 for sequential fp32 FMAs). In call AC the
        // FMA loops these replace held 14% of the kernel's stall samples and 23% of its executed
        // instructions. tf32_tile: the 16 x (8 NTW) tile (m0, n0) of out over k = k0 .. k1 - 1, B taken as Y
        // plus Y2 when Y2 is given. Two layouts: RM (row-major reads) A = X and B = Y^T (A[m][k] = X[m][k],
        // B[k][n] = Y[n][k]), else A = X^T and B = Y. The row-major reads (lanes g = 0..7 rows apart, t =
        // 0..3 columns) hit 32 different banks at LF = 68; the others (t rows apart) two lanes a bank. So tL
        // reads dT and T as stored, with no transposed copy of T (its scalar stores, 68 floats apart, met 8
        // lanes a bank).
        auto tf32_tile = [&](auto ntw, auto rm, const float* X, const float* Y, const float* Y2, float* out,
                             float sign, int m0, int n0, int k0, int k1) {
            constexpr int NTW = decltype(ntw)::value;  // n-tiles of 8
            constexpr bool RM = decltype(rm)::value;
            const int g = lane >> 2, t = lane & 3;
            float acc[NTW][4];
#pragma unroll
            for (int i = 0; i < NTW; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][e] = 0.f;
            auto x = [&](int k, int m) { return RM ? X[m * LF + k] : X[k * LF + m]; };  // A[m][k]
            auto y = [&](int k, int n) {                                                // B[k][n]
                const int i = RM ? n * LF + k : k * LF + n;
                return Y2 ? Y[i] + Y2[i] : Y[i];
            };
#pragma unroll 1
            for (int kk = k0; kk < k1; kk += 8) {
                uint32_t ab[4], as[4];
                tf32_split(x(kk + t, m0 + g), ab[0], as[0]);
                tf32_split(x(kk + t, m0 + g + 8), ab[1], as[1]);
                tf32_split(x(kk + t + 4, m0 + g), ab[2], as[2]);
                tf32_split(x(kk + t + 4, m0 + g + 8), ab[3], as[3]);
#pragma unroll
                for (int i = 0; i < NTW; ++i) {
                    const int nc = n0 + 8 * i + g;
                    uint32_t b0b, b0s, b1b, b1s;
                    tf32_split(y(kk + t, nc), b0b, b0s);
                    tf32_split(y(kk + t + 4, nc), b1b, b1s);
                    mma_tf32_3x(acc[i], ab, as, b0b, b0s, b1b, b1s);
                }
            }
#pragma unroll
            for (int i = 0; i < NTW; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = m0 + g + 8 * h, c = n0 + 8 * i + 2 * t;
                    *reinterpret_cast<float2*>(&out[r * LF + c]) =
                        make_float2(sign * acc[i][2 * h], sign * acc[i][2 * h + 1]);
                }
        };
        // With 16 warps, only the tiles on or below the diagonal, over the k-blocks where T is not zero, the
        // heaviest split in k-halves over the spare warps (gdn_triangle_parts.h). A split tile's second half
        // goes to a second buffer (every formed tile writes one: zeros when not split), added where it is
        // read: tL's into the dW buffer (free since dX), dA's into dA2.
        float* tL2 = reinterpret_cast<float*>(dWs);  // 64 x LF fp32 (BChunkSmem::DW sizes the slot for it)
        using tL_layout = std::true_type;            // tL = dT T^T: A = dT, B = T^T, as stored (row-major)
        using dA_layout = std::false_type;           // dA = -T^T tL: A = T^T, B = tL + tL2
        if constexpr (NW == 16) {
            // one warp's part of out = sign A B (the layouts above); zeros for the second buffer's tile when
            // the tile is not split
            auto run_part = [&](auto layout, const TrianglePart& p, const float* X, const float* Y,
                                const float* Y2, float* out, float* out2, float sign) {
                if (p.I < 0) return;
                const int m0 = 16 * p.I, n0 = 16 * p.J;
                tf32_tile(std::integral_constant<int, 2>{}, layout, X, Y, Y2, p.part == 1 ? out2 : out, sign,
                          m0, n0, 16 * p.kb0, 16 * p.kb1);
                if (p.part == 0) {
                    const int r = m0 + (lane >> 1),
                              c = n0 + 8 * (lane & 1);  // 16 rows x 16 columns, 8 a lane
                    *reinterpret_cast<float4*>(&out2[r * LF + c]) = make_float4(0.f, 0.f, 0.f, 0.f);
                    *reinterpret_cast<float4*>(&out2[r * LF + c + 4]) = make_float4(0.f, 0.f, 0.f, 0.f);
                }
            };
            run_part(tL_layout{}, cTrianglePartsTL.warp[warp], dTf, Tf, nullptr, tLf, tL2, 1.f);
            __syncthreads();
            run_part(dA_layout{}, cTrianglePartsDA.warp[warp], Tf, tLf, tL2, dTf, dA2,
                     -1.f);  // dA, row-major, into dT's buffer (+ dA2)
            __syncthreads();
        } else {  // 8 warps (a diagnostic): both products whole, each warp a 16 x 32 tile
            const int m0 = 16 * (warp % 4), n0 = (warp / 4) * 32;
            tf32_tile(std::integral_constant<int, 4>{}, tL_layout{}, dTf, Tf, nullptr, tLf, 1.f, m0, n0, 0,
                      64);
            __syncthreads();
            tf32_tile(std::integral_constant<int, 4>{}, dA_layout{}, Tf, tLf, nullptr, dTf, -1.f, m0, n0, 0,
                      64);
            {  // the second buffer, read by the strictly-lower pass, holds zeros here
                const int r = m0 + (lane >> 1), c = n0 + 16 * (lane & 1);
#pragma unroll
                for (int u = 0; u < 16; u += 4)
                    *reinterpret_cast<float4*>(&dA2[r * LF + c + u]) = make_float4(0.f, 0.f, 0.f, 0.f);
            }
            __syncthreads();
        }
        // strictly lower part: gamma terms of dA o A, dbeta, Gb = diag(beta) (dA o E) (as bf16, into LGs)
        {
            constexpr int PPR = NTH / 64,
                          CPP = 64 / PPR;  // threads per row, columns each (lanes next to each other)
            const int i = tid / PPR, cb = (tid % PPR) * CPP;
            float rs = 0.f, db = 0.f;
            const float bi = s.beta[i], gi = s.gam[i];
            // four columns at a time (16-byte reads and writes); everything computed, then selected: at and
            // above the diagonal the exponent may be large and the entries are zero. Gb goes straight to bf16
            // (LGs, free since dX / dY), the operand of the last products.
#pragma unroll
            for (int c4 = cb; c4 < cb + CPP; c4 += 4) {
                const float4 g4 = *reinterpret_cast<const float4*>(&s.gam[c4]);
                const float4 k4 = *reinterpret_cast<const float4*>(&s.KKf[i * LF + c4]);
                const float4 a4 = *reinterpret_cast<const float4*>(&dTf[i * LF + c4]);
                const float4 b4 = *reinterpret_cast<const float4*>(&dA2[i * LF + c4]);
                const float g[4] = {g4.x, g4.y, g4.z, g4.w}, kk[4] = {k4.x, k4.y, k4.z, k4.w};
                const float da[4] = {a4.x + b4.x, a4.y + b4.y, a4.z + b4.z, a4.w + b4.w};
                float hh[4], gb[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const bool low = c4 + u < i;
                    const float E = expf(gi - g[u]);
                    const float G = da[u] * E;
                    hh[u] = low ? da[u] * bi * kk[u] * E : 0.f;
                    gb[u] = low ? bi * G : 0.f;
                    rs += hh[u];
                    db += low ? G * kk[u] : 0.f;
                }
                // for the column sums below (this thread read its kk already)
                *reinterpret_cast<float4*>(&s.KKf[i * LF + c4]) = make_float4(hh[0], hh[1], hh[2], hh[3]);
                *reinterpret_cast<__nv_bfloat162*>(&s.LGs[i * 72 + c4]) = __floats2bfloat162_rn(gb[0], gb[1]);
                *reinterpret_cast<__nv_bfloat162*>(&s.LGs[i * 72 + c4 + 2]) =
                    __floats2bfloat162_rn(gb[2], gb[3]);
            }
#pragma unroll
            for (int o = 1; o < PPR; o <<= 1) {
                rs += __shfl_xor_sync(0xffffffffu, rs, o);
                db += __shfl_xor_sync(0xffffffffu, db, o);
            }
            if (tid % PPR == 0) {
                atomicAdd(&s.dgam[i], rs);
                atomicAdd(&s.dbet[i], db);
            }
        }
        __syncthreads();
        // column sums of dA o A: every thread, a part of a column each
        {
            constexpr int RPP = 64 / (NTH / 64);  // rows of a part
            const int c = tid & 63, part = tid >> 6;
            float cs = 0.f;
            for (int i = part * RPP; i < part * RPP + RPP; ++i) cs += s.KKf[i * LF + c];
            atomicAdd(&s.dgam[c], -cs);
        }
        __syncthreads();
        // d 128, dq / dk finished here through the L2 norm: the raw q, k rows are staged in the phase-2
        // buffers (free now) while the last products run, so the epilogue reads shared memory (at d 64 it
        // reads them from global memory, measured as fast)
        constexpr bool kStageRaw = D == 128;
        bf16* Xq = s.big;
        bf16* Xk = s.big + 64 * LD;
        if (kStageRaw && a.dq_out && a.l2norm) {
            load_rows<64, D, NTH>(Xq, LD, a.q + qrow0 * D, size_t(a.H) * D, L, tid);
            load_rows<64, D, NTH>(Xk, LD, a.k + qrow0 * D, size_t(a.H) * D, L, tid);
        }
        cp_async_commit();
        // dk += (Gb + Gb^T) K (Gb strictly lower, so bf16(Gb + Gb^T) = bf16(Gb) + bf16(Gb)^T: the same
        // numbers)
        GK::run_steps(dkA, s.LGs, 72, s.Ks, LD, warp, lane, 0, rb + 1);
        GKT::run_steps(dkA, s.LGs, 72, s.Ks, LD, warp, lane, rb, 4);
        // the staged rows (and the next item's early copies) landed; K and the dM slot (phase 2's scratch)
        // are read no more: the next item's dM and K copies start here and run under the epilogue
        cp_async_wait_all();
        __syncthreads();
        if (has_next) copy_late(next);
        cp_async_commit();
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
            // 1 / ||x|| of row r of q (isq) or k
            auto rsv = [&](bool isq, int r) { return isq ? s.rqs[r] : s.rks[r]; };
            // y = x / ||x|| in fp32 from the raw row, as gdn_bwd_finish_kernel; dx = (d - (d . y) y) / ||x||
            auto yrow = [&](bool isq, int r, int c, float(&y)[2]) {
                const bf16* xp = kStageRaw ? (isq ? Xq : Xk) + r * LD + c
                                           : (isq ? a.q : a.k) + (qrow0 + size_t(r) * a.H) * D + c;
                const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(xp));
                const float k = rsv(isq, r);
                y[0] = f.x * k, y[1] = f.y * k;
            };
            if (a.l2norm) {
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
            // dq, dk of the pair (nt, e) in row r (valid), through the norm's backward when there is one
            auto finish = [&](int r, int c, int nt, int e, float(&q2)[2], float(&k2)[2]) {
                q2[0] = dqA[0][nt][e], q2[1] = dqA[0][nt][e + 1], k2[0] = dkA[0][nt][e],
                k2[1] = dkA[0][nt][e + 1];
                if (a.l2norm) {
                    float y[2];
                    yrow(true, r, c, y);
                    const float rq = rsv(true, r), dq = s.dotq[r];
                    q2[0] = rq * (q2[0] - dq * y[0]), q2[1] = rq * (q2[1] - dq * y[1]);
                    yrow(false, r, c, y);
                    const float rk = rsv(false, r), dk = s.dotk[r];
                    k2[0] = rk * (k2[0] - dk * y[0]), k2[1] = rk * (k2[1] - dk * y[1]);
                }
            };
            if constexpr (GD::NT % 4 == 0) {  // in whole 32-byte sectors (tile_store.cuh)
                uint32_t wq[2][GD::NT], wk[2][GD::NT];
#pragma unroll
                for (int nt = 0; nt < GD::NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; e += 2) {
                        const int r = r0 + frag_row(0, e, lane), c = c0 + frag_col(nt, e, lane);
                        float q2[2] = {0.f, 0.f}, k2[2] = {0.f, 0.f};
                        if (r < L) finish(r, c, nt, e, q2, k2);
                        wq[e >> 1][nt] = pack_bf16(q2[0], q2[1]);
                        wk[e >> 1][nt] = pack_bf16(k2[0], k2[1]);
                    }
                const size_t tile = (qrow0 + size_t(r0) * a.H) * D + c0, ld = size_t(a.H) * D;
                store_tile_bf16<GD::NT>(wq, a.dq_out + tile, ld, L - r0, lane);
                store_tile_bf16<GD::NT>(wk, a.dk_out + tile, ld, L - r0, lane);
            } else {
                each_pair([&](int r, int c, int nt, int e) {
                    const size_t row = qrow0 + size_t(r) * a.H;
                    float q2[2], k2[2];
                    finish(r, c, nt, e, q2, k2);
                    *reinterpret_cast<__nv_bfloat162*>(a.dq_out + row * D + c) =
                        __floats2bfloat162_rn(q2[0], q2[1]);
                    *reinterpret_cast<__nv_bfloat162*>(a.dk_out + row * D + c) =
                        __floats2bfloat162_rn(k2[0], k2[1]);
                });
            }
        } else {
            each_pair([&](int r, int c, int nt, int e) {
                *reinterpret_cast<float2*>(a.dqv + (hrow0 + r) * D + c) =
                    make_float2(dqA[0][nt][e], dqA[0][nt][e + 1]);
                *reinterpret_cast<float2*>(a.dkv + (hrow0 + r) * D + c) =
                    make_float2(dkA[0][nt][e], dkA[0][nt][e + 1]);
            });
        }
        // dg = the suffix sums of d gamma (glast joins row L - 1), by the last warp: lane l owns rows 2l, 2l
        // + 1 (a single thread's 64 dependent steps held the SM at the block's end, no other block beside it)
        if (warp == NW - 1) {
            const int r = 2 * lane;
            const float x0 = r < L ? s.dgam[r] + (r == L - 1 ? s.glast : 0.f) : 0.f;
            const float x1 = r + 1 < L ? s.dgam[r + 1] + (r + 1 == L - 1 ? s.glast : 0.f) : 0.f;
            float suf = x0 + x1;  // inclusive suffix over the lanes: rows 2l .. 63
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float y = __shfl_down_sync(0xffffffffu, suf, o);
                if (lane + o < 32) suf += y;
            }
            if (r < L) {
                a.dg[vrow0 + size_t(r) * a.HV] = suf;
                a.dbeta[vrow0 + size_t(r) * a.HV] = s.dbet[r];
            }
            if (r + 1 < L) {
                a.dg[vrow0 + size_t(r + 1) * a.HV] = suf - x0;
                a.dbeta[vrow0 + size_t(r + 1) * a.HV] = s.dbet[r + 1];
            }
        }
        // the next item rewrites the small arrays and M0's slot (the staged rows)
        __syncthreads();
    }  // items
}

// ---- backward: sum over the value heads of a key head, then through the L2 norm ----------------------

template <int D>
__global__ void __launch_bounds__(256)
    gdn_bwd_finish_kernel(int B, int T, int H, int HV, int NT, const float* dxv, const bf16* x,
                          const float* rstd, bf16* dx) {
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
        const float rs = rstd[(size_t(b) * HV + h * r) * Tp + t];  // head-major rows, any of the value heads
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
        *reinterpret_cast<__nv_bfloat162*>(dx + row * D + lane * PER + i) =
            __floats2bfloat162_rn(d[i], d[i + 1]);
}

// ---- decode ----------------------------------------------------------------------------------------

// One block = 4 warps x ROWS state rows of one (sequence, value head); each lane holds D/32 columns of
// each of its warp's rows, so the state is read and written exactly once with 8- or 16-byte accesses.
template <int D, int ROWS>
__global__ void __launch_bounds__(128)
    gdn_decode_kernel(int H, int HV, const bf16* __restrict__ q, const bf16* __restrict__ k,
                      const bf16* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                      const float* state_in, float* state_out, bf16* __restrict__ o, float scale,
                      int l2norm) {
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
        if constexpr (PER == 4)
            __stcs(reinterpret_cast<float4*>(dst), make_float4(m[r][0], m[r][1], m[r][2], m[r][3]));
        else
            __stcs(reinterpret_cast<float2*>(dst), make_float2(m[r][0], m[r][1]));
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

// A diagnostic choice from the environment: `name`'s value when it is set (one of `allowed`, else a
// clear error), otherwise `fallback`. Each caller reads it once.
int env_choice(const char* name, std::initializer_list<int> allowed, int fallback) {
    const char* env = std::getenv(name);
    if (!env || !*env) return fallback;
    std::string list;
    for (int v : allowed) {
        if (std::to_string(v) == env) return v;
        list += (list.empty() ? "" : ", ") + std::to_string(v);
    }
    throw Error(std::string(name) + " must be one of " + list + " (got '" + env + "')");
}

// One value head per key head: the per-chunk backward finishes dq, dk itself (no sum over value heads to
// wait for), unless HYDRA_GDN_DIRECT_DQK=0 asks for the per-value-head buffers and the finishing pass.
bool direct_dqk(const GdnShape& s) {
    static const bool allowed = env_choice("HYDRA_GDN_DIRECT_DQK", {0, 1}, 1) == 1;
    return allowed && s.HV == s.H;
}

// The scans run one block per (sequence, value head, state slice) for the whole sequence, in one of the
// shapes of gdn_scan_policy.h, chosen there by head dimension, pairs and SMs;
// gdn_set_scan_variant or HYDRA_GDN_SCAN (0-8) force one.
int g_scan_override = -2;  // -2: not read yet, -1: automatic

// What the scan and split-forward rules need to know of the GPU, read once.
struct DeviceLimits {
    int sms = 0, sm_smem = 0, reserved = 0;  // SMs; shared memory per SM and reserved per block (bytes)
    int sm_regs = 0;                         // registers per SM
};
const DeviceLimits& device_limits() {
    static const DeviceLimits lim = [] {
        DeviceLimits l;
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l.sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l.reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l.sm_regs, cudaDevAttrMaxRegistersPerMultiprocessor, dev));
        return l;
    }();
    return lim;
}

int scan_variant(const GdnShape& s) {
    static_assert(kGdnScanVariants == 9, "scan_variant: HYDRA_GDN_SCAN's list names every variant");
    if (g_scan_override == -2)
        g_scan_override = env_choice("HYDRA_GDN_SCAN", {0, 1, 2, 3, 4, 5, 6, 7, 8}, -1);
    // a forced variant taller than the state (128 rows at d 64) leaves the choice to the rule
    if (g_scan_override >= 0 && gdn_scan_fits(g_scan_override, s.D)) return g_scan_override;
    return gdn_scan_variant_for(s.D, size_t(s.B) * s.HV, device_limits().sms);
}

// A launch configuration with clusters of `cluster` blocks along x (the attribute lives beside the config,
// which points at it).
struct ClusterLaunch {
    cudaLaunchAttribute attr{};
    cudaLaunchConfig_t cfg{};
    ClusterLaunch(dim3 grid, unsigned threads, size_t smem, cudaStream_t st, int cluster) {
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = unsigned(cluster), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
        cfg.gridDim = grid;
        cfg.blockDim = dim3(threads);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = st;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
    }
    ClusterLaunch(const ClusterLaunch&) = delete;  // cfg points at this object's attr
    ClusterLaunch& operator=(const ClusterLaunch&) = delete;
};

// One scan kernel over (D / VT slices, B * HV) blocks of NW warps, in clusters of `cluster` slice blocks
// (1: no clusters), its shared-memory attribute set on the first launch of each instantiation (Args tells
// the forward from the reverse scan).
template <int D, int VT, int ST, int NW, class Args>
void launch_scan(void (*kern)(Args), size_t smem, const GdnShape& s, const Args& args, cudaStream_t st,
                 int cluster = 1, int threads = NW * 32) {
    static std::vector<void (*)(Args)> attributed;  // the kernels of this shape given the attribute already
    if (std::find(attributed.begin(), attributed.end(), kern) == attributed.end()) {
        set_smem(kern, smem);
        attributed.push_back(kern);
    }
    if (cluster == 1) {
        kern<<<dim3(D / VT, s.B * s.HV), threads, smem, st>>>(args);
        return;
    }
    const ClusterLaunch cl(dim3(D / VT, s.B * s.HV), unsigned(threads), smem, st, cluster);
    CUDA_CHECK(cudaLaunchKernelEx(&cl.cfg, kern, args));
}

// Whether the forward scan of variant (VT, ST, NW) has a tile-copy instantiation (MC, cluster_copy.cuh):
// the two-stage 8-warp 16- and 32-row slices (variants 4 and 5 of gdn_scan_policy.h), in the plain forward
// only. Call BO (H200, two alternating runs, from CUDA graphs, against cp.async copies): B2 T16384 d 128
// (variant 5, clusters of 2) 0.819 -> 0.778 ms, B1 T65536 (variant 4, clusters of 2) 2.242 -> 2.208; the
// 64-row slices (variant 3) lost at B4 T8192 (0.699 -> 0.716), tile copies without clusters lost everywhere
// (B1 2.435, B2 0.847), and the saving forward's instantiation spilled at 128 registers (B2 saving forward
// 0.885 -> 1.289 ms).
template <int D, int VT, int ST, int NW, bool SAVE>
constexpr bool scan_has_tile_copies() {
    return !SAVE && ST == 2 && NW == 8 && VT <= 32 && VT < D;
}

// Shared memory of the forward scan's launch: the tile-copy layout and 1 KB for its alignment, or ScanSmem.
template <int D, int VT, int ST>
constexpr size_t scan_smem_bytes(bool tiles) {
    return tiles ? sizeof(ScanSmemTile<D, VT, ST>) + 1024 : sizeof(ScanSmem<D, VT, ST>);
}

// The forward scan's cluster size for variant (VT, ST, NW) with tile copies: all D / VT slice blocks of a
// head, when the GPU can hold all `blocks` of the launch at once in clusters that size
// (cudaOccupancyMaxActiveClusters; a cluster must fit inside one GPC), else half as many, down to 1 (tile
// copies without clusters, slower than cp.async: not chosen, only with HYDRA_GDN_SCAN_CLUSTER=0); 0: no
// tile copies (not this variant, no cluster of two fits, or HYDRA_GDN_SCAN_TILES=0).
template <int D, int VT, int ST, int NW, bool SAVE>
int scan_cluster(size_t blocks) {
    static const bool tiles = env_choice("HYDRA_GDN_SCAN_TILES", {0, 1}, 1) == 1;
    static const bool clusters = env_choice("HYDRA_GDN_SCAN_CLUSTER", {0, 1}, 1) == 1;
    if constexpr (!scan_has_tile_copies<D, VT, ST, NW, SAVE>()) {
        return 0;
    } else {
        if (!tiles) return 0;
        if (!clusters) return 1;
        static std::vector<std::pair<size_t, int>> known;  // (blocks, cluster size) asked before
        for (const auto& [n, c] : known)
            if (n == blocks) return c;
        const auto kern = gdn_fwd_scan_tile_kernel<D, VT>;
        set_smem(kern, scan_smem_bytes<D, VT, ST>(true));
        int cl = D / VT;
        for (; cl >= 2; cl /= 2) {
            const ClusterLaunch launch(dim3(D / VT, unsigned(blocks / (D / VT))), kScanTileThreads,
                                       scan_smem_bytes<D, VT, ST>(true), nullptr, cl);
            int fit = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit, kern, &launch.cfg));
            if (size_t(fit) * size_t(cl) >= blocks) break;
        }
        if (cl < 2) cl = 0;  // no cluster fits: cp.async copies
        known.emplace_back(blocks, cl);
        return cl;
    }
}

// cuTensorMapEncodeTiled from the driver, through the runtime (no link against libcuda).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                 CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                 CUtensorMapFloatOOBfill);
EncodeTiled encode_tiled() {
    static const EncodeTiled fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
#if CUDART_VERSION >= 12050
        CUDA_CHECK(
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
#else
        CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &q));
#endif
        require(f != nullptr && q == cudaDriverEntryPointSuccess, "the driver has no cuTensorMapEncodeTiled");
        return reinterpret_cast<EncodeTiled>(f);
    }();
    return fn;
}

// A 4-d bf16 tensor map (dims innermost first, strides in bytes of dims 1..3), boxes of 64 x 1 x 64 x 1 or
// 64 x 64 x 1 x 1 (box), 128-byte swizzle, zeros outside.
CUtensorMap make_map(const void* base, const cuuint64_t (&dims)[4], const cuuint64_t (&strides)[3],
                     const cuuint32_t (&box)[4]) {
    CUtensorMap m{};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    const CUresult r =
        encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box,
                       unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    require(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (error " + std::to_string(int(r)) + ")");
    return m;
}

// The tile-copy scan's maps: W (D, T, B * HV) of the workspace (row stride D, NT * 64 rows a pair), q and k
// (D, H, T, B) as given; 64 x 64 boxes (64 tokens of one head's 64 columns).
void set_scan_maps(ScanArgs& a, int D) {
    const cuuint64_t Dd = cuuint64_t(D), Tp = cuuint64_t(a.NT) * kC;
    a.tm_w = make_map(a.W, {Dd, cuuint64_t(a.T), cuuint64_t(a.B) * a.HV, 1},
                      {Dd * 2, Tp * Dd * 2, Tp * Dd * 2 * a.B * a.HV}, {64, 64, 1, 1});
    const cuuint64_t dims[4] = {Dd, cuuint64_t(a.H), cuuint64_t(a.T), cuuint64_t(a.B)};
    const cuuint64_t strides[3] = {Dd * 2, Dd * 2 * a.H, Dd * 2 * a.H * a.T};
    a.tm_q = make_map(a.q, dims, strides, {64, 1, 64, 1});
    a.tm_k = make_map(a.k, dims, strides, {64, 1, 64, 1});
}

// Scan variant V of gdn_scan_policy.h's table as compile-time constants.
template <int V>
struct ScanShape {
    static constexpr int vt = kGdnScanShapes[V].rows, st = kGdnScanShapes[V].stages,
                         nw = kGdnScanShapes[V].warps;
};

// Calls f(ScanShape<v>{}) for scan variant v, one instantiation per entry of kGdnScanShapes.
template <class F, int... V>
void with_scan_shape(int v, F&& f, std::integer_sequence<int, V...>) {
    const bool found = ((v == V && (f(ScanShape<V>{}), true)) || ...);
    require(found, "scan variant " + std::to_string(v) + " is not in gdn_scan_policy.h's table");
}
template <class F>
void with_scan_shape(int v, F&& f) {
    with_scan_shape(v, f, std::make_integer_sequence<int, kGdnScanVariants>{});
}

// Blocks per SM the preparation's registers are budgeted for: 3 (at most 85 registers a thread; its
// shared memory allows three) where it has the GPU to itself, 2 (128 registers, no spills) in the streamed
// forward, where an SM beside a scan block holds one prep block only. Calls BB and BC, streamed, from graphs,
// 3 -> 2: B8 d 64 0.268 -> 0.251 ms, B2 d 128 0.822 -> 0.809, B1 2.223 -> 2.239; alone at B8 d 128 2 lost
// (forward 0.630 -> 0.677). HYDRA_GDN_PREP_BLOCKS = 2 or 3 forces one (and 8 warps), for comparisons.
int forced_prep_blocks() {
    static const int forced = env_choice("HYDRA_GDN_PREP_BLOCKS", {2, 3}, 0);
    return forced;
}
int prep_blocks_per_sm(bool streamed) {
    return forced_prep_blocks() != 0 ? forced_prep_blocks() : streamed ? 2 : 3;
}

// The preparation's launch: warps a block (8 or 4) and the blocks an SM its registers are budgeted for
// (4 warps: 4, at most 128 registers a thread).
struct PrepConfig {
    int warps, minb;
};
// Every configuration with an instantiation (with_prep_kernel), for the per-kernel attributes.
constexpr PrepConfig kPrepConfigs[] = {{8, 2}, {8, 3}, {4, 4}};

// d 128: 8 warps, as prep_blocks_per_sm says; d 64: 4 warps (up to 128 registers), four blocks an SM and two
// beside a scan block since the d 64 prep's T shares A's array (PrepSmem). Calls CM-CO, B8 T4096 H9,
// streamed, from graphs, that layout with 4 warps against 8: 0.227 against 0.258-0.264 ms (call CO: main's
// 8-warp prep with T in Q's place 0.251). d 128, fewer warps a prep block were tried beside the latency-bound
// scan, whose warps share an SM's issue slots and shared memory with them (H200, streamed, from CUDA graphs,
// each pair in one call): call CA, 8 -> 16 warps: B1 T65536 2.197 -> 2.246 ms, B2 T16384 0.777 -> 0.816; call
// CB, 8 -> 4: B1 2.232 -> 2.198, B2 0.775 -> 0.753, B8 H9 d 64 0.258 -> 0.248; call CC, with the prep's
// live-tile epilogue, 8 -> 4: B1 2.181 -> 2.170, B2 0.743 -> 0.761, d 64 0.250 -> 0.249. So 8 stays there.
// HYDRA_GDN_PREP_WARPS = 4 or 8 forces the warps everywhere, for comparisons (the streamed forward falls back
// to 8 where a 4-warp block does not fit beside the scan).
int forced_prep_warps() {
    static const int forced = env_choice("HYDRA_GDN_PREP_WARPS", {4, 8}, 0);
    return forced;
}
PrepConfig prep_config(int D, bool streamed) {
    const int warps = forced_prep_warps() != 0               ? forced_prep_warps()
                      : D == 64 && forced_prep_blocks() == 0 ? 4
                                                             : 8;
    return warps == 4 ? PrepConfig{4, 4} : PrepConfig{8, prep_blocks_per_sm(streamed)};
}

// Calls f(kernel, threads) with the prep instantiation of configuration c.
template <int D, class F>
void with_prep_kernel(PrepConfig c, F&& f) {
    if (c.warps == 4)
        f(gdn_fwd_prep_kernel<D, 4, 4>, 128);
    else if (c.minb == 3)
        f(gdn_fwd_prep_kernel<D, 3, 8>, 256);
    else
        f(gdn_fwd_prep_kernel<D, 2, 8>, 256);
}

// Parts of a split forward, the streamed forward's predecessor, still run where streaming is off
// (HYDRA_GDN_STREAM=0) or HYDRA_GDN_PARTS asks for it. With P parts the chunks are cut into P ranges: the
// prep of range k + 1 runs on a low-priority stream while the scan of range k runs on a high-priority one, so
// when the scan's blocks leave room beside them on their SMs (one wave of 16- or 32-row scan blocks: B1, B2
// at d 128), the prep hides behind the latency-bound scan. Each range's scan starts from the state the
// previous one left (GdnWorkspace::hpart). gdn_scan_policy.h's rule picks P; HYDRA_GDN_PARTS = 1, 2, 4 or 8
// forces it where the scan leaves room (and each range keeps two chunks), for comparisons and the parity
// runs.
int forced_parts() {
    static const int forced = env_choice("HYDRA_GDN_PARTS", {1, 2, 4, 8}, 0);
    return forced;
}
int forward_parts(const GdnShape& s, int NT, int variant, size_t scan_smem, size_t prep_smem) {
    const int forced = forced_parts();
    const DeviceLimits& lim = device_limits();
    const size_t blocks = gdn_scan_blocks(variant, s.D, size_t(s.B) * s.HV);
    const auto rule = [&](int chunks) {
        return gdn_forward_parts_for(chunks, blocks, lim.sms, scan_smem, prep_smem, size_t(lim.sm_smem),
                                     size_t(lim.reserved));
    };
    if (forced == 0) return rule(NT);
    if (forced == 1 || NT < 2 * forced || rule(1 << 30) == 1) return 1;  // rule(huge) == 1: no room beside
    return forced;
}

// The two streams of the split and the streamed forward (high priority for the scan, low for the prep) and
// their events (fork, join, one per part), created once and shared by both.
struct PartStreams {
    cudaStream_t hi = nullptr, lo = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr, prep_done[8] = {};
    PartStreams() {
        int least = 0, greatest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, least));
        CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
        for (auto& e : prep_done) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    // hi and lo start after the work queued on st so far
    void fork_from(cudaStream_t st) {
        CUDA_CHECK(cudaEventRecord(fork, st));
        CUDA_CHECK(cudaStreamWaitEvent(hi, fork, 0));
        CUDA_CHECK(cudaStreamWaitEvent(lo, fork, 0));
    }
    // st continues after the work queued on hi (which has waited for everything queued on lo)
    void join_into(cudaStream_t st) {
        CUDA_CHECK(cudaEventRecord(join, hi));
        CUDA_CHECK(cudaStreamWaitEvent(st, join, 0));
    }
};
PartStreams& part_streams() {
    static PartStreams ps;
    return ps;
}

// The prep asks for all of an SM's shared memory when it runs beside the scan (split or streamed forward), as
// the scan does, so that the driver does not configure an SM for one of them and keep the rest as L1.
template <int D>
void set_shared_carveout() {
    static bool done = false;
    if (done) return;
    for (const PrepConfig c : kPrepConfigs)
        with_prep_kernel<D>(c, [](auto kern, int) { prefer_shared_once(kern); });
    done = true;
}

// Registers a warp of kernel `kern` holds (allocated per warp, 256 at a time).
template <class Kern>
size_t warp_registers(Kern kern) {
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kern));
    return (size_t(fa.numRegs) * 32 + 255) / 256 * 256;
}

// Whether the forward streams (the prep and the scan at the same time, the scan waiting on per-chunk flags):
// where a prep block fits beside every scan block (gdn_prep_fits_beside_scan), unless HYDRA_GDN_STREAM=0.
// The streamed prep's grid is (pairs, chunks): at most 65535 chunks (T up to 4M).
template <int D>
bool stream_forward(const GdnShape& s, int NT, int variant, size_t scan_smem, bool save, PrepConfig pc) {
    static const bool allowed = env_choice("HYDRA_GDN_STREAM", {0, 1}, 1) == 1;
    if (!allowed || NT > 65535) return false;
    const DeviceLimits& lim = device_limits();
    struct Block {
        size_t warps = 0, warp_regs = 0;
    };
    // per saving or not and variant, read once: the cp.async instantiation and the tile-copy one (plain
    // forward only; warps 0 where there is none), either of which may run
    static Block scan_of[2][kGdnScanVariants][2] = {};
    Block(&scan)[2] = scan_of[save][variant];
    if (scan[0].warps == 0)
        with_scan_shape(variant, [&](auto shape) {
            using V = decltype(shape);
            if constexpr (V::vt <= D) {
                scan[0] = {size_t(V::nw),
                           save ? warp_registers(gdn_fwd_scan_kernel<D, V::vt, V::st, V::nw, true>)
                                : warp_registers(gdn_fwd_scan_kernel<D, V::vt, V::st, V::nw, false>)};
                if constexpr (scan_has_tile_copies<D, V::vt, V::st, V::nw, false>())
                    if (!save)
                        scan[1] = {size_t(kScanTileThreads / 32),
                                   warp_registers(gdn_fwd_scan_tile_kernel<D, V::vt>)};
            }
        });
    static Block prep_of[3] = {};  // per configuration ({4, 4}, {8, 3}, {8, 2}), read once
    Block& prep = prep_of[pc.warps == 4 ? 0 : pc.minb == 3 ? 1 : 2];
    if (prep.warps == 0)
        with_prep_kernel<D>(pc, [&](auto kern, int threads) {
            prep = {size_t(threads / 32), warp_registers(kern)};
        });
    for (const Block& b : scan)
        if (b.warps > 0 &&
            !gdn_prep_fits_beside_scan(gdn_scan_blocks(variant, s.D, size_t(s.B) * s.HV), lim.sms, scan_smem,
                                       sizeof(PrepSmem<D>), size_t(lim.sm_smem), size_t(lim.reserved),
                                       b.warps, b.warp_regs, prep.warps, prep.warp_regs, size_t(lim.sm_regs)))
            return false;
    return true;
}

template <int D>
void forward_impl(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                  const float* beta, const float* h0, bf16* o, float* ht, float scale, bool l2norm, bool save,
                  GdnWorkspace& ws, cudaStream_t st) {
    const int NT = s.num_chunks();
    Stages stages(st);
    FwdArgs fa{s.B,
               s.T,
               s.H,
               s.HV,
               NT,
               0,
               l2norm,
               q,
               k,
               v,
               g,
               beta,
               ws.gam,
               ws.rq,
               ws.rk,
               ws.W,
               ws.U,
               ws.P,
               save ? ws.Tm : nullptr,
               nullptr};
    static bool attr = false;
    if (!attr) {
        for (const PrepConfig c : kPrepConfigs)
            with_prep_kernel<D>(c, [](auto kern, int) { set_smem(kern, sizeof(PrepSmem<D>)); });
        attr = true;
    }
    PrepConfig pc{8, 3};  // set below, once it is known whether the forward streams
    // the prep over chunks n0 .. n1 - 1; with flags (streamed), pair-major and setting them
    auto prep = [&](int n0, int n1, cudaStream_t sx, int* ready = nullptr) {
        FwdArgs f = fa;
        f.n0 = n0;
        f.ready = ready;
        const dim3 grid = ready ? dim3(s.B * s.HV, n1 - n0) : dim3(n1 - n0, s.B * s.HV);
        with_prep_kernel<D>(
            pc, [&](auto kern, int threads) { kern<<<grid, threads, sizeof(PrepSmem<D>), sx>>>(f); });
        CUDA_CHECK(cudaGetLastError());
    };
    ScanArgs sa{s.B,
                s.T,
                s.H,
                s.HV,
                NT,
                0,
                NT,
                scale,
                q,
                k,
                ws.W,
                ws.U,
                ws.P,
                ws.gam,
                ws.rq,
                ws.rk,
                h0,
                o,
                ht,
                save ? ws.states : nullptr,
                save ? ws.delta : nullptr,
                nullptr};
    // call CB, streamed, from CUDA graphs: B1 T65536 2.232 -> 2.224 ms, B2 T16384 0.775 -> 0.758 (8-warp
    // prep), B1 2.198 -> 2.174, B2 0.753 -> 0.738 (4-warp prep)
    const int variant = scan_variant(s);
    // the scan over chunks n0 .. n1 - 1, from state h_in to h_out; split (shared_sm), its SMs are asked for
    // all their shared memory, so that a prep block fits beside a scan block (otherwise the driver may
    // configure an SM for the scan block alone and keep the rest as L1)
#ifdef HYDRA_GDN_SCAN_CLOCKS
    const size_t clock_blocks = gdn_scan_blocks(variant, D, size_t(s.B) * s.HV);
    const int clock_warps = kGdnScanShapes[variant].warps;
    static unsigned long long* clocks = nullptr;
    static size_t clocks_cap = 0;
    const size_t clocks_n = clock_blocks * clock_warps * kScanClockPhases;
    if (g_profile && clocks_n > clocks_cap) {
        if (clocks) CUDA_CHECK(cudaFree(clocks));
        CUDA_CHECK(cudaMalloc(&clocks, clocks_n * sizeof(unsigned long long)));
        clocks_cap = clocks_n;
    }
    sa.clocks = g_profile ? clocks : nullptr;
    static unsigned long long* timeline = nullptr;
    static size_t timeline_cap = 0;
    const size_t tl_scan = clock_blocks * 3, tl_n = tl_scan + size_t(s.B) * s.HV * NT * 2;
    if (g_profile && tl_n > timeline_cap) {
        if (timeline) CUDA_CHECK(cudaFree(timeline));
        CUDA_CHECK(cudaMalloc(&timeline, tl_n * sizeof(unsigned long long)));
        timeline_cap = tl_n;
    }
    if (g_profile) CUDA_CHECK(cudaMemsetAsync(timeline, 0, tl_n * sizeof(unsigned long long), st));
    sa.timeline = g_profile ? timeline : nullptr;
    fa.timeline = g_profile ? timeline + tl_scan : nullptr;
#endif
    auto scan = [&](int n0, int n1, const float* h_in, float* h_out, cudaStream_t sx, bool shared_sm,
                    int* ready = nullptr) {
        ScanArgs a = sa;
        a.n0 = n0, a.n1 = n1, a.h0 = h_in, a.ht = h_out, a.ready = ready,
        a.done = ready ? ws.ready_done : nullptr;
        with_scan_shape(variant, [&](auto shape) {
            using V = decltype(shape);
            if constexpr (V::vt <= D) {
                auto go = [&](auto save_c) {  // std::bool_constant: the saving or the plain instantiation
                    constexpr bool sv = decltype(save_c)::value;
                    const int cl = scan_cluster<D, V::vt, V::st, V::nw, sv>(
                        gdn_scan_blocks(variant, D, size_t(s.B) * s.HV));
                    if (g_profile)
                        std::fprintf(stderr, "[gdn profile] scan variant %d, %s\n", variant,
                                     cl == 0 ? "cp.async copies"
                                     : cl == 1
                                         ? "tile copies"
                                         : ("tile copies in clusters of " + std::to_string(cl)).c_str());
                    auto launch = [&](auto kern, bool tiles, int threads) {
                        if (shared_sm) prefer_shared_once(kern);
                        launch_scan<D, V::vt, V::st, V::nw>(kern, scan_smem_bytes<D, V::vt, V::st>(tiles), s,
                                                            a, sx, std::max(cl, 1), threads);
                    };
                    if constexpr (scan_has_tile_copies<D, V::vt, V::st, V::nw, sv>()) {
                        if (cl > 0) {
                            set_scan_maps(a, D);
                            launch(gdn_fwd_scan_tile_kernel<D, V::vt>, true, kScanTileThreads);
                            return;
                        }
                    }
                    launch(gdn_fwd_scan_kernel<D, V::vt, V::st, V::nw, sv>, false, V::nw * 32);
                };
                if (save)
                    go(std::true_type{});
                else
                    go(std::false_type{});
            }
        });
        CUDA_CHECK(cudaGetLastError());
    };
    size_t scan_smem = 0;  // the larger of the two layouts where the variant has tile copies
    with_scan_shape(variant, [&](auto shape) {
        using V = decltype(shape);
        if constexpr (V::vt <= D)
            scan_smem = std::max(scan_smem_bytes<D, V::vt, V::st>(false),
                                 scan_smem_bytes<D, V::vt, V::st>(
                                     !save && scan_has_tile_copies<D, V::vt, V::st, V::nw, false>()));
    });
    // streamed where a prep block fits beside the scan's, unless HYDRA_GDN_PARTS asks for the split forward:
    // with the prep prep_config gives where it fits beside, else an 8-warp one
    pc = prep_config(D, true);
    bool streamed = forced_parts() == 0 && stream_forward<D>(s, NT, variant, scan_smem, save, pc);
    if (!streamed && forced_parts() == 0 && pc.warps != 8) {
        pc = PrepConfig{8, prep_blocks_per_sm(true)};
        streamed = stream_forward<D>(s, NT, variant, scan_smem, save, pc);
    }
    if (!streamed) pc = prep_config(D, false);
    if (g_profile) std::fprintf(stderr, "[gdn profile] prep %d warps, %d blocks an SM\n", pc.warps, pc.minb);
    const int parts = streamed ? 1 : forward_parts(s, NT, variant, scan_smem, sizeof(PrepSmem<D>));
    if (streamed) {
        // streamed: the prep (low priority, launched first, pair-major) and the scan (high priority) run at
        // the same time; the scan's blocks wait for each chunk's flag (ready_flags.cuh) and the prep's blocks
        // fill the room beside them (gdn_prep_fits_beside_scan).
        // Why it cannot deadlock: the prep never waits; the scan's blocks are no more than the SMs and a prep
        // block fits beside any one of them, so some SM always has room for the prep while scans wait; and a
        // run that serialises kernels (CUDA_LAUNCH_BLOCKING, a sanitizer) finishes the prep, launched first,
        // before the scan starts. Should a scan block still wait seconds for a flag (SMs withheld from the
        // process, as an MPS thread limit does), wait_ready stops the kernel with a message instead of
        // hanging. Launching the scan first was measured no faster (call CN, d 64: 0.2265 against 0.2266 ms).
        // Scan clusters (tile copies) wait only on the prep's flags and on each other's copies of chunks
        // whose flags they have seen, and are used only where all of them fit at once.
        // At d 64 the flags and the pairs' counters are zero between forwards: the scan clears them as it
        // ends (kGdnScanClearsFlags; its kernel says how). So whole d 64 heads run no memset before the
        // kernels (a graph node on the critical path; call DC, B8 T4096 H9 from graphs 0.2243 -> 0.2195 ms),
        // but the first on this workspace's. Slices and d 128 keep it: without it the d 128 slice forwards
        // lost (calls DC and DD, B1 T65536 1.92 -> 1.97 ms, B2 T16384 0.733 -> 0.745), perhaps as the memset,
        // ending, makes both kernels pending at once and the scan's stream priority then dispatches its
        // blocks first.
        PartStreams& ps = part_streams();
        set_shared_carveout<D>();
        if (!ws.ready_zeroed || !kGdnScanClearsFlags<D> || kGdnScanShapes[variant].rows < D) {
            CUDA_CHECK(cudaMemsetAsync(ws.ready, 0, ws.ready_bytes, st));
            ws.ready_zeroed = kGdnScanClearsFlags<D>;
        }
        ps.fork_from(st);
        prep(0, NT, ps.lo, ws.ready);
        scan(0, NT, h0, ht, ps.hi, true, ws.ready);
        CUDA_CHECK(cudaEventRecord(ps.prep_done[0], ps.lo));
        CUDA_CHECK(cudaStreamWaitEvent(ps.hi, ps.prep_done[0], 0));
        ps.join_into(st);
        stages.mark("prep | scan streamed");
    } else if (parts == 1) {
        prep(0, NT, st);
        stages.mark("prep");
        scan(0, NT, h0, ht, st, false);
        stages.mark("scan");
    } else {
        PartStreams& ps = part_streams();
        set_shared_carveout<D>();
        ps.fork_from(st);
        auto bound = [&](int p) { return int(int64_t(NT) * p / parts); };
        for (int p = 0; p < parts; ++p) {
            prep(bound(p), bound(p + 1), ps.lo);
            CUDA_CHECK(cudaEventRecord(ps.prep_done[p], ps.lo));
        }
        const size_t state = size_t(s.B) * s.HV * s.D * s.D;
        for (int p = 0; p < parts; ++p) {
            CUDA_CHECK(cudaStreamWaitEvent(ps.hi, ps.prep_done[p], 0));
            const float* h_in = p == 0 ? h0 : ws.hpart + state * ((p - 1) & 1);
            float* h_out = p == parts - 1 ? ht : ws.hpart + state * (p & 1);
            scan(bound(p), bound(p + 1), h_in, h_out, ps.hi, true);
        }
        ps.join_into(st);
        stages.mark("prep | scan in parts");
    }
    stages.report(save ? "forward (saving)" : "forward");
#ifdef HYDRA_GDN_SCAN_CLOCKS
    // the last launch's phase cycles (the split forward's last part), per warp averaged over the blocks, per
    // chunk
    if (g_profile) {
        CUDA_CHECK(cudaStreamSynchronize(st));
        std::vector<unsigned long long> h(clocks_n);
        CUDA_CHECK(
            cudaMemcpy(h.data(), clocks, clocks_n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        const int chunks = parts > 1 ? NT - int(int64_t(NT) * (parts - 1) / parts) : NT;
        int khz = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
        std::fprintf(
            stderr,
            "[gdn scan clocks] variant %d, %zu blocks x %d warps, %d chunks, SM clock %d MHz; cycles a "
            "chunk: warp: top barrier | [W;Q]M0^T+epilogue | issue/save | mid barrier | update/outputs | "
            "rest | sum\n",
            variant, clock_blocks, clock_warps, chunks, khz / 1000);
        for (int w = 0; w < clock_warps; ++w) {
            double ph[kScanClockPhases] = {}, sum = 0;
            for (size_t bl = 0; bl < clock_blocks; ++bl)
                for (int i = 0; i < kScanClockPhases; ++i)
                    ph[i] += double(h[(bl * clock_warps + w) * kScanClockPhases + i]) / clock_blocks / chunks;
            std::fprintf(stderr, "[gdn scan clocks] warp %2d:", w);
            for (int i = 0; i < kScanClockPhases; ++i) std::fprintf(stderr, " %7.0f", ph[i]), sum += ph[i];
            std::fprintf(stderr, " | %7.0f\n", sum);
        }
        // the streamed forward's timeline (us from the first block's start): the scan blocks' starts, first
        // chunks landed and loop ends; the prep's last block end of chunk n (over the pairs)
        std::vector<unsigned long long> t(tl_n);
        CUDA_CHECK(cudaMemcpy(t.data(), timeline, tl_n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        const size_t pairs = size_t(s.B) * s.HV;
        unsigned long long t0 = ~0ull;
        for (size_t i = 0; i < tl_n; ++i)
            if (t[i] != 0 && (i < tl_scan ? i % 3 == 0 : (i - tl_scan) % 2 == 0)) t0 = std::min(t0, t[i]);
        auto stats = [&](const char* what, auto get, size_t n) {
            std::vector<double> v;
            for (size_t i = 0; i < n; ++i)
                if (const unsigned long long x = get(i); x != 0) v.push_back(double(x - t0) / 1e3);
            if (v.empty()) return;
            std::sort(v.begin(), v.end());
            std::fprintf(stderr, "[gdn timeline] %-28s min %7.2f median %7.2f max %7.2f us (%zu)\n", what,
                         v[0], v[v.size() / 2], v.back(), v.size());
        };
        if (streamed && parts == 1) {
            stats(
                "scan start", [&](size_t b) { return t[b * 3]; }, clock_blocks);
            stats(
                "scan first chunk landed", [&](size_t b) { return t[b * 3 + 1]; }, clock_blocks);
            stats(
                "scan loop end", [&](size_t b) { return t[b * 3 + 2]; }, clock_blocks);
            const unsigned long long* pt = t.data() + tl_scan;
            for (int n : {0, 1, 2, 4, 8, 16, 32, 48, NT - 1}) {
                if (n >= NT) continue;
                char name[64];
                std::snprintf(name, sizeof name, "prep chunk %d start", n);
                stats(
                    name, [&](size_t j) { return pt[(size_t(n) * pairs + j) * 2]; }, pairs);
                std::snprintf(name, sizeof name, "prep chunk %d end", n);
                stats(
                    name, [&](size_t j) { return pt[(size_t(n) * pairs + j) * 2 + 1]; }, pairs);
            }
        }
    }
#endif
}

// Warps of the per-chunk backward: 16 (one block per SM, as its shared memory allows, so the warps
// are what hides the latency of its dependent phases) or 8 with HYDRA_GDN_BCHUNK_WARPS=8.
int bchunk_warps() {
    static const int nw = env_choice("HYDRA_GDN_BCHUNK_WARPS", {8, 16}, 16);
    return nw;
}

// The per-chunk backward's grid: as many blocks as are resident at once (one an SM), each walking its share
// of the items and copying the next item's operands under the current one's products (the kernel's
// comment); HYDRA_GDN_BCHUNK_PERSIST=0 launches one block an item instead (the copies all at its start).
template <int D, int NW>
int bchunk_blocks(int items) {
    static const int persist = env_choice("HYDRA_GDN_BCHUNK_PERSIST", {0, 1}, 1);
    static const int resident = [] {
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gdn_bwd_chunk_kernel<D, NW>,
                                                                 NW * 32, sizeof(BChunkSmem<D>)));
        return std::max(1, per_sm) * device_limits().sms;
    }();
    return persist ? std::min(items, resident) : items;
}

template <int D>
void backward_impl(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* beta,
                   const bf16* d_o, const float* dht, bf16* dq, bf16* dk, bf16* dv, float* dg, float* dbeta,
                   float* dh0, float scale, bool l2norm, GdnWorkspace& ws, cudaStream_t st) {
    const int NT = s.num_chunks();
    static bool attr = false;
    if (!attr) {
        set_smem(gdn_bwd_chunk_kernel<D, 8>, sizeof(BChunkSmem<D>));
        set_smem(gdn_bwd_chunk_kernel<D, 16>, sizeof(BChunkSmem<D>));
        attr = true;
    }
    Stages stages(st);
    BScanArgs ba{s.B,  s.T, s.H,    s.HV,  NT,    scale, q,   k,          ws.W,
                 ws.P, d_o, ws.gam, ws.rq, ws.rk, dht,   dh0, ws.dstates, ws.ddelta};
    with_scan_shape(scan_variant(s), [&](auto shape) {
        using V = decltype(shape);
        if constexpr (V::vt <= D)
            launch_scan<D, V::vt, V::st, V::nw>(gdn_bwd_scan_kernel<D, V::vt, V::st, V::nw>,
                                                sizeof(BScanSmem<D, V::vt, V::st>), s, ba, st);
    });
    CUDA_CHECK(cudaGetLastError());
    stages.mark("bscan");
    const bool direct = direct_dqk(s);
    BChunkArgs ca{s.B,      s.T,       s.H,    s.HV,   NT,    scale, l2norm, q,         k,
                  v,        d_o,       beta,   ws.gam, ws.rq, ws.rk, ws.Tm,  ws.states, ws.dstates,
                  ws.delta, ws.ddelta, ws.dqv, ws.dkv, dv,    dg,    dbeta};
    if (direct) ca.dq_out = dq, ca.dk_out = dk;
    const int items = NT * s.B * s.HV;  // (chunk, pair) items, chunks fastest
    if (bchunk_warps() == 16)
        gdn_bwd_chunk_kernel<D, 16><<<bchunk_blocks<D, 16>(items), 512, sizeof(BChunkSmem<D>), st>>>(ca);
    else
        gdn_bwd_chunk_kernel<D, 8><<<bchunk_blocks<D, 8>(items), 256, sizeof(BChunkSmem<D>), st>>>(ca);
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
    const size_t hm = size_t(s.B) * s.HV * NT * kC;  // head-major padded rows
    const size_t chunks = size_t(s.B) * s.HV * NT;
    ready_bytes = (chunks + size_t(s.B) * s.HV) * sizeof(int);  // the flags, then the pairs' counters
    struct Item {
        void** ptr;
        size_t bytes;
    };
    std::vector<Item> items = {{(void**)&rq, hm * 4},
                               {(void**)&rk, hm * 4},
                               {(void**)&gam, hm * 4},
                               {(void**)&W, hm * D * 2},
                               {(void**)&U, hm * D * 2},
                               {(void**)&P, chunks * kC * kC * 2},
                               {(void**)&hpart, 2 * size_t(s.B) * s.HV * D * D * 4},
                               {(void**)&ready, ready_bytes}};
    if (train) {
        items.push_back({(void**)&Tm, chunks * kC * kC * 4});
        items.push_back({(void**)&states, chunks * D * D * 2});
        items.push_back({(void**)&delta, hm * D * 2});
        items.push_back({(void**)&dstates, chunks * D * D * 2});
        items.push_back({(void**)&ddelta, hm * D * 2});
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
    ready_done = ready + chunks;
}

GdnWorkspace::~GdnWorkspace() {
    // checked, but reported rather than thrown (a destructor must not throw)
    if (base_) {
        const cudaError_t err = cudaFree(base_);
        if (err != cudaSuccess)
            std::fprintf(stderr, "gdn cuda: cudaFree failed: %s\n", cudaGetErrorString(err));
    }
}

void gdn_chunk_forward(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, const float* h0, bf16* o, float* ht, float scale, bool l2norm_qk,
                       bool save, GdnWorkspace& ws, cudaStream_t stream) {
    check_shape(s);
    require(ws.shape.B == s.B && ws.shape.T == s.T && ws.shape.H == s.H && ws.shape.HV == s.HV &&
                ws.shape.D == s.D,
            "workspace made for another shape");
    require(!save || ws.training, "save needs a training workspace");
    if (s.D == 64)
        forward_impl<64>(s, q, k, v, g, beta, h0, o, ht, scale, l2norm_qk, save, ws, stream);
    else
        forward_impl<128>(s, q, k, v, g, beta, h0, o, ht, scale, l2norm_qk, save, ws, stream);
}

void gdn_chunk_backward(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* /*g*/,
                        const float* beta, const bf16* d_o, const float* dht, bf16* dq, bf16* dk, bf16* dv,
                        float* dg, float* dbeta, float* dh0, float scale, bool l2norm_qk, GdnWorkspace& ws,
                        cudaStream_t stream) {
    check_shape(s);
    require(ws.training, "the backward needs a training workspace and a forward with save = true");
    require(ws.shape.B == s.B && ws.shape.T == s.T && ws.shape.H == s.H && ws.shape.HV == s.HV &&
                ws.shape.D == s.D,
            "workspace made for another shape");
    if (s.D == 64)
        backward_impl<64>(s, q, k, v, beta, d_o, dht, dq, dk, dv, dg, dbeta, dh0, scale, l2norm_qk, ws,
                          stream);
    else
        backward_impl<128>(s, q, k, v, beta, d_o, dht, dq, dk, dv, dg, dbeta, dh0, scale, l2norm_qk, ws,
                           stream);
}

void gdn_set_profile(bool on) {
    g_profile = on;
}

void gdn_set_scan_variant(int variant) {
    require(variant >= -1 && variant < kGdnScanVariants, "scan variant " + std::to_string(variant) +
                                                             " (-1 automatic, 0 to " +
                                                             std::to_string(kGdnScanVariants - 1) + ")");
    g_scan_override = variant;
}

void gdn_decode_step(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v, const float* g,
                     const float* beta, const float* state_in, float* state_out, bf16* o, float scale,
                     bool l2norm_qk, cudaStream_t stream) {
    check_shape({B, 1, H, HV, D});
    constexpr int ROWS = 8;
    const dim3 grid(unsigned(D / (4 * ROWS)), unsigned(B * HV));
    if (D == 64)
        gdn_decode_kernel<64, ROWS><<<grid, 128, 0, stream>>>(H, HV, q, k, v, g, beta, state_in, state_out, o,
                                                              scale, l2norm_qk ? 1 : 0);
    else
        gdn_decode_kernel<128, ROWS><<<grid, 128, 0, stream>>>(H, HV, q, k, v, g, beta, state_in, state_out,
                                                               o, scale, l2norm_qk ? 1 : 0);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
