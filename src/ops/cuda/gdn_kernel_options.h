// The GDN chunked kernels' options (ops/cuda/gdn_chunk.cu and the kernel files of gdn_kernels.h) in one
// place: the tuned choices, fixed at compile time since each picks kernel instantiations, and the one
// run-time switch. The scan's shape is chosen by shape, not here (gdn_scan_policy.h). Measurements behind
// each choice: docs/kernels/gdn.md. Host-only and free of CUDA, so the CPU tests cover the environment
// parsing.
//
// Environment (read once, on the first chunked forward):
//   HYDRA_GDN_STREAM=0  run the forward's prep and scan one after the other instead of at the same time.
//                       The streamed forward needs a prep block to find room beside the scan's blocks; where
//                       SMs are withheld from the process (an MPS thread limit, a partitioned GPU) a scan
//                       block may wait for the prep in vain, and the kernel then stops after 10 s with a
//                       message naming this switch (ready_flags.cuh). Same results, somewhat slower.
// Any other value than 0 or 1 is an error.
#pragma once

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace hydra::cuda {

struct GdnKernelOptions {
    // Warps of a prep block. d 64: 4, whose 128-register budget gives four blocks an SM and two beside a
    // scan block in the streamed forward (its T shares A's array in shared memory); d 128: 8, since fewer or
    // more warps beside the latency-bound scan were no faster.
    static constexpr int kPrepWarps64 = 4;
    static constexpr int kPrepBlocks64 = 4;  // blocks an SM its registers are budgeted for
    static constexpr int kPrepWarps128 = 8;
    // Blocks an SM the 8-warp d 128 prep's registers are budgeted for: 2 (up to 128 registers, no spills)
    // beside the scan, where an SM holds one prep block anyway; 3 (up to 85) where the prep has the GPU to
    // itself and its shared memory allows three.
    static constexpr int kPrepBlocksStreamed128 = 2;
    static constexpr int kPrepBlocksAlone128 = 3;
    // The tile-copy forward scan's register cap: an 8-warp prep block fits beside its 9 warps in each of an
    // SM's four register files, without spills (ptxas, every instantiation).
    static constexpr int kScanTileMaxRegs = 112;
    // Warps of the per-chunk backward's block: 16, one block an SM as its shared memory allows, so the
    // warps are what hides the latency of its dependent phases. It runs persistent (as many blocks as fit
    // at once, each walking its share of the chunks and copying the next chunk's operands under the current
    // one's products) and, with one value head per key head, finishes dq and dk itself.
    static constexpr int kBChunkWarps = 16;

    // Run time: the forward's prep and scan at the same time where a prep block fits beside every scan block
    // (HYDRA_GDN_STREAM, above).
    bool stream_forward = true;
};

// The options as the environment sets them now (throws hydra::Error on a bad value).
inline GdnKernelOptions gdn_kernel_options_from_env() {
    GdnKernelOptions o;
    if (const char* env = std::getenv("HYDRA_GDN_STREAM"); env && *env) {
        const std::string v = env;
        if (v != "0" && v != "1") throw Error("HYDRA_GDN_STREAM must be 0 or 1 (got '" + v + "')");
        o.stream_forward = v == "1";
    }
    return o;
}

// The options the kernels use: the environment's, read once.
inline const GdnKernelOptions& gdn_kernel_options() {
    static const GdnKernelOptions o = gdn_kernel_options_from_env();
    return o;
}

}  // namespace hydra::cuda
