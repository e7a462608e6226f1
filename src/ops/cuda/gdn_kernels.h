// The inside of the GDN chunked op (gdn_chunk.h): the kernels' argument structs and the host entry points
// that each kernel file exports to the orchestration in gdn_chunk.cu, which alone decides what runs where.
//   gdn_prep.cu       per-chunk preparation (gate cumsum, 1 / norms, P, T = (I + A)^-1, W, U)
//   gdn_fwd_scan.cu   the forward state scan with the outputs (cp.async and tile-copy kernels)
//   gdn_bwd_scan.cu   the reverse state-gradient scan
//   gdn_bwd_chunk.cu  the per-chunk backward and the pass that sums dq, dk over value heads
//   gdn_decode.cu     the one-token decode step (self-contained)
// Layouts and shapes are those of gdn_chunk.h; "pairs" are the B * HV (sequence, value head) pairs and
// "head-major rows" the (B, HV, NT * 64) padded rows of the workspace. Compiled by nvcc only.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gdn_scan_policy.h"

namespace hydra::cuda::gdn {

inline constexpr int kC = 64;  // chunk size (tokens)

inline void require(bool ok, const std::string& what) {
    if (!ok) throw ::hydra::Error("gdn cuda: " + what);
}

// Throws unless s is a shape the kernels take (gdn_chunk.h): positive sizes, HV a multiple of H, D 64 or 128.
void check_shape(const GdnShape& s);

// ---- kernel arguments ------------------------------------------------------------------------------
// The kernels keep the chunk ranges (FwdArgs::n0, ScanArgs::n0 / n1) of the split forward they once also
// served: every launch now covers the whole sequence (0 .. NT), and the fields stay so that the tuned
// kernels compile to the same code.

struct FwdArgs {
    int B, T, H, HV, NT;
    int n0;       // the first chunk of this launch (0)
    bool l2norm;  // q, k rows divided by their L2 norms (folded into the products, see the prep kernel)
    const bf16 *q, *k, *v;
    const float *g, *beta;
    float *gam, *rq, *rk;  // (B, HV, NT*64): gate cumsum, 1 / ||q_t||, 1 / ||k_t|| (1 without the norm)
    bf16 *W, *U, *P;
    float* Tm;  // null unless saving for the backward
    // streamed forward: blocks run pair-major (blockIdx.x = pair, blockIdx.y = chunk) and each sets its
    // (pair, chunk) flag once its outputs are written; null: chunk-major, no flags
    int* ready;
};

struct ScanArgs {
    int B, T, H, HV, NT;
    int n0, n1;  // the chunks n0 .. n1 - 1 of this launch (0 .. NT), from state h0 to state ht
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
    int* done;  // streamed, d 64 slices: per pair, its blocks that have finished (zero between forwards)
};

// Whether the forward scan clears the streamed forward's ready flags as it ends (fwd_scan), so that they are
// zero between forwards without a memset before each (d 64), or the forward zeroes them first (d 128).
template <int D>
inline constexpr bool kGdnScanClearsFlags = D == 64;

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

// ---- host helpers shared by the kernel files --------------------------------------------------------

// What the launch rules need to know of the GPU, read once (gdn_chunk.cu).
struct DeviceLimits {
    int sms = 0, sm_smem = 0, reserved = 0;  // SMs; shared memory per SM and reserved per block (bytes)
    int sm_regs = 0;                         // registers per SM
};
const DeviceLimits& device_limits();

// Whether the chunked calls print per-kernel times (gdn_set_profile).
bool profiling();

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

// A block of a kernel as the streamed forward's room rule counts it: warps, and registers a warp holds
// (allocated per warp, 256 at a time).
struct BlockFootprint {
    size_t warps = 0, warp_regs = 0;
};
template <class Kern>
BlockFootprint block_footprint(Kern kern, int threads) {
    cudaFuncAttributes fa{};
    CUDA_CHECK(cudaFuncGetAttributes(&fa, kern));
    return {size_t(threads / 32), (size_t(fa.numRegs) * 32 + 255) / 256 * 256};
}

// Scan variant V of gdn_scan_policy.h's table as compile-time constants.
template <int V>
struct ScanShape {
    static constexpr int variant = V, vt = kGdnScanShapes[V].rows, st = kGdnScanShapes[V].stages,
                         nw = kGdnScanShapes[V].warps;
};

// Calls f(ScanShape<v>{}) for scan variant v where the rule can choose v at head dimension D (only those
// variants are instantiated); any other v is an error.
template <int D, int V, class F>
bool call_scan_shape(int v, F& f) {
    if constexpr (gdn_scan_used(V, D)) {
        if (v == V) {
            f(ScanShape<V>{});
            return true;
        }
    }
    return false;
}
template <int D, class F, int... V>
void with_scan_shape(int v, F&& f, std::integer_sequence<int, V...>) {
    const bool found = (call_scan_shape<D, V>(v, f) || ...);
    require(found, "scan variant " + std::to_string(v) + " has no kernel at d " + std::to_string(D));
}
template <int D, class F>
void with_scan_shape(int v, F&& f) {
    with_scan_shape<D>(v, f, std::make_integer_sequence<int, kGdnScanVariants>{});
}

// ---- the kernel files' entry points -------------------------------------------------------------------
// D is 64 or 128 and variant one the rule chooses (gdn_scan_variant_for); launches are asynchronous on
// `st` and checked.

// gdn_prep.cu. The prep's shared memory, its block's footprint and its launch: grid (NT, pairs), or when
// streamed (a.ready set: the flags) (pairs, NT), pair-major. Streamed or not also picks the instantiation
// (GdnKernelOptions' register budgets). prep_prefer_shared: all of an SM's shared memory for the prep's
// kernels, asked once, where it runs beside the scan.
size_t prep_smem_bytes(int D);
BlockFootprint prep_footprint(int D, bool streamed);
void prep_prefer_shared(int D);
void launch_prep(const FwdArgs& a, int D, cudaStream_t st);

// gdn_fwd_scan.cu. fwd_scan_smem_bytes: the most shared memory a block of the variant's launch may take
// (either copy kind); fwd_scan_footprints: the blocks that may run (the cp.async kernel, and the tile-copy
// one where the variant has it; the count returned). launch_fwd_scan: grid (D / rows, pairs), the tile-copy
// kernel in clusters where they fit, else the cp.async one; shared_sm asks for all of an SM's shared memory
// (the prep runs beside). Returns the cluster size (0: cp.async copies).
size_t fwd_scan_smem_bytes(int D, int variant, bool save);
int fwd_scan_footprints(int D, int variant, bool save, BlockFootprint (&out)[2]);
int launch_fwd_scan(ScanArgs a, int D, int variant, bool save, bool shared_sm, cudaStream_t st);

// gdn_bwd_scan.cu: grid (D / rows, pairs).
void launch_bwd_scan(const BScanArgs& a, int D, int variant, cudaStream_t st);

// gdn_bwd_chunk.cu. The per-chunk backward (persistent: as many blocks as fit at once over the (chunk,
// pair) items), and the finishing pass of dq or dk (dxv per value head, x the raw rows, rstd the 1 / norms
// or null without the L2 norm).
void launch_bwd_chunk(const BChunkArgs& a, int D, cudaStream_t st);
void launch_bwd_finish(const GdnShape& s, const float* dxv, const bf16* x, const float* rstd, bf16* dx,
                       cudaStream_t st);

}  // namespace hydra::cuda::gdn
