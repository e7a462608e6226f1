// Which state-scan kernel shape the GDN chunked forward and backward run (ops/cuda/gdn_fwd_scan.cu,
// gdn_bwd_scan.cu): the table of scan variants, the rule that picks one from the head dimension, the number
// of (sequence, value head) pairs and the GPU's SM count, and the rule for running the prep beside the scan.
// Pure host logic without CUDA, so the CPU tests cover it.
#pragma once

#include <cstddef>

namespace hydra::cuda {

// One scan variant: each block owns `rows` rows of a (sequence, value head)'s D x D state for the whole
// sequence, with `warps` warps; stages = 2 prefetches the next chunk's operands (one block per SM),
// stages = 1 single-buffers them (half the shared memory, two blocks per SM overlapping instead).
struct GdnScanShape {
    int rows, stages, warps;
};

inline constexpr int kGdnScan16 = 0;  // 16-row slices: few pairs, D / 16 blocks each fill the GPU
inline constexpr int kGdnScan32 = 1;  // 32-row slices
inline constexpr int kGdnScan32Single =
    2;                                // 32-row slices single-buffered, two blocks an SM: d 64 past a wave
inline constexpr int kGdnScan64 = 3;  // 64-row slices: whole d 64 heads, or half a d 128 head
inline constexpr int kGdnScanHead128 = 4;  // a whole d 128 head a block
inline constexpr int kGdnScanVariants = 5;
inline constexpr GdnScanShape kGdnScanShapes[kGdnScanVariants] = {
    {16, 2, 8}, {32, 2, 8}, {32, 1, 4}, {64, 2, 8}, {128, 2, 16},
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
// shorter per-warp parts). Wider slices load each chunk's operands (W, Q, K, P) once for more state rows, so
// as pairs grow the slices widen while the blocks still fit one wave: at d 128 whole heads from half the SMs
// in pairs on (also beyond one wave: one whole-head block costs an SM less than two 64-row blocks of the
// head), 64-row slices of 8 warps below that (16 warps were slower); at d 64 whole heads only in one wave
// that fills at least half the GPU (below that, and beyond one wave, 32-row slices were faster). Past one
// wave of 32-row blocks at d 64, the single-buffered slices, two blocks an SM, hide each other's latency.
// The measurements are in docs/kernels/gdn.md.
inline constexpr int gdn_scan_variant_for(int D, size_t pairs, int sms) {
    const size_t n = size_t(sms);
    if (D == 128 && 2 * pairs > n) return kGdnScanHead128;  // whole heads still fill the GPU
    if (D == 128 && 4 * pairs > n) return kGdnScan64;       // 64-row slices x 8 warps, one wave
    if (D == 64 && 2 * pairs > n && pairs <= n)
        return kGdnScan64;  // whole d 64 heads, one wave, half or more
    if (gdn_scan_blocks(kGdnScan16, D, pairs) <= n) return kGdnScan16;  // 16-row slices in one wave
    if (gdn_scan_blocks(kGdnScan32, D, pairs) <= n) return kGdnScan32;  // 32-row slices in one wave
    if (D == 64 && gdn_scan_blocks(kGdnScan32, D, pairs) <= 2 * n)
        return kGdnScan32;    // two fit an SM at d 64
    return kGdnScan32Single;  // 32-row slices, two blocks per SM
}

// Whether the rule above can choose variant v at head dimension D (every SM count): only those have
// kernels. d 128 never needs the single-buffered slices (once 4 * pairs <= SMs, 32-row slices fit one
// wave), d 64 never a 128-row block.
inline constexpr bool gdn_scan_used(int variant, int D) {
    return D == 64 ? variant != kGdnScanHead128 : variant != kGdnScan32Single;
}

// Whether a prep block fits beside every block of a one-wave scan: the scan's blocks no more than the SMs,
// and a prep block beside one of them in an SM's shared memory (`reserved` bytes kept per block) and in its
// register file (`*_warps` warps of `*_warp_regs` registers each), also in each of the SM's four
// sub-partitions, whose register files hold their own warps: a block's warps spread over the four, so one
// holds up to a quarter of them rounded up (a 9-warp scan block of 128 registers leaves no room for an
// 8-warp prep block of 88 beside it though the SM's total has room, and the scan then waits on the few SMs
// left to the prep). The streamed forward (gdn_chunk.cu) needs it: there the scan's blocks wait for the
// prep's, and without room beside them the waiting blocks would hold the SMs the prep needs.
inline constexpr bool gdn_prep_fits_beside_scan(size_t scan_blocks, int sms, size_t scan_smem,
                                                size_t prep_smem, size_t sm_smem, size_t reserved,
                                                size_t scan_warps, size_t scan_warp_regs, size_t prep_warps,
                                                size_t prep_warp_regs, size_t sm_regs) {
    const size_t whole = scan_warps * scan_warp_regs + prep_warps * prep_warp_regs;
    const size_t quarter = (scan_warps + 3) / 4 * scan_warp_regs + (prep_warps + 3) / 4 * prep_warp_regs;
    return scan_blocks <= size_t(sms) && scan_smem + prep_smem + 2 * reserved <= sm_smem &&
           whole <= sm_regs && quarter <= sm_regs / 4;
}

}  // namespace hydra::cuda
