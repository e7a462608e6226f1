// 16-byte global stores of a warp's bf16 tile held in mma accumulator-fragment layout (the GDN
// kernels' epilogues). In that layout the lanes of a quad hold 4-byte column pairs of the same row, so a
// warp's pair store covers 8 rows x 16 bytes: half of each 32-byte sector it touches. Transposing 4 x 4 words
// within each quad (two shuffle steps) gives each lane 8 consecutive columns of one n-tile: a warp's store
// then covers 8 rows x 64 contiguous bytes, whole sectors, with a quarter of the store instructions.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/quad_transpose.h"

namespace hydra::cuda {

// x[0..3] = M(q, 0..3) in lane q of each quad -> M(0..3, q) (quad_transpose.h). Every lane of the warp calls
// it.
__device__ __forceinline__ void quad_transpose(uint32_t (&x)[4], int lane) {
#pragma unroll
    for (int step = 0; step < 2; ++step)
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            // the word as a select over the four (a lane-dependent index would put x in local memory)
            const int k = quad_transpose_word(lane, step, t);
            uint32_t v = x[0];
#pragma unroll
            for (int i = 1; i < 4; ++i) v = k == i ? x[i] : v;
            const uint32_t r = __shfl_xor_sync(0xffffffffu, v, quad_transpose_mask(step));
#pragma unroll
            for (int i = 0; i < 4; ++i) x[i] = k == i ? r : x[i];
        }
}

// Stores a warp's 16 x 8 NT bf16 tile (NT a multiple of 4) to row-major memory at dst, its (0, 0), row
// stride ld elements (dst and ld * 2 bytes 16-byte aligned). w[h][nt] is the bf16 pair (low: the even
// column) of row lane / 4 + 8 h, columns 8 nt + 2 (lane % 4) .. +1, as mma accumulators hold it. Rows at and
// after `valid` are not stored. Every lane of the warp calls it (shuffles).
template <int NT>
__device__ __forceinline__ void store_tile_bf16(uint32_t (&w)[2][NT], __nv_bfloat16* dst, size_t ld,
                                                int valid, int lane) {
    static_assert(NT % 4 == 0, "store_tile_bf16: n-tiles in groups of four");
    const int q = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = (lane >> 2) + 8 * h;
#pragma unroll
        for (int g = 0; g < NT / 4; ++g) {
            uint32_t x[4] = {w[h][4 * g], w[h][4 * g + 1], w[h][4 * g + 2], w[h][4 * g + 3]};
            quad_transpose(x, lane);  // lane q: n-tile 4 g + q, column pairs 0..3
            if (row < valid)
                *reinterpret_cast<uint4*>(dst + size_t(row) * ld + (4 * g + q) * 8) =
                    make_uint4(x[0], x[1], x[2], x[3]);
        }
    }
}

}  // namespace hydra::cuda
