// The GDN chunked forward's state scan with the outputs (the algorithm: gdn_chunk.cu's header): one block
// per (sequence, value head, state slice) walks the chunks in order, the slice of the state in registers.
// Two copy kinds: cp.async by the block's threads, or (the plain forward's 16- and 32-row slices) tensor-map
// tiles multicast to a cluster of the head's slice blocks by a producer warp (cluster_copy.cuh).
#include <cuda.h>

#include <type_traits>

#include "ops/cuda/cluster_copy.cuh"
#include "ops/cuda/gdn_device.cuh"
#include "ops/cuda/gdn_kernel_options.h"
#include "ops/cuda/gdn_kernels.h"
#include "ops/cuda/mma_util.cuh"
#include "ops/cuda/ready_flags.cuh"

namespace hydra::cuda::gdn {

using namespace hydra::cuda::mma;
using namespace hydra::cuda::ready_flags;

namespace {

// One block per (sequence, value head, VT-row state slice) with NW warps (4, 8 or 16), walking the chunks in
// order, in the shapes of gdn_scan_policy.h: VT = 16, 32, 64 or 128 (narrow slices when there are too few
// (sequence, head) pairs to fill the GPU with wider ones; wider slices cut the operand loads that every slice
// block of a head repeats: the chunk's W, Q, K and P). Warp w computes rows 32 (w / (NW / 4)) .. +32 of [W;
// Q] M0^T for its share of the slice's columns; the first NW / 2 warps (the W rows) also own the slice in
// registers: 16 rows each over all D columns, or, when the slice has fewer 16-row groups than those warps (VT
// = 16), 16 rows over a part. ST = 2: the next chunk's operands are prefetched while this one is computed
// (one block per SM); ST = 1: single buffers, half the shared memory, two blocks per SM overlapping each
// other instead.
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
// synchronise among themselves (named barrier 1). A compute warp issuing the tile copies before the middle
// barrier fell hundreds of cycles a chunk behind the W-row warps, and its copies, issued that late, were
// still landing at the next chunk's top barrier.
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
    // warp instead of 64, where the W-row warps alone spilled a loop counter)
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
    for (int n = a.n0; n < a.n1; ++n) {
        const int st = ST == 2 ? ((n - a.n0) & 1) : 0, t0 = n * kC, L = min(kC, a.T - t0);
        if constexpr (MC) {
            cluster_copy::wait(&s.full[st], ((n - a.n0) >> 1) & 1);
            compute_sync();  // and the state of the previous chunk's update in Mb
            // this block is done with the other stage (chunk n - 1): told to every block whose producer will
            // copy into it (chunk n + 1), by the first Q-row warp (off the W-row warps' chain)
            const int CL = int(cluster_copy::size());
            if (n - 1 >= a.n0 && n + 1 < a.n1 && tid >= NTH / 2 && tid < NTH / 2 + CL)
                cluster_copy::arrive_remote(&s.empty[st ^ 1], tid - NTH / 2);
        } else {
            if (ST == 2 && ready && tid == 0 && n + 1 < a.n1 && !next_ready) wait_ready(ready + n + 1);
            cp_async_wait_all();
            __syncthreads();
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
            // saving: the state entering this chunk, by the Q-row warps, whose part before the barrier is
            // shorter than the W-row warps' delta epilogue (the stores stay off the chain of the next chunk)
            if constexpr (SAVE)
                store_slice<D, VT, NTH / 2>(a.states + ((size_t(bj) * a.NT + n) * D + v0) * D, s.Mb,
                                            tid - NTH / 2);
        }
        compute_sync();
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
        if constexpr (ST == 1) {
            if (n + 1 < a.n1) {
                if (ready && tid == 0 && !next_ready) wait_ready(ready + n + 1);
                __syncthreads();  // every read of this chunk's buffers is done
                issue(n + 1, 0);
            }
        }
    }
    // Streamed: the last of the pair's blocks to get here (the only one for whole heads; else the one whose
    // count in a.done completes it) clears the pair's flags for the next forward, which then needs no memset
    // before its kernels (a graph node on the forward's critical path, gdn_chunk.cu). Every
    // read of a flag by this block is behind it: thread 0's waits (cp.async copies) or the producer warp's
    // (MC), whose copies the compute warps have consumed; the other blocks' reads are behind their counts.
    // Slices clear by one thread, and only their instantiations hold that code: a warp-wide form, or the
    // slices' code compiled into the whole-head scans, changed the whole-head scans' register allocation (the
    // d 64 saving scan 128 -> 161 registers, too many for a prep block beside it). d 64 only
    // (kGdnScanClearsFlags): at d 128 the clearing code changed the scans' allocation too and slowed them,
    // for no gain there, where the forward keeps its memset before the kernels.
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
    if constexpr (MC) cluster_copy::sync();  // no block leaves while another may still signal its barriers
}

// The forward scan's kernels: the cp.async instantiations, and the tile-copy one (MC) with its producer warp,
// held to 112 registers (GdnKernelOptions::kScanTileMaxRegs) so that an 8-warp prep block (up to 88
// registers) fits beside it in the streamed forward, in each of the SM's four register files too
// (gdn_prep_fits_beside_scan: three of its warps and two of the prep's in one). No spills at 112 (ptxas,
// every instantiation).
template <int D, int VT, int ST, int NW, bool SAVE>
__global__ void __launch_bounds__(NW * 32) gdn_fwd_scan_kernel(const __grid_constant__ ScanArgs a) {
    fwd_scan<D, VT, ST, NW, SAVE, false>(a);
}
template <int D, int VT>
__global__ void __maxnreg__(GdnKernelOptions::kScanTileMaxRegs)
    gdn_fwd_scan_tile_kernel(const __grid_constant__ ScanArgs a) {
    fwd_scan<D, VT, 2, 8, false, true>(a);
}
// Threads of the tile-copy scan's block: 8 compute warps and the producer.
constexpr int kScanTileThreads = 9 * 32;

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

// Whether the forward scan of variant (VT, ST, NW) has a tile-copy instantiation (MC): the two-stage 8-warp
// 16- and 32-row slices, in the plain forward only. The 64-row slices were slower with tile copies, and the
// saving forward's instantiation spilled at the register cap.
template <int D, int VT, int ST, int NW, bool SAVE>
constexpr bool scan_has_tile_copies() {
    return !SAVE && ST == 2 && NW == 8 && VT <= 32 && VT < D;
}

// Shared memory of the forward scan's launch: the tile-copy layout and 1 KB for its alignment, or ScanSmem.
template <int D, int VT, int ST>
constexpr size_t scan_smem_bytes(bool tiles) {
    return tiles ? sizeof(ScanSmemTile<D, VT, ST>) + 1024 : sizeof(ScanSmem<D, VT, ST>);
}

// The tile-copy scan's cluster size for a launch of `blocks` blocks: all D / VT slice blocks of a head, when
// the GPU can hold all the blocks at once in clusters that size (cudaOccupancyMaxActiveClusters; a cluster
// must fit inside one GPC; the scan is one wave, and in the streamed forward its blocks wait on the prep, so
// all of them must be resident), else half as many, down to 2; 0 where no cluster of two fits, and the
// cp.async kernel runs (tile copies without clusters were slower than cp.async copies). Known per block count
// after the first ask.
template <int D, int VT>
int scan_cluster(size_t blocks) {
    static std::vector<std::pair<size_t, int>> known;  // (blocks, cluster size) asked before
    for (const auto& [n, c] : known)
        if (n == blocks) return c;
    const auto kern = gdn_fwd_scan_tile_kernel<D, VT>;
    set_smem(kern, scan_smem_bytes<D, VT, 2>(true));
    int cl = D / VT;
    for (; cl >= 2; cl /= 2) {
        const ClusterLaunch launch(dim3(D / VT, unsigned(blocks / (D / VT))), kScanTileThreads,
                                   scan_smem_bytes<D, VT, 2>(true), nullptr, cl);
        int fit = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveClusters(&fit, kern, &launch.cfg));
        if (size_t(fit) * size_t(cl) >= blocks) break;
    }
    if (cl < 2) cl = 0;  // no cluster fits: cp.async copies
    known.emplace_back(blocks, cl);
    return cl;
}

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

// One scan kernel over (D / VT slices, pairs) blocks, in clusters of `cluster` slice blocks (1: no
// clusters), its shared-memory attribute set on the first launch of each kernel.
template <int D, int VT, class Kern>
void launch_scan(Kern kern, size_t smem, const ScanArgs& a, cudaStream_t st, int cluster, int threads) {
    static std::vector<Kern> attributed;  // the kernels of this shape given the attribute already
    if (std::find(attributed.begin(), attributed.end(), kern) == attributed.end()) {
        set_smem(kern, smem);
        attributed.push_back(kern);
    }
    const dim3 grid(D / VT, a.B * a.HV);
    if (cluster == 1) {
        kern<<<grid, threads, smem, st>>>(a);
        return;
    }
    const ClusterLaunch cl(grid, unsigned(threads), smem, st, cluster);
    CUDA_CHECK(cudaLaunchKernelEx(&cl.cfg, kern, a));
}

template <int D>
int launch(ScanArgs a, int variant, bool save, bool shared_sm, cudaStream_t st) {
    int cluster = 0;
    with_scan_shape<D>(variant, [&](auto shape) {
        using V = decltype(shape);
        auto go = [&](auto save_c) {  // std::bool_constant: the saving or the plain instantiation
            constexpr bool sv = decltype(save_c)::value;
            auto run = [&](auto kern, bool tiles, int threads, int cl) {
                if (shared_sm) prefer_shared_once(kern);
                launch_scan<D, V::vt>(kern, scan_smem_bytes<D, V::vt, V::st>(tiles), a, st, cl, threads);
            };
            if constexpr (scan_has_tile_copies<D, V::vt, V::st, V::nw, sv>()) {
                cluster = scan_cluster<D, V::vt>(gdn_scan_blocks(V::variant, D, size_t(a.B) * a.HV));
                if (cluster > 0) {
                    set_scan_maps(a, D);
                    run(gdn_fwd_scan_tile_kernel<D, V::vt>, true, kScanTileThreads, cluster);
                    return;
                }
            }
            run(gdn_fwd_scan_kernel<D, V::vt, V::st, V::nw, sv>, false, V::nw * 32, 1);
        };
        if (save)
            go(std::true_type{});
        else
            go(std::false_type{});
    });
    CUDA_CHECK(cudaGetLastError());
    return cluster;
}

template <int D>
size_t smem_bytes(int variant, bool save) {
    size_t bytes = 0;
    with_scan_shape<D>(variant, [&](auto shape) {
        using V = decltype(shape);
        bytes = std::max(
            scan_smem_bytes<D, V::vt, V::st>(false),
            scan_smem_bytes<D, V::vt, V::st>(!save && scan_has_tile_copies<D, V::vt, V::st, V::nw, false>()));
    });
    return bytes;
}

template <int D>
int footprints(int variant, bool save, BlockFootprint (&out)[2]) {
    int n = 0;
    with_scan_shape<D>(variant, [&](auto shape) {
        using V = decltype(shape);
        out[n++] = save ? block_footprint(gdn_fwd_scan_kernel<D, V::vt, V::st, V::nw, true>, V::nw * 32)
                        : block_footprint(gdn_fwd_scan_kernel<D, V::vt, V::st, V::nw, false>, V::nw * 32);
        if constexpr (scan_has_tile_copies<D, V::vt, V::st, V::nw, false>())
            if (!save) out[n++] = block_footprint(gdn_fwd_scan_tile_kernel<D, V::vt>, kScanTileThreads);
    });
    return n;
}

}  // namespace

size_t fwd_scan_smem_bytes(int D, int variant, bool save) {
    return D == 64 ? smem_bytes<64>(variant, save) : smem_bytes<128>(variant, save);
}

int fwd_scan_footprints(int D, int variant, bool save, BlockFootprint (&out)[2]) {
    return D == 64 ? footprints<64>(variant, save, out) : footprints<128>(variant, save, out);
}

int launch_fwd_scan(ScanArgs a, int D, int variant, bool save, bool shared_sm, cudaStream_t st) {
    return D == 64 ? launch<64>(a, variant, save, shared_sm, st)
                   : launch<128>(a, variant, save, shared_sm, st);
}

}  // namespace hydra::cuda::gdn
