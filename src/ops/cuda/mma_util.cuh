// Tensor-core building blocks shared by the CUDA kernels (sm_80+ mma.sync, written from the PTX ISA
// fragment layouts; no third-party code): bf16 m16n8k16 MMA with fp32 accumulators, ldmatrix loads
// of A and B fragments from shared memory (plain or transposed storage), cp.async 16-byte copies, and
// a warp-tile GEMM whose operands live in shared memory.
//
// Conventions. A warp computes C (16 MT x 8 NT) += opA (16 MT x 16 KS) opB (16 KS x 8 NT):
//   AT = false: opA[m][k] = A[m * lda + k]        (A stored M x K, K contiguous)
//   AT = true:  opA[m][k] = A[k * lda + m]        (A stored K x M, M contiguous)
//   BT = false: opB[k][n] = B[k * ldb + n]        (B stored K x N, N contiguous)
//   BT = true:  opB[k][n] = B[n * ldb + k]        (B stored N x K, K contiguous)
// lda/ldb are in elements, multiples of 8, and every tile origin is 16-byte aligned (ldmatrix rows).
// Accumulator element e (0..3) of tile (mt, nt) sits at row mt*16 + lane/4 + 8*(e/2), column
// nt*8 + 2*(lane%4) + (e%2) of the warp's tile (frag_row / frag_col below).
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

namespace hydra::cuda::mma {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

// Two 8 x 8 matrices (rows addressed by lanes 0..15; the other lanes' addresses are ignored).
__device__ __forceinline__ void ldsm_x2(uint32_t (&r)[2], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t (&r)[2], const bf16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fp32 -> tf32 (round to nearest, ties away; the low 13 bits zero).
__device__ __forceinline__ uint32_t tf32_rna(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

// The two tf32 parts of x: big = tf32(x), small = tf32(x - big); big + small carries about 21 bits.
__device__ __forceinline__ void tf32_split(float x, uint32_t& big, uint32_t& small) {
    big = tf32_rna(x);
    small = tf32_rna(x - __uint_as_float(big));
}

// c (16 x 8, fp32) += a (16 x 8, tf32) b (8 x 8, tf32). Fragments: a[0] (row g, col t), a[1] (g + 8, t),
// a[2] (g, t + 4), a[3] (g + 8, t + 4); b0 (row t, col g), b1 (t + 4, g); c as for mma_bf16 (g = lane / 4,
// t = lane % 4).
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// c += a b in about fp32's accuracy from tf32 operands split into big and small parts (tf32_split): three
// products, big.small + small.big + big.big (the small.small term is below fp32's rounding). In a numpy
// model of 64 x 64 products of T-like matrices: relative error 8e-8, against 3e-4 for one tf32 product.
__device__ __forceinline__ void mma_tf32_3x(float (&c)[4], const uint32_t (&a_big)[4],
                                            const uint32_t (&a_small)[4], uint32_t b0_big, uint32_t b0_small,
                                            uint32_t b1_big, uint32_t b1_small) {
    mma_tf32(c, a_big, b0_small, b1_small);
    mma_tf32(c, a_small, b0_big, b1_big);
    mma_tf32(c, a_big, b0_big, b1_big);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// 16-byte asynchronous global -> shared copy (L2 only).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }
// ROWS rows x COLS bf16 from global memory (row stride `stride` elements) into shared memory (row stride
// ldd) with cp.async by threads tid = 0 .. NTH - 1, rows >= valid zero-filled. COLS a multiple of 8,
// addresses 16-byte aligned. Each thread keeps one column and walks the rows NTH / (COLS / 8) apart, so
// a full tile is a fixed, unrolled run of copies at constant offsets (in the scans this issue sat on
// every chunk's critical path); the zero-filling loop runs only for a partial tile.
template <int ROWS, int COLS, int NTH>
__device__ __forceinline__ void load_rows(bf16* dst, int ldd, const bf16* src, size_t stride, int valid,
                                          int tid) {
    constexpr int PER = COLS / 8;  // 16-byte pieces a row
    static_assert(COLS % 8 == 0 && NTH % PER == 0, "load_rows: threads must cover whole rows");
    constexpr int RSTEP = NTH / PER;
    const int r0 = tid / PER, c = (tid % PER) * 8;
    if (valid >= ROWS) {
        const bf16* s = src + size_t(r0) * stride + c;
        bf16* d = dst + r0 * ldd + c;
#pragma unroll
        for (int i = 0; i < (ROWS + RSTEP - 1) / RSTEP; ++i)
            if (ROWS % RSTEP == 0 || r0 + i * RSTEP < ROWS)
                cp_async16(d + i * RSTEP * ldd, s + size_t(i) * RSTEP * stride);
        return;
    }
    for (int r = r0; r < ROWS; r += RSTEP) {
        bf16* d = dst + r * ldd + c;
        if (r < valid)
            cp_async16(d, src + size_t(r) * stride + c);
        else
            *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ int frag_row(int mt, int e, int lane) { return mt * 16 + (lane >> 2) + ((e >> 1) << 3); }
__device__ __forceinline__ int frag_col(int nt, int e, int lane) { return nt * 8 + ((lane & 3) << 1) + (e & 1); }

template <int MT, int NT>
__device__ __forceinline__ void zero(float (&acc)[MT][NT][4]) {
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

// A fragment of m-tile origin A (already offset to the tile's (m0, k0)).
template <bool AT>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* A, int lda, int lane) {
    if constexpr (!AT) {
        ldsm_x4(a, A + (lane & 15) * lda + ((lane >> 4) << 3));
    } else {
        const int k = ((lane >> 4) << 3) + (lane & 7);
        const int m = ((lane >> 3) & 1) << 3;
        ldsm_x4_t(a, A + k * lda + m);
    }
}

// B fragments of two adjacent n-tiles (b[0], b[1] for the first; b[2], b[3] for the second); B offset to
// the pair's (k0, n0).
template <bool BT>
__device__ __forceinline__ void load_b2(uint32_t (&b)[4], const bf16* B, int ldb, int lane) {
    const int i = lane >> 3;
    if constexpr (BT) {
        const int n = ((i >> 1) << 3) + (lane & 7);
        const int k = (i & 1) << 3;
        ldsm_x4(b, B + n * ldb + k);
    } else {
        const int k = ((i & 1) << 3) + (lane & 7);
        const int n = (i >> 1) << 3;
        ldsm_x4_t(b, B + k * ldb + n);
    }
}

// B fragment of one n-tile (b[0], b[1]), B offset to the tile's (k0, n0): lanes 0..15 address the two
// 8 x 8 halves along k.
template <bool BT>
__device__ __forceinline__ void load_b1(uint32_t (&b)[2], const bf16* B, int ldb, int lane) {
    const int r = lane & 7, half = ((lane >> 3) & 1) << 3;
    if constexpr (BT)
        ldsm_x2(b, B + r * ldb + half);
    else
        ldsm_x2_t(b, B + (half + r) * ldb);
}

// acc (16MT x 8NT) += opA (16MT x 16KS) opB (16KS x 8NT), operands in shared memory at the warp tile's
// origin (see the conventions above). n-tiles are loaded in pairs, an odd last one alone. Only the k-steps
// ks0 <= ks < ks1 are run when given (warp-uniform bounds: where a triangular operand is zero).
template <int MT, int NT, int KS, bool AT, bool BT>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const bf16* A, int lda, const bf16* B,
                                          int ldb, int lane, int ks0 = 0, int ks1 = KS) {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        if (ks < ks0 || ks >= ks1) continue;
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const bf16* pa = AT ? A + (ks * 16) * lda + mt * 16 : A + (mt * 16) * lda + ks * 16;
            load_a<AT>(a[mt], pa, lda, lane);
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            uint32_t b[4];
            const bf16* pb = BT ? B + (np * 16) * ldb + ks * 16 : B + (ks * 16) * ldb + np * 16;
            load_b2<BT>(b, pb, ldb, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(acc[mt][2 * np], a[mt], b[0], b[1]);
                mma_bf16(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
            }
        }
        if constexpr (NT % 2 == 1) {
            uint32_t b[2];
            const bf16* pb = BT ? B + ((NT - 1) * 8) * ldb + ks * 16 : B + (ks * 16) * ldb + (NT - 1) * 8;
            load_b1<BT>(b, pb, ldb, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mma_bf16(acc[mt][NT - 1], a[mt], b[0], b[1]);
        }
    }
}

// c1 += opA1 opB and c2 += opA2 opB (shapes as warp_gemm): two products with the same right operand, its
// fragments loaded once for both. c1 and c2 may be the same array (a product with a two-part left
// operand, such as the bf16 high and low parts of an fp32 factor). k-steps ks0 <= ks < ks1 as warp_gemm; only
// the n-tiles below nt1 (in pairs: a pair is computed when its first tile is), the rest of C's columns left
// as they are (a triangular result whose right part the caller never reads).
template <int MT, int NT, int KS, bool AT, bool BT>
__device__ __forceinline__ void warp_gemm_shared_b(float (&c1)[MT][NT][4], const bf16* A1,
                                                   float (&c2)[MT][NT][4], const bf16* A2, int lda,
                                                   const bf16* B, int ldb, int lane, int ks0 = 0,
                                                   int ks1 = KS, int nt1 = NT) {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
        if (ks < ks0 || ks >= ks1) continue;
        uint32_t a1[MT][4], a2[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int off = AT ? (ks * 16) * lda + mt * 16 : (mt * 16) * lda + ks * 16;
            load_a<AT>(a1[mt], A1 + off, lda, lane);
            load_a<AT>(a2[mt], A2 + off, lda, lane);
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
            if (2 * np >= nt1) continue;
            uint32_t b[4];
            const bf16* pb = BT ? B + (np * 16) * ldb + ks * 16 : B + (ks * 16) * ldb + np * 16;
            load_b2<BT>(b, pb, ldb, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(c1[mt][2 * np], a1[mt], b[0], b[1]);
                mma_bf16(c1[mt][2 * np + 1], a1[mt], b[2], b[3]);
                mma_bf16(c2[mt][2 * np], a2[mt], b[0], b[1]);
                mma_bf16(c2[mt][2 * np + 1], a2[mt], b[2], b[3]);
            }
        }
        if (NT % 2 == 1 && NT - 1 < nt1) {
            uint32_t b[2];
            const bf16* pb = BT ? B + ((NT - 1) * 8) * ldb + ks * 16 : B + (ks * 16) * ldb + (NT - 1) * 8;
            load_b1<BT>(b, pb, ldb, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma_bf16(c1[mt][NT - 1], a1[mt], b[0], b[1]);
                mma_bf16(c2[mt][NT - 1], a2[mt], b[0], b[1]);
            }
        }
    }
}

// A block GEMM C (M x N) = opA (M x KD) opB (KD x N) split over WR x WC warps: warp w owns rows
// [(w / WC) M / WR, ...) and columns [(w % WC) N / WC, ...). A and B point at the operands' (0, 0).
template <int M, int N, int KD, int WR, int WC, bool AT, bool BT>
struct BlockGemm {
    static constexpr int MT = M / WR / 16;
    static constexpr int NT = N / WC / 8;
    static constexpr int WARP_ROWS = WR, WARP_COLS = WC;
    static_assert(MT * WR * 16 == M && NT * WC * 8 == N && KD % 16 == 0, "BlockGemm: shape does not tile");
    using Acc = float[MT][NT][4];

    __device__ static int row0(int warp) { return (warp / WC) * (M / WR); }
    __device__ static int col0(int warp) { return (warp % WC) * (N / WC); }

    __device__ static void run(Acc& acc, const bf16* A, int lda, const bf16* B, int ldb, int warp, int lane) {
        run_steps(acc, A, lda, B, ldb, warp, lane, 0, KD / 16);
    }
    // run over the k-steps of 16 ks0 <= ks < ks1 only: the rest of opA's rows of this warp are zero
    // (a triangular opA), so the same product with less work
    __device__ static void run_steps(Acc& acc, const bf16* A, int lda, const bf16* B, int ldb, int warp,
                                     int lane, int ks0, int ks1) {
        const int m0 = row0(warp), n0 = col0(warp);
        const bf16* pa = AT ? A + m0 : A + m0 * lda;
        const bf16* pb = BT ? B + n0 * ldb : B + n0;
        warp_gemm<MT, NT, KD / 16, AT, BT>(acc, pa, lda, pb, ldb, lane, ks0, ks1);
    }
    // acc1 += opA1 opB and acc2 += opA2 opB with opB's fragments loaded once (warp_gemm_shared_b; acc1 and
    // acc2 may be the same), over k-steps ks0 <= ks < ks1 and the warp's n-tiles below nt1
    __device__ static void run_shared_b(Acc& acc1, const bf16* A1, Acc& acc2, const bf16* A2, int lda,
                                        const bf16* B, int ldb, int warp, int lane, int ks0 = 0,
                                        int ks1 = KD / 16, int nt1 = NT) {
        const int m0 = row0(warp), n0 = col0(warp);
        const int aoff = AT ? m0 : m0 * lda;
        const bf16* pb = BT ? B + n0 * ldb : B + n0;
        warp_gemm_shared_b<MT, NT, KD / 16, AT, BT>(acc1, A1 + aoff, acc2, A2 + aoff, lda, pb, ldb, lane, ks0,
                                                    ks1, nt1);
    }

    // f(row) for the rows of this thread's accumulator fragments, out[mt][h] for row row0 + 16 mt + lane / 4
    // + 8 h: per-row epilogue factors computed once into registers (read per element from shared memory,
    // they would be reloaded after every shared-memory store of an epilogue loop).
    template <class F>
    __device__ static void row_values(int warp, int lane, F&& f, float (&out)[MT][2]) {
        const int m0 = row0(warp);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) out[mt][h] = f(m0 + frag_row(mt, 2 * h, lane));
    }
    // f(col) for the columns of this thread's fragments, out[nt][q] for column col0 + 8 nt + 2 (lane % 4) +
    // q.
    template <class F>
    __device__ static void col_values(int warp, int lane, F&& f, float (&out)[NT][2]) {
        const int n0 = col0(warp);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int q = 0; q < 2; ++q) out[nt][q] = f(n0 + frag_col(nt, q, lane));
    }

    // f(row, col, value&) for every accumulator element, in block coordinates.
    template <class F>
    __device__ static void each(Acc& acc, int warp, int lane, F&& f) {
        const int m0 = row0(warp), n0 = col0(warp);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    f(m0 + frag_row(mt, e, lane), n0 + frag_col(nt, e, lane), acc[mt][nt][e]);
    }
    // f(row, col, v0, v1) for each accumulator pair (columns col, col + 1): 4-byte bf16 / 8-byte fp32 writes
    template <class F>
    __device__ static void each_pair(Acc& acc, int warp, int lane, F&& f) {
        const int m0 = row0(warp), n0 = col0(warp);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; e += 2)
                    f(m0 + frag_row(mt, e, lane), n0 + frag_col(nt, e, lane), acc[mt][nt][e],
                      acc[mt][nt][e + 1]);
    }
};

}  // namespace hydra::cuda::mma
