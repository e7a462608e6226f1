// Gated DeltaNet chunked forward/backward on the GPU (see gdn_chunk.h; the algorithm is research/gdn.md
// §2.2 / §3.2, the same formulas as ops/cpu/gdn_recurrence.cpp's chunked form): the orchestration of the
// kernels (gdn_kernels.h lists their files), which decides what runs where, and the workspace.
//
// The q/k L2 norm is never materialised: the kernels read the raw rows, and the 1 / norms rq, rk (computed
// by the preparation) enter every product as diagonal factors (the backward's per-chunk kernel normalises
// its shared-memory copies instead).
// Forward, per sequence b and value head j (chunks of C = 64 tokens, L valid rows in the last one):
//   prep   (grid NT x B*HV, parallel over chunks): gamma = chunk-local cumsum of g; rq, rk; A = strictly
//          lower beta_r (k_r . k_c) E[r,c], E = exp(gamma_r - gamma_c), and P = (Q K^T) o E (causal) on
//          tensor cores, over the tiles on or below the diagonal; T = (I + A)^-1 in fp32 by 16 x 16 blocks;
//          W = T diag(beta Gamma) K and U = T diag(beta) V on tensor cores with the fp32 factor split into
//          bf16 high and low parts.
//   scan   (grid D/VT x B*HV, sequential over chunks, a 16- to 128-row slice of the V x K state per block in
//          fp32 registers; the shape by gdn_scan_policy.h): delta = U - W M0^T;
//          O = scale [diag(Gamma) Q M0^T + P delta];  M1 = Gamma_L M0 + (dec delta)^T K.
//   Streamed where a prep block fits beside every scan block: the two run at the same time on two streams,
//   the scan at high priority waiting on per-chunk flags the prep sets (ready_flags.cuh), so the prep hides
//   behind the latency-bound scan; elsewhere the prep runs first.
// Backward:
//   bscan  (reverse over chunks, V-slices): d delta = diag(dec) K dM^T + scale P^T dO (written out) and
//          dM0 = Gamma_L dM + (scale diag(Gamma) dO)^T Q - d delta^T W; dM of every chunk saved (bf16).
//   bchunk (parallel over chunks, persistent): dq, dk (per value head, fp32), dv, dbeta, dg from the saved
//          state entering the chunk, the saved dM leaving it, delta, d delta and T (gdn.md §3.2 steps 5-7).
//   finish: dq, dk summed over the value heads of each key head, then back through the L2 norm (with one
//          value head per key head the per-chunk kernel does this itself and the pass is skipped).
#include "ops/cuda/gdn_chunk.h"

#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gdn_kernel_options.h"
#include "ops/cuda/gdn_kernels.h"
#include "ops/cuda/gdn_scan_policy.h"

namespace hydra::cuda {

namespace gdn {

namespace {
bool g_profile = false;
}  // namespace

bool profiling() {
    return g_profile;
}

const DeviceLimits& device_limits() {
    static const DeviceLimits lim = [] {
        DeviceLimits l;
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l.sms, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l.sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l.reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&l.sm_regs, cudaDevAttrMaxRegistersPerMultiprocessor, dev));
        return l;
    }();
    return lim;
}

void check_shape(const GdnShape& s) {
    require(s.B > 0 && s.T > 0 && s.H > 0 && s.HV > 0,
            "bad shape B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
                " HV=" + std::to_string(s.HV));
    require(s.HV % s.H == 0, "HV=" + std::to_string(s.HV) + " is not a multiple of H=" + std::to_string(s.H));
    require(s.D == 64 || s.D == 128, "head dim " + std::to_string(s.D) + " not supported (64 or 128)");
}

namespace {

// Events between the kernels of one call when profiling; prints "name ms" per stage at the end.
struct Stages {
    cudaStream_t st;
    std::vector<cudaEvent_t> ev;
    std::vector<const char*> names;
    explicit Stages(cudaStream_t s) : st(s) {
        if (profiling()) mark(nullptr);
    }
    void mark(const char* name) {
        if (!profiling()) return;
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        CUDA_CHECK(cudaEventRecord(e, st));
        ev.push_back(e);
        names.push_back(name);
    }
    void report(const char* what) {
        if (!profiling()) return;
        CUDA_CHECK(cudaEventSynchronize(ev.back()));
        std::fprintf(stderr, "[gdn profile] %s:", what);
        for (size_t i = 1; i < ev.size(); ++i) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i - 1], ev[i]));
            std::fprintf(stderr, " %s %.3f ms", names[i], ms);
        }
        std::fprintf(stderr, "\n");
        for (auto e : ev) CUDA_CHECK(cudaEventDestroy(e));
    }
};

// One value head per key head: the per-chunk backward finishes dq, dk itself (no sum over value heads to
// wait for), and the workspace holds no per-value-head buffers.
bool direct_dqk(const GdnShape& s) {
    return s.HV == s.H;
}

// The scans run one block per (sequence, value head, state slice) for the whole sequence, in the shape
// gdn_scan_policy.h chooses by head dimension, pairs and SMs.
int scan_variant(const GdnShape& s) {
    return gdn_scan_variant_for(s.D, size_t(s.B) * s.HV, device_limits().sms);
}

// The streamed forward's two streams (high priority for the scan, low for the prep) and their events,
// created once.
struct StreamPair {
    cudaStream_t hi = nullptr, lo = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr, prep_done = nullptr;
    StreamPair() {
        int least = 0, greatest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest));
        CUDA_CHECK(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, least));
        CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&prep_done, cudaEventDisableTiming));
    }
    // hi and lo start after the work queued on st so far
    void fork_from(cudaStream_t st) {
        CUDA_CHECK(cudaEventRecord(fork, st));
        CUDA_CHECK(cudaStreamWaitEvent(hi, fork, 0));
        CUDA_CHECK(cudaStreamWaitEvent(lo, fork, 0));
    }
    // st continues after the work queued on hi and lo
    void join_into(cudaStream_t st) {
        CUDA_CHECK(cudaEventRecord(prep_done, lo));
        CUDA_CHECK(cudaStreamWaitEvent(hi, prep_done, 0));
        CUDA_CHECK(cudaEventRecord(join, hi));
        CUDA_CHECK(cudaStreamWaitEvent(st, join, 0));
    }
};
StreamPair& stream_pair() {
    static StreamPair ps;
    return ps;
}

// Whether the forward streams (the prep and the scan at the same time, the scan waiting on per-chunk flags):
// where a prep block fits beside every block the scan may run (gdn_prep_fits_beside_scan), unless
// HYDRA_GDN_STREAM=0 (gdn_kernel_options.h). The streamed prep's grid is (pairs, chunks): at most 65535
// chunks (T up to 4M); longer sequences run the prep first.
bool stream_forward(const GdnShape& s, int variant, bool save) {
    if (!gdn_kernel_options().stream_forward || s.num_chunks() > 65535) return false;
    const DeviceLimits& lim = device_limits();
    // read once per head dimension, saving or not and variant: the blocks that may run
    struct Scan {
        int n = -1;
        BlockFootprint fp[2];
    };
    static Scan scan_of[2][2][kGdnScanVariants];
    static BlockFootprint prep_of[2];
    const int d = s.D == 128;
    Scan& scan = scan_of[d][save][variant];
    if (scan.n < 0) scan.n = fwd_scan_footprints(s.D, variant, save, scan.fp);
    BlockFootprint& prep = prep_of[d];
    if (prep.warps == 0) prep = prep_footprint(s.D, true);
    const size_t scan_smem = fwd_scan_smem_bytes(s.D, variant, save);
    for (int i = 0; i < scan.n; ++i)
        if (!gdn_prep_fits_beside_scan(gdn_scan_blocks(variant, s.D, size_t(s.B) * s.HV), lim.sms, scan_smem,
                                       prep_smem_bytes(s.D), size_t(lim.sm_smem), size_t(lim.reserved),
                                       scan.fp[i].warps, scan.fp[i].warp_regs, prep.warps, prep.warp_regs,
                                       size_t(lim.sm_regs)))
            return false;
    return true;
}

void forward_impl(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                  const float* beta, const float* h0, bf16* o, float* ht, float scale, bool l2norm, bool save,
                  GdnWorkspace& ws, cudaStream_t st) {
    const int NT = s.num_chunks();
    Stages stages(st);
    FwdArgs fa{s.B,
               s.T,
               s.H,
               s.HV,
               NT,
               0,
               l2norm,
               q,
               k,
               v,
               g,
               beta,
               ws.gam,
               ws.rq,
               ws.rk,
               ws.W,
               ws.U,
               ws.P,
               save ? ws.Tm : nullptr,
               nullptr};
    ScanArgs sa{s.B,
                s.T,
                s.H,
                s.HV,
                NT,
                0,
                NT,
                scale,
                q,
                k,
                ws.W,
                ws.U,
                ws.P,
                ws.gam,
                ws.rq,
                ws.rk,
                h0,
                o,
                ht,
                save ? ws.states : nullptr,
                save ? ws.delta : nullptr,
                nullptr};
    const int variant = scan_variant(s);
    const bool streamed = stream_forward(s, variant, save);
    int cluster = 0;
    if (streamed) {
        // The prep (low priority, launched first, pair-major) and the scan (high priority) run at the same
        // time; the scan's blocks wait for each chunk's flag (ready_flags.cuh) and the prep's blocks fill the
        // room beside them. Why it cannot deadlock: the prep never waits; the scan's blocks are no more than
        // the SMs and a prep block fits beside any one of them, so some SM always has room for the prep while
        // scans wait; and a run that serialises kernels (CUDA_LAUNCH_BLOCKING, a sanitizer) finishes the
        // prep, launched first, before the scan starts. Should a scan block still wait seconds for a flag
        // (SMs withheld from the process, as an MPS thread limit does), wait_ready stops the kernel with a
        // message instead of hanging. Scan clusters (tile copies) wait only on the prep's flags and on each
        // other's copies of chunks whose flags they have seen, and are used only where all of them fit at
        // once. Both kernels ask for all of an SM's shared memory, so that the driver does not configure an
        // SM for one of them and keep the rest as L1.
        // Whole d 64 heads run no memset of the flags before the kernels (a graph node on the critical path):
        // the scan clears the flags and the pairs' counters as it ends (kGdnScanClearsFlags), so they are
        // zero between forwards but before the first on this workspace. Slices and d 128 keep the memset:
        // without it their forwards were slower, perhaps as the memset, ending, makes both kernels pending at
        // once and the scan's stream priority then dispatches its blocks first.
        StreamPair& ps = stream_pair();
        prep_prefer_shared(s.D);
        const bool clears = s.D == 64 ? kGdnScanClearsFlags<64> : kGdnScanClearsFlags<128>;
        if (!ws.ready_zeroed || !clears || kGdnScanShapes[variant].rows < s.D) {
            CUDA_CHECK(cudaMemsetAsync(ws.ready, 0, ws.ready_bytes, st));
            ws.ready_zeroed = clears;
        }
        ps.fork_from(st);
        fa.ready = ws.ready;
        launch_prep(fa, s.D, ps.lo);
        sa.ready = ws.ready, sa.done = ws.ready_done;
        cluster = launch_fwd_scan(sa, s.D, variant, save, true, ps.hi);
        ps.join_into(st);
        stages.mark("prep | scan streamed");
    } else {
        launch_prep(fa, s.D, st);
        stages.mark("prep");
        cluster = launch_fwd_scan(sa, s.D, variant, save, false, st);
        stages.mark("scan");
    }
    if (profiling())
        std::fprintf(stderr, "[gdn profile] scan variant %d (%d rows), %s, %s\n", variant,
                     kGdnScanShapes[variant].rows, streamed ? "streamed" : "prep first",
                     cluster == 0 ? "cp.async copies"
                                  : ("tile copies in clusters of " + std::to_string(cluster)).c_str());
    stages.report(save ? "forward (saving)" : "forward");
}

void backward_impl(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* beta,
                   const bf16* d_o, const float* dht, bf16* dq, bf16* dk, bf16* dv, float* dg, float* dbeta,
                   float* dh0, float scale, bool l2norm, GdnWorkspace& ws, cudaStream_t st) {
    const int NT = s.num_chunks();
    Stages stages(st);
    const BScanArgs ba{s.B,  s.T, s.H,    s.HV,  NT,    scale, q,   k,          ws.W,
                       ws.P, d_o, ws.gam, ws.rq, ws.rk, dht,   dh0, ws.dstates, ws.ddelta};
    launch_bwd_scan(ba, s.D, scan_variant(s), st);
    stages.mark("bscan");
    const bool direct = direct_dqk(s);
    BChunkArgs ca{s.B,      s.T,       s.H,    s.HV,   NT,    scale, l2norm, q,         k,
                  v,        d_o,       beta,   ws.gam, ws.rq, ws.rk, ws.Tm,  ws.states, ws.dstates,
                  ws.delta, ws.ddelta, ws.dqv, ws.dkv, dv,    dg,    dbeta};
    if (direct) ca.dq_out = dq, ca.dk_out = dk;
    launch_bwd_chunk(ca, s.D, st);
    stages.mark("bchunk");
    if (!direct) {
        launch_bwd_finish(s, ws.dqv, q, l2norm ? ws.rq : nullptr, dq, st);
        launch_bwd_finish(s, ws.dkv, k, l2norm ? ws.rk : nullptr, dk, st);
        stages.mark("finish");
    }
    stages.report("backward");
}

}  // namespace

}  // namespace gdn

using namespace gdn;

GdnWorkspace::GdnWorkspace(const GdnShape& s, bool train) : shape(s), training(train) {
    check_shape(s);
    const size_t NT = size_t(s.num_chunks()), D = size_t(s.D);
    const size_t hm = size_t(s.B) * s.HV * NT * kC;  // head-major padded rows
    const size_t chunks = size_t(s.B) * s.HV * NT;
    ready_bytes = (chunks + size_t(s.B) * s.HV) * sizeof(int);  // the flags, then the pairs' counters
    struct Item {
        void** ptr;
        size_t bytes;
    };
    std::vector<Item> items = {{(void**)&rq, hm * 4},        {(void**)&rk, hm * 4},
                               {(void**)&gam, hm * 4},       {(void**)&W, hm * D * 2},
                               {(void**)&U, hm * D * 2},     {(void**)&P, chunks * kC * kC * 2},
                               {(void**)&ready, ready_bytes}};
    if (train) {
        items.push_back({(void**)&Tm, chunks * kC * kC * 4});
        items.push_back({(void**)&states, chunks * D * D * 2});
        items.push_back({(void**)&delta, hm * D * 2});
        items.push_back({(void**)&dstates, chunks * D * D * 2});
        items.push_back({(void**)&ddelta, hm * D * 2});
        if (!direct_dqk(s)) {  // otherwise the per-chunk backward writes dq, dk itself
            items.push_back({(void**)&dqv, hm * D * 4});
            items.push_back({(void**)&dkv, hm * D * 4});
        }
    }
    size_t total = 0;
    for (auto& it : items) total += (it.bytes + 255) / 256 * 256;
    CUDA_CHECK(cudaMalloc(&base_, total));
    bytes = total;
    char* p = static_cast<char*>(base_);
    for (auto& it : items) {
        *it.ptr = p;
        p += (it.bytes + 255) / 256 * 256;
    }
    ready_done = ready + chunks;
}

GdnWorkspace::~GdnWorkspace() {
    // checked, but reported rather than thrown (a destructor must not throw)
    if (base_) {
        const cudaError_t err = cudaFree(base_);
        if (err != cudaSuccess)
            std::fprintf(stderr, "gdn cuda: cudaFree failed: %s\n", cudaGetErrorString(err));
    }
}

void gdn_chunk_forward(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, const float* h0, bf16* o, float* ht, float scale, bool l2norm_qk,
                       bool save, GdnWorkspace& ws, cudaStream_t stream) {
    check_shape(s);
    require(ws.shape.B == s.B && ws.shape.T == s.T && ws.shape.H == s.H && ws.shape.HV == s.HV &&
                ws.shape.D == s.D,
            "workspace made for another shape");
    require(!save || ws.training, "save needs a training workspace");
    forward_impl(s, q, k, v, g, beta, h0, o, ht, scale, l2norm_qk, save, ws, stream);
}

void gdn_chunk_backward(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* /*g*/,
                        const float* beta, const bf16* d_o, const float* dht, bf16* dq, bf16* dk, bf16* dv,
                        float* dg, float* dbeta, float* dh0, float scale, bool l2norm_qk, GdnWorkspace& ws,
                        cudaStream_t stream) {
    check_shape(s);
    require(ws.training, "the backward needs a training workspace and a forward with save = true");
    require(ws.shape.B == s.B && ws.shape.T == s.T && ws.shape.H == s.H && ws.shape.HV == s.HV &&
                ws.shape.D == s.D,
            "workspace made for another shape");
    backward_impl(s, q, k, v, beta, d_o, dht, dq, dk, dv, dg, dbeta, dh0, scale, l2norm_qk, ws, stream);
}

void gdn_set_profile(bool on) {
    gdn::g_profile = on;
}

}  // namespace hydra::cuda
