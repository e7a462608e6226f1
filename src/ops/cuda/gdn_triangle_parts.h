// How the per-chunk GDN backward (ops/cuda/gdn_bwd_chunk.cu) splits its two triangular 64 x 64 x 64 tf32
// products over its 16 warps. These are tL = dT T^T and dA = -T^T tL. Pure data without CUDA, so the CPU
// tests check that the tables cover each needed tile and k-block exactly once.
//
// dA is read only below its diagonal and T is lower triangular, so of the 4 x 4 tiles (16 x 16) of each
// product only the 10 with I >= J are formed, and each only over the k-blocks of 16 where T is not zero:
//   tL tile (I, J): k-blocks 0 .. J   (T[n][k] = 0 for k > n)
//   dA tile (I, J): k-blocks I .. 3   (T[k][m] = 0 for k < m)
// Ten warps take a tile each. The six left over take the second half of the heaviest tiles, so no warp runs
// more than 2 k-blocks (the full product gave each warp 4).
// part: 0 = the whole tile, written to the output, with zeros in the second buffer's tile; 2 = the first
// half of a split tile, written to the output; 1 = its second half, written to the second buffer. The
// reader adds the two buffers. I = -1: no work.
#pragma once

namespace hydra::cuda {

struct TrianglePart {
    signed char I, J, kb0, kb1, part;
};

// one entry per warp of the 16
struct TriangleParts {
    TrianglePart warp[16];
};

inline constexpr int kTriangleWarps = 16;

// one line per group of warps
// clang-format off
inline constexpr TriangleParts kTrianglePartsTL = {{
    {0, 0, 0, 1, 0}, {1, 0, 0, 1, 0}, {2, 0, 0, 1, 0}, {3, 0, 0, 1, 0},  // J = 0: one k-block
    {1, 1, 0, 2, 0}, {2, 1, 0, 2, 0}, {3, 1, 0, 2, 0},                   // J = 1: two
    {2, 2, 0, 2, 2}, {3, 2, 0, 2, 2}, {3, 3, 0, 2, 2},                   // J = 2, 3: first halves
    {2, 2, 2, 3, 1}, {3, 2, 2, 3, 1}, {3, 3, 2, 4, 1},                   // ... and second halves
    {-1, 0, 0, 0, 0}, {-1, 0, 0, 0, 0}, {-1, 0, 0, 0, 0},
}};

inline constexpr TriangleParts kTrianglePartsDA = {{
    {0, 0, 0, 2, 2}, {1, 0, 1, 3, 2}, {1, 1, 1, 3, 2},                   // I = 0, 1: first halves
    {2, 0, 2, 4, 0}, {2, 1, 2, 4, 0}, {2, 2, 2, 4, 0},                   // I = 2: two k-blocks
    {3, 0, 3, 4, 0}, {3, 1, 3, 4, 0}, {3, 2, 3, 4, 0}, {3, 3, 3, 4, 0},  // I = 3: one
    {0, 0, 2, 4, 1}, {1, 0, 3, 4, 1}, {1, 1, 3, 4, 1},                   // second halves
    {-1, 0, 0, 0, 0}, {-1, 0, 0, 0, 0}, {-1, 0, 0, 0, 0},
}};
// clang-format on

}  // namespace hydra::cuda
