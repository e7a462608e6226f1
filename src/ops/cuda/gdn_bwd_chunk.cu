// The GDN chunked backward's per-chunk gradients (the algorithm: gdn_chunk.cu's header): dq, dk, dv, dbeta,
// dg of each chunk from the saved state entering it, the dM leaving it, delta, d delta and T; and the pass
// that sums dq, dk over the value heads of a key head and takes them back through the L2 norm.
#include "ops/cuda/bf16_pack.cuh"
#include "ops/cuda/gdn_device.cuh"
#include "ops/cuda/gdn_kernel_options.h"
#include "ops/cuda/gdn_kernels.h"
#include "ops/cuda/gdn_triangle_parts.h"
#include "ops/cuda/mma_util.cuh"
#include "ops/cuda/tile_store.cuh"

namespace hydra::cuda::gdn {

using namespace hydra::cuda::mma;
using namespace hydra::cuda::bf16_pack;

namespace {

// Every sum over the block's threads below is formed in a fixed order, so the gradients are the same bits run
// to run: a warp (or thread group) stores its partial sums to a slot of its own in a dead shared-memory
// region, and after a barrier one thread per output adds the slots in slot order (sum_parts). Shared-memory
// float atomics, which these replace, added the warps' partials in their order of arrival.

// parts[k * 64 + r] for k = 0 .. N - 1, in that order: output r of N slots of 64
template <int N>
__device__ __forceinline__ float sum_parts(const float* parts, int r) {
    float x = parts[r];
#pragma unroll
    for (int k = 1; k < N; ++k) x += parts[k * 64 + r];
    return x;
}

// For a BlockGemm tiling with MT == 1: f(r, c, v) gives each element's contribution to its row's sum; the
// warp's sums are stored to parts[wc * 64 + r], wc = the warp's column in the tiling (G::WARP_COLS slots of
// 64 rows, summed by sum_parts).
template <class G, class F>
__device__ __forceinline__ void each_rowsum(typename G::Acc& acc, int warp, int lane, float* parts, F&& f) {
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
        float* slot = parts + (warp % G::WARP_COLS) * 64;
        slot[r0 + (lane >> 2)] = s0;
        slot[r0 + 8 + (lane >> 2)] = s1;
    }
}

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
    float beta[64], dgam[64], dbet[64];
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
    // phase 2's fp32 64 x 64 matrices in s.big (BChunkSmem::BIG2), beside dW (bf16) at its start
    float* Tf = reinterpret_cast<float*>(s.big + BChunkSmem<D>::DW);  // T, row-major
    float* dA2 = Tf + 64 * LF;                                        // the second half of dA (below)
    float* dTf = dA2 + 64 * LF;                                       // dT, later dA (both row-major)
    float* tLf = dTf + 64 * LF;
    // The slots of the fixed-order sums (sum_parts), each in a region dead from its slots' writes to their
    // reads:
    //   tLf, past M0's and dM's slots (written by the tL product only): phase 1's row sums k . dk and q . dq
    //   and
    //     the warps' parts of <M0, dM>, read at phase 2's start; the epilogue's dq . y and dk . y
    //   dA2 (written by the dA product, after the reads): the row and column sums of the intra-chunk scores'
    //     gamma terms and the row sums dX . k and dY . v, read after the dY product
    //   GPs (read last by the G_P products): the column sums of dA o A
    constexpr int SL = 4 * 64;  // a sum's slots: 4 x 64 at most (WC or 4 warp rows, 64 rows or columns)
    static_assert(WC <= 4 && NTH / 64 * 64 * int(sizeof(float)) <= int(sizeof(s.GPs)), "slots do not fit");
    float* const pKdk = tLf;           // k_r . dk_r (leaving state), WC slots
    float* const pQdq = tLf + SL;      // q_r . dq_r (inter-chunk), WC slots
    float* const pMdM = tLf + 2 * SL;  // <M0, dM>, a slot a warp
    float* const pQy = tLf;            // epilogue: dq_r . y_r, WC slots
    float* const pKy = tLf + SL;       //           dk_r . y_r
    float* const pRow = dA2;           // intra-chunk scores: row sums, WC slots
    float* const pCol = dA2 + SL;      //                     column sums (negated), 4 slots (warp rows)
    float* const pX = dA2 + 2 * SL;    // dX_r . k_r, WC slots
    float* const pY = dA2 + 3 * SL;    // dY_r . v_r, WC slots
    float* const pAc = reinterpret_cast<float*>(s.GPs);  // column sums of dA o A, NTH / 64 slots
    // Items are (chunk, sequence x value head) pairs, chunks fastest. A block takes items blockIdx.x,
    // + gridDim.x, ...: with as many blocks as fit the GPU at once (one an SM), each block copies the next
    // item's operands into their buffers as soon as the current item has stopped reading them, so a chunk's
    // copies overlap the previous chunk's products:
    //   dO, delta, d delta, V, Q   after the dY product (none is read past it),
    //   dM and K                   before the epilogue (the dM slot and K are free by then),
    //   M0                         at the item's start (its slot holds the staged q, k rows until the end),
    // and the item starts with the products on dM, so only M0's 32 KB copy is in flight when it begins.
    // The gain over one block a chunk is small: the copies in flight share the memory-instruction queue with
    // the phases they run under.
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
        each_rowsum<GD>(dkA, warp, lane, pKdk, [&](int r, int c, float& v) {
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
        each_rowsum<GD>(dqA, warp, lane, pQdq, [&](int r, int c, float& v) {
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
            if (lane == 0) pMdM[warp] = f;
        }
        __syncthreads();

        // ---- phase 2 ----
        bf16* dWs = s.big;
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
        // phase 1's sums: d gamma_r = q_r . dq_r - k_r . dk_r; glast = sum_r k_r . dk_r + exp(gL) <M0, dM>
        if (tid < 64) s.dgam[tid] = sum_parts<WC>(pQdq, tid) - sum_parts<WC>(pKdk, tid);
        if (warp == 0) {
            const float kdk = warp_sum(sum_parts<WC>(pKdk, lane) + sum_parts<WC>(pKdk, lane + 32));
            const float mdm = warp_sum(lane < NW ? pMdM[lane] : 0.f);
            if (lane == 0) s.glast = kdk + expf(gL) * mdm;
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
            if ((lane & 3) ==
                0) {  // every warp, also one above the diagonal (zeros): the reader adds all slots
                float* slot = pRow + (warp % G64::WARP_COLS) * 64;
                slot[r0 + (lane >> 2)] = rs0;
                slot[r0 + 8 + (lane >> 2)] = rs1;
            }
#pragma unroll
            for (int nt = 0; nt < G64::NT; ++nt)
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    float x = cs[nt][q];
                    x += __shfl_xor_sync(0xffffffffu, x, 4);
                    x += __shfl_xor_sync(0xffffffffu, x, 8);
                    x += __shfl_xor_sync(0xffffffffu, x, 16);
                    if ((lane >> 2) == 0)
                        pCol[(warp / G64::WARP_COLS) * 64 + c0 + frag_col(nt, q, lane)] = -x;
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
            each_rowsum<GKT>(acc, warp, lane, pX,
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
                float* slot = pY + (warp % GKT::WARP_COLS) * 64;
                slot[r0 + (lane >> 2)] = ys[0];
                slot[r0 + 8 + (lane >> 2)] = ys[1];
            }
        }
        __syncthreads();
        // dO, delta, d delta, V and Q are read no more: the next item's copies into them start here
        if (has_next) copy_early(next);
        cp_async_commit();
        if (tid <
            64) {  // the sums of the intra-chunk scores, dX and dY (dA2's slots: read before the dA product)
            const float px = sum_parts<WC>(pX, tid), g = Gam(tid);
            s.dbet[tid] = g * px + sum_parts<WC>(pY, tid);
            s.dgam[tid] += sum_parts<WC>(pRow, tid) + sum_parts<4>(pCol, tid) + s.beta[tid] * g * px;
        }
        // tL = dT T^T, then dA = -T^T tL, on tensor cores: out = sign A B (A, B fp32 in shared memory, row
        // stride LF) as three tf32 products of the operands' big and small parts (mma_tf32_3x: about fp32's
        // accuracy, relative error 8e-8 against 1.5-1.8e-7 for sequential fp32 FMAs); the FMA loops these
        // replace held a sixth of the kernel's stalls and a quarter of its instructions. tf32_tile: the 16 x
        // (8 NTW) tile (m0, n0) of out over k = k0 .. k1 - 1, B taken as Y plus Y2 when Y2 is given. Two
        // layouts: RM (row-major reads) A = X and B = Y^T (A[m][k] = X[m][k], B[k][n] = Y[n][k]), else A =
        // X^T and B = Y. The row-major reads (lanes g = 0..7 rows apart, t = 0..3 columns) hit 32 different
        // banks at LF = 68; the others (t rows apart) two lanes a bank. So tL reads dT and T as stored, with
        // no transposed copy of T (its scalar stores, 68 floats apart, met 8 lanes a bank).
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
            if (tid % PPR == 0) {  // the one thread of row i (nothing else writes these between the barriers)
                s.dgam[i] += rs;
                s.dbet[i] += db;
            }
        }
        __syncthreads();
        // column sums of dA o A: every thread, a part of a column each
        {
            constexpr int RPP = 64 / (NTH / 64);  // rows of a part
            const int c = tid & 63, part = tid >> 6;
            float cs = 0.f;
            for (int i = part * RPP; i < part * RPP + RPP; ++i) cs += s.KKf[i * LF + c];
            pAc[part * 64 + c] = cs;
        }
        __syncthreads();
        if (tid < 64) s.dgam[tid] -= sum_parts<NTH / 64>(pAc, tid);  // read by the last warp after 2 barriers
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
            float dotq[2] = {0.f, 0.f}, dotk[2] = {0.f, 0.f};  // dq . y, dk . y of rows r0 + lane / 4 and + 8
            if (a.l2norm) {
                float pq[2] = {0.f, 0.f}, pk[2] = {0.f, 0.f};  // this warp's parts of them
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
                    const int sl = (warp % GD::WARP_COLS) * 64 + r0 + (lane >> 2);
                    pQy[sl] = pq[0], pQy[sl + 8] = pq[1];
                    pKy[sl] = pk[0], pKy[sl + 8] = pk[1];
                }
                __syncthreads();
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int r = r0 + (lane >> 2) + 8 * i;
                    dotq[i] = sum_parts<WC>(pQy, r), dotk[i] = sum_parts<WC>(pKy, r);
                }
            }
            // dq, dk of the pair (nt, e) in row r (valid), through the norm's backward when there is one
            auto finish = [&](int r, int c, int nt, int e, float(&q2)[2], float(&k2)[2]) {
                q2[0] = dqA[0][nt][e], q2[1] = dqA[0][nt][e + 1], k2[0] = dkA[0][nt][e],
                k2[1] = dkA[0][nt][e + 1];
                if (a.l2norm) {
                    float y[2];
                    yrow(true, r, c, y);
                    const float rq = rsv(true, r), dq = dotq[e >> 1];
                    q2[0] = rq * (q2[0] - dq * y[0]), q2[1] = rq * (q2[1] - dq * y[1]);
                    yrow(false, r, c, y);
                    const float rk = rsv(false, r), dk = dotk[e >> 1];
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

}  // namespace

namespace {

// The grid: as many blocks as are resident at once (one an SM), each walking its share of the (chunk, pair)
// items and copying the next item's operands under the current one's products (the kernel's comment).
template <int D>
void launch(const BChunkArgs& a, cudaStream_t st) {
    constexpr int NW = GdnKernelOptions::kBChunkWarps;
    const auto kern = gdn_bwd_chunk_kernel<D, NW>;
    static const int resident = [&] {
        set_smem(kern, sizeof(BChunkSmem<D>));
        int per_sm = 0;
        CUDA_CHECK(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, NW * 32, sizeof(BChunkSmem<D>)));
        return std::max(1, per_sm) * device_limits().sms;
    }();
    const int items = a.NT * a.B * a.HV;  // (chunk, pair) items, chunks fastest
    kern<<<std::min(items, resident), NW * 32, sizeof(BChunkSmem<D>), st>>>(a);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_bwd_chunk(const BChunkArgs& a, int D, cudaStream_t st) {
    if (D == 64)
        launch<64>(a, st);
    else
        launch<128>(a, st);
}

void launch_bwd_finish(const GdnShape& s, const float* dxv, const bf16* x, const float* rstd, bf16* dx,
                       cudaStream_t st) {
    const size_t rows = size_t(s.B) * s.T * s.H;
    const unsigned blocks = unsigned((rows + 7) / 8);  // a warp a row
    if (s.D == 64)
        gdn_bwd_finish_kernel<64>
            <<<blocks, 256, 0, st>>>(s.B, s.T, s.H, s.HV, s.num_chunks(), dxv, x, rstd, dx);
    else
        gdn_bwd_finish_kernel<128>
            <<<blocks, 256, 0, st>>>(s.B, s.T, s.H, s.HV, s.num_chunks(), dxv, x, rstd, dx);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda::gdn
