// Gated DeltaNet on the GPU (research/gdn.md §2-§4): the chunked forward and backward (chunk 64,
// WY/UT form, bf16 tensor-core products with fp32 accumulation, fp32 state) and the one-token decode
// step. Same recurrence and conventions as the CPU reference (ops/cpu/gdn_recurrence.h): decay first,
// read after the write, value head j reads q/k head j / (HV / H), scale applied to q.
//
// Layouts (fla's, row-major, contiguous):
//   q, k: (B, T, H, D) bf16, raw when l2norm_qk (normalised inside: q / sqrt(sum q^2 + 1e-6), fla's
//         use_qk_l2norm_in_kernel) or already normalised otherwise
//   v, o: (B, T, HV, D) bf16        g (log decay <= 0), beta: (B, T, HV) fp32
//   states h0 / ht / dh0 / dht: (B, HV, D, D) fp32, V-major with K contiguous (state_v_first)
// K = V = D, D in {64, 128}. Any T >= 1 (the last chunk may be partial).
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

struct GdnShape {
    int B = 0, T = 0, H = 0, HV = 0, D = 0;
    int num_chunks() const { return (T + 63) / 64; }
};

// Device buffers of the chunked forward/backward. `training` adds what the backward reads (per-chunk
// states, deltas, the UT matrices) and the backward's own scratch.
class GdnWorkspace {
  public:
    GdnWorkspace(const GdnShape& s, bool training);
    ~GdnWorkspace();
    GdnWorkspace(const GdnWorkspace&) = delete;
    GdnWorkspace& operator=(const GdnWorkspace&) = delete;

    GdnShape shape;
    bool training = false;
    size_t bytes = 0;  // device memory held
    // forward: 1 / ||q_t||, 1 / ||k_t|| (1 without the L2 norm) and the chunk-local gate cumsum, each
    // (B, HV, NT*64); W and U (B, HV, NT*64, D), decayed causal scores P = (Q K^T) o E per chunk
    // (B, HV, NT, 64, 64), from the normalised q, k (the kernels never write normalised copies)
    float *rq = nullptr, *rk = nullptr, *gam = nullptr;
    bf16 *W = nullptr, *U = nullptr, *P = nullptr;
    // the streamed forward's per-chunk ready flags (B, HV, NT), set by the prep, waited for by the scan,
    // and per (sequence, head) the count of its scan blocks that have finished (B, HV), right after them:
    // zero again when a forward ends (the scan clears them); ready_zeroed: the first forward has zeroed
    // them (cudaMalloc does not)
    int* ready = nullptr;
    int* ready_done = nullptr;
    size_t ready_bytes = 0;
    bool ready_zeroed = false;
    // saved for the backward: T = (I + A)^-1 per chunk (fp32; only its 16-byte pieces on or below the
    // diagonal are written and read), state entering each chunk (bf16,
    // (B, HV, NT, D, D)), delta (B, HV, NT*64, D) bf16
    float* Tm = nullptr;
    bf16 *states = nullptr, *delta = nullptr;
    // backward scratch: dL/dS leaving each chunk (bf16), d delta (bf16), per-value-head dq/dk (fp32, only
    // when HV > H: with one value head per key head the per-chunk kernel writes dq, dk directly)
    bf16* dstates = nullptr;
    bf16* ddelta = nullptr;
    float *dqv = nullptr, *dkv = nullptr;

  private:
    void* base_ = nullptr;
};

// o = GDN(q, k, v, g, beta; h0) and, when ht is given, the final state. h0 null = zeros.
// save = keep what gdn_chunk_backward needs in ws (ws must be a training workspace).
// Where the GPU has room, the preparation and the state scan run at the same time on two streams of their
// own, the scan at high priority (gdn_chunk.cu; HYDRA_GDN_STREAM=0 turns it off,
// gdn_kernel_options.h); captured into a CUDA graph, instantiate it
// with cudaGraphInstantiateFlagUseNodePriority to keep that priority (without it the result is the same,
// slower).
void gdn_chunk_forward(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                       const float* beta, const float* h0, bf16* o, float* ht, float scale, bool l2norm_qk,
                       bool save, GdnWorkspace& ws, cudaStream_t stream = nullptr);

// Gradients of the forward just run with save = true on the same inputs and workspace. dq, dk are
// w.r.t. the raw q, k when l2norm_qk. dht null = no gradient on the final state; dh0 null = not wanted.
// All outputs are OVERWRITTEN.
void gdn_chunk_backward(const GdnShape& s, const bf16* q, const bf16* k, const bf16* v, const float* g,
                        const float* beta, const bf16* d_o, const float* dht, bf16* dq, bf16* dk, bf16* dv,
                        float* dg, float* dbeta, float* dh0, float scale, bool l2norm_qk, GdnWorkspace& ws,
                        cudaStream_t stream = nullptr);

// One decode step for B sequences: q, k (B, H, D), v, o (B, HV, D) bf16; g, beta (B, HV) fp32;
// state (B, HV, D, D) fp32 read from state_in and written to state_out (may be the same buffer).
void gdn_decode_step(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v, const float* g,
                     const float* beta, const float* state_in, float* state_out, bf16* o, float scale,
                     bool l2norm_qk, cudaStream_t stream = nullptr);

// The same with the states in a slot pool (serving: each of the B sequences is its own slot): sequence b's
// (HV, D, D) state is at states + slots[b] * slot_stride (slots: (B) int32 in device memory), updated in
// place. Rows sharing a slot (a padding row's scratch slot) leave that slot's state unspecified.
void gdn_decode_step_slots(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v,
                           const float* g, const float* beta, float* states, const int32_t* slots,
                           int64_t slot_stride, bf16* o, float scale, bool l2norm_qk,
                           cudaStream_t stream = nullptr);

// A decode step that computes its gates in place (gdn_gates.h's forward: one launch less a layer): the pair
// (b, j)'s g and beta from a[b ab_stride + j], b[b ab_stride + j] (bf16), A_log[j], dt_bias[j]; the states
// updated in place, sequence b's at states + slots[b] * slot_stride, or at states + b HV D D without slots.
struct GdnGateInputs {
    const bf16* a = nullptr;
    const bf16* b = nullptr;
    int64_t ab_stride = 0;  // elements between the rows of a (and of b)
    const float* A_log = nullptr;
    const float* dt_bias = nullptr;
    bool allow_neg_eigval = false;  // beta = 2 sigmoid(b)
};
void gdn_decode_step_gated(int B, int H, int HV, int D, const bf16* q, const bf16* k, const bf16* v,
                           const GdnGateInputs& gates, float* states, const int32_t* slots,
                           int64_t slot_stride, bf16* o, float scale, bool l2norm_qk,
                           cudaStream_t stream = nullptr);

// Diagnostics: when on, each chunked forward/backward call synchronises and prints the time of each of
// its kernels to stderr (for benchmarks' stage breakdowns; off by default).
void gdn_set_profile(bool on);

}  // namespace hydra::cuda
