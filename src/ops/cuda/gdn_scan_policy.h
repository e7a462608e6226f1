// Which state-scan kernel shape the GDN chunked forward and backward run (ops/cuda/gdn_chunk.cu): the
// table of scan variants and the rule that picks one from the head dimension, the number of (sequence,
// value head) pairs and the GPU's SM count. Pure host logic without CUDA, so the CPU tests cover it.
#pragma once

#include <cstddef>

namespace hydra::cuda {

// One scan variant: each block owns `rows` rows of a (sequence, value head)'s D x D state for the whole
// sequence, with `warps` warps; stages = 2 prefetches the next chunk's operands (one block per SM),
// stages = 1 single-buffers them (half the shared memory, two blocks per SM overlapping instead).
struct GdnScanShape {
    int rows, stages, warps;
};

inline constexpr int kGdnScanVariants = 9;
inline constexpr GdnScanShape kGdnScanShapes[kGdnScanVariants] = {
    {16, 2, 4},   {32, 2, 4}, {32, 1, 4},  {64, 2, 8},   // the first four of the third pass
    {16, 2, 8},   {32, 2, 8}, {32, 2, 16}, {64, 2, 16},  // the same slices, each chunk's work over more warps
    {128, 2, 16},  // d 128 only: a whole head a block (the chunk's operands loaded once for all its rows)
};

// Whether variant v can run at head dimension D (its slice no taller than the state).
inline constexpr bool gdn_scan_fits(int variant, int D) {
    return kGdnScanShapes[variant].rows <= D;
}

// Blocks a scan launches: D / rows slices of each (sequence, value head) pair.
inline constexpr size_t gdn_scan_blocks(int variant, int D, size_t pairs) {
    return pairs * size_t(D / kGdnScanShapes[variant].rows);
}

// The automatic choice (D = 64 or 128). A block walks every chunk of its sequence in order, so the scans'
// time is that of the slowest SM: one wave of blocks, as many SMs at work as the pairs allow, and the most
// warps the slice gives (a chunk's step is a chain of dependent phases; more warps split each phase into
// shorter per-warp parts). Measured on an H200 (132 SMs), call AB, forward scan / reverse scan ms:
//   d 128, 128 pairs (B8 H16): 64 rows x 16 warps 0.535 / 0.615, x 8 warps 0.548 / 0.659;
//   d 128, 32 pairs (B2):      32 rows x 8 warps 0.777 / 0.848, x 4 warps 0.994 / 0.982;
//   d 128, 16 pairs (B1):      16 rows x 8 warps 2.606 / 2.394, x 4 warps 3.122 / 2.833;
//   d 64, 72 pairs (B8 H9):    32 rows x 8 warps 0.211 / 0.256, 32 rows single-buffered 0.241 / 0.311.
//   call AO, d 128, 128 pairs: a whole head a block (variant 8) 0.366 / 0.368 against 64 rows x 16 warps
//   0.416 / 0.456 (each block loads the chunk's operands once for all 128 rows).
// Beyond one wave of pairs (not measured) whole heads stay the choice: two 64-row blocks of a head cost
// 2 x 0.208 ms of an SM at B8 (their 256 blocks ran in two waves), one whole-head block 0.366.
//   call AQ, d 128, 64 pairs (B4 T8192): 64 rows x 16 warps 0.414 / 0.449, 32 rows single-buffered
//   0.510 / 0.523, whole heads 0.704 / 0.707; 32 pairs (B2): 32 rows x 8 warps 0.540 / 0.594, x 16 warps
//   0.662 (reverse), 64 rows x 16 warps 0.823 / 0.903; 16 pairs (B1): 16 rows x 8 warps 1.849 / 1.851,
//   x 4 warps 1.916 (reverse), 32 rows x 8 warps 2.331 (reverse).
//   call AY (two builds), d 128, 64 pairs (B4 T8192): 64 rows x 8 warps 0.380 / 0.420 against x 16 warps
//   0.411 / 0.455 (saving scan 0.413 against 0.464; forward+backward 2.712 against 2.807 ms), the rule's
//   choice until then (AQ had not compared the two). Call BF, after parity with variant 3 forced (104/104):
//   B4 T8192 forward 0.727 -> 0.688 ms, forward+backward 2.781 -> 2.712 against the rule's 7 (same call).
//   call AQ, d 64, 72 pairs (B8 H9): whole 64-row heads x 8 warps 0.152 / 0.148 against 32 rows x 8 warps
//   0.156 / 0.175; at 36 and 144 pairs whole heads lose (0.156 against 0.101, 0.312 against 0.233).
inline constexpr int gdn_scan_variant_for(int D, size_t pairs, int sms) {
    const size_t n = size_t(sms);
    if (D == 128 && 2 * pairs > n) return 8;                         // whole heads still fill the GPU
    if (D == 128 && 4 * pairs > n) return 3;                         // 64-row slices x 8 warps, one wave
    if (D == 64 && 2 * pairs > n && pairs <= n) return 3;  // whole d 64 heads, one wave, half or more
    if (gdn_scan_blocks(4, D, pairs) <= n) return 4;                 // 16-row slices in one wave
    if (gdn_scan_blocks(5, D, pairs) <= n) return 5;                 // 32-row slices in one wave
    if (D == 64 && gdn_scan_blocks(5, D, pairs) <= 2 * n) return 5;  // two of its blocks fit an SM at d 64
    return 2;                                                        // 32-row slices, two blocks per SM
}

// Whether a prep block fits beside every block of a one-wave scan: the scan's blocks no more than the SMs,
// and a prep block beside one of them in an SM's shared memory (`reserved` bytes kept per block) and in its
// register file (`*_warps` warps of `*_warp_regs` registers each), also in each of the SM's four
// sub-partitions, whose register files hold their own warps: a block's warps spread over the four, so one
// holds up to a quarter of them rounded up (call CH: a 9-warp scan block of 128 registers left no room for
// an 8-warp prep block of 88 beside it, though the SM's total had room, and the scan waited on the 4 SMs
// left to the prep, 15x slower). The streamed forward (gdn_chunk.cu, forward_impl)
// needs it: there the scan's blocks wait for the prep's, and without room beside them the waiting blocks
// would hold the SMs the prep needs. Measured on an H200, call BA, from CUDA graphs, streamed against the
// split forward below: B2 T16384 d 128 0.835 -> 0.811 ms, B1 T65536 2.367 -> 2.240, B8 H9 d 64 (not split)
// 0.293 -> 0.268.
inline constexpr bool gdn_prep_fits_beside_scan(size_t scan_blocks, int sms, size_t scan_smem,
                                                size_t prep_smem, size_t sm_smem, size_t reserved,
                                                size_t scan_warps, size_t scan_warp_regs, size_t prep_warps,
                                                size_t prep_warp_regs, size_t sm_regs) {
    const size_t whole = scan_warps * scan_warp_regs + prep_warps * prep_warp_regs;
    const size_t quarter = (scan_warps + 3) / 4 * scan_warp_regs + (prep_warps + 3) / 4 * prep_warp_regs;
    return scan_blocks <= size_t(sms) && scan_smem + prep_smem + 2 * reserved <= sm_smem &&
           whole <= sm_regs && quarter <= sm_regs / 4;
}

// Chunk ranges of the split forward (gdn_chunk.cu, forward_impl; where the streamed forward runs, only with
// HYDRA_GDN_STREAM=0 or HYDRA_GDN_PARTS set): the prep of range k + 1 runs beside the
// scan of range k, which only helps when the scan leaves SMs half idle: its blocks fit one wave and a prep
// block fits beside a scan block in an SM's shared memory (`reserved` bytes kept per block). Ranges of about
// 128 chunks or more, at most 4. Measured on an H200, call AO, forward ms at 1 / 2 / 4 / 8 parts:
//   d 128, B1 T65536 (1024 chunks, 16-row slices): 2.667 / 2.576 / 2.545 / 2.576;
//   d 128, B2 T16384 (256 chunks, 32-row slices):  0.954 / 0.934 / 0.946 / 0.970.
inline constexpr int gdn_forward_parts_for(int chunks, size_t scan_blocks, int sms, size_t scan_smem,
                                           size_t prep_smem, size_t sm_smem, size_t reserved) {
    if (scan_blocks > size_t(sms) || scan_smem + prep_smem + 2 * reserved > sm_smem) return 1;
    int parts = 1;
    while (parts < 4 && chunks / (2 * parts) >= 128) parts *= 2;
    return parts;
}

}  // namespace hydra::cuda
