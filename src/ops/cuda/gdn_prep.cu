// The GDN chunked forward's per-chunk preparation (the algorithm: gdn_chunk.cu's header): for each (chunk,
// sequence, value head) the gate cumsum, the q / k 1 / norms, the decayed causal scores P, T = (I + A)^-1 and
// W, U, all the state scan needs. In the streamed forward it runs beside the scan and flags each chunk done.
#include "ops/cuda/bf16_pack.cuh"
#include "ops/cuda/gdn_kernel_options.h"
#include "ops/cuda/gdn_kernels.h"
#include "ops/cuda/mma_util.cuh"
#include "ops/cuda/ready_flags.cuh"
#include "ops/cuda/tile_store.cuh"

namespace hydra::cuda::gdn {

using namespace hydra::cuda::mma;
using namespace hydra::cuda::bf16_pack;
using namespace hydra::cuda::ready_flags;

namespace {

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
// fitted (the streamed forward, gdn_chunk.cu). Its rows of 68 floats keep the transposed reads free of bank
// conflicts (72 had them); d 128 keeps 72 (the A epilogue's 8-byte stores).
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

// NW = 4 or 8 warps, budgeted for MINB blocks an SM (GdnKernelOptions says which runs where).
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
    // three products (mma_tf32_3x, about fp32's accuracy, as in the per-chunk backward). The FMA loops these
    // replace re-read float4 rows of shared memory in every thread, a third of the prep's shared-memory
    // traffic.
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
        if (tid == 0) signal_ready(a.ready + size_t(bj) * a.NT + n);
    }
}

}  // namespace

namespace {

using Opt = GdnKernelOptions;

// Calls f(kernel, threads) with the prep's instantiation for D: d 64 one, d 128 one budgeted for the blocks
// an SM holds beside the scan (streamed) and one for the prep alone.
template <int D, class F>
void with_prep_kernel(bool streamed, F&& f) {
    if constexpr (D == 64) {
        f(gdn_fwd_prep_kernel<64, Opt::kPrepBlocks64, Opt::kPrepWarps64>, Opt::kPrepWarps64 * 32);
    } else {
        if (streamed)
            f(gdn_fwd_prep_kernel<128, Opt::kPrepBlocksStreamed128, Opt::kPrepWarps128>,
              Opt::kPrepWarps128 * 32);
        else
            f(gdn_fwd_prep_kernel<128, Opt::kPrepBlocksAlone128, Opt::kPrepWarps128>,
              Opt::kPrepWarps128 * 32);
    }
}
template <int D, class F>
void with_each_prep_kernel(F&& f) {
    with_prep_kernel<D>(true, f);
    if constexpr (D == 128) with_prep_kernel<D>(false, f);
}

template <int D>
void launch(const FwdArgs& a, cudaStream_t st) {
    static const bool attributed = [] {
        with_each_prep_kernel<D>([](auto kern, int) { set_smem(kern, sizeof(PrepSmem<D>)); });
        return true;
    }();
    (void)attributed;
    const bool streamed = a.ready != nullptr;
    const dim3 grid = streamed ? dim3(a.B * a.HV, a.NT) : dim3(a.NT, a.B * a.HV);
    with_prep_kernel<D>(streamed,
                        [&](auto kern, int threads) { kern<<<grid, threads, sizeof(PrepSmem<D>), st>>>(a); });
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t prep_smem_bytes(int D) {
    return D == 64 ? sizeof(PrepSmem<64>) : sizeof(PrepSmem<128>);
}

BlockFootprint prep_footprint(int D, bool streamed) {
    BlockFootprint fp;
    auto get = [&](auto kern, int threads) { fp = block_footprint(kern, threads); };
    if (D == 64)
        with_prep_kernel<64>(streamed, get);
    else
        with_prep_kernel<128>(streamed, get);
    return fp;
}

void prep_prefer_shared(int D) {
    auto prefer = [](auto kern, int) { prefer_shared_once(kern); };
    if (D == 64)
        with_each_prep_kernel<64>(prefer);
    else
        with_each_prep_kernel<128>(prefer);
}

void launch_prep(const FwdArgs& a, int D, cudaStream_t st) {
    if (D == 64)
        launch<64>(a, st);
    else
        launch<128>(a, st);
}

}  // namespace hydra::cuda::gdn
