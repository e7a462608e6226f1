// GdnBlock: one Gated DeltaNet head group after its input projections (research/gdn.md §1.1 steps
// 1-4), composed from the CPU ops: causal short conv + SiLU on q, k, v; L2 norm of q, k; the decay
// and beta gates; the gated delta rule (chunked or recurrent); the gated RMSNorm with SiLU(z).
// The projections in (q/k/v/a/b/z) and out (o_proj) belong to the caller (the mixer layer).
//
// Shapes for a segment of T tokens (row-major, token-major, heads contiguous inside a row):
//   q_raw, k_raw: (T, H*K)    v_raw, z, out: (T, HV*V)    a_raw, b_raw: (T, HV)
// Value head j reads q/k head j / (HV/H) (grouped, fla/HF convention). Scale = K^-1/2 on q.
// The state carried between segments (prefill in pieces, then decode) is the conv window of each
// short conv and the recurrent state per value head, all zeros at sequence start.
// Templated on float (inference/training) and double (gradient checks).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "ops/cpu/gdn_recurrence.h"

namespace hydra {

struct GdnConfig {
    int64_t H = 0;   // q/k heads
    int64_t HV = 0;  // value heads (a multiple of H)
    int64_t K = 0;   // key head dim
    int64_t V = 0;   // value head dim
    int64_t conv_width = 4;
    bool allow_neg_eigval = false;  // beta = 2 sigmoid(b) instead of sigmoid(b)
    bool use_chunked = true;        // chunked form for T > 1 (training, prefill); else token by token
    int64_t chunk_size = 64;
    double norm_eps = 1e-6;  // gated RMSNorm epsilon

    int64_t key_dim() const { return H * K; }
    int64_t value_dim() const { return HV * V; }
    double scale() const { return 1.0 / std::sqrt(double(K)); }
    cpu::GdnDims dims(int64_t num_tokens) const { return {num_tokens, H, HV, K, V}; }
    // Throws hydra::Error naming the bad field.
    void validate() const;
};

// Parameters (views, not owned).
template <typename T>
struct GdnParams {
    const T* conv_q = nullptr;   // (H*K, W), tap W-1 multiplies the current token
    const T* conv_k = nullptr;   // (H*K, W)
    const T* conv_v = nullptr;   // (HV*V, W)
    const T* A_log = nullptr;    // (HV)
    const T* dt_bias = nullptr;  // (HV)
    const T* norm_w = nullptr;   // (HV, V) gated RMSNorm weight, one row per value head
};

// Parameter gradients, ACCUMULATED (+=); any may be null (frozen).
template <typename T>
struct GdnParamGrads {
    T* conv_q = nullptr;
    T* conv_k = nullptr;
    T* conv_v = nullptr;
    T* A_log = nullptr;
    T* dt_bias = nullptr;
    T* norm_w = nullptr;
};

// The projection outputs of one segment (views).
template <typename T>
struct GdnInputs {
    const T* q_raw = nullptr;  // (T, H*K)
    const T* k_raw = nullptr;  // (T, H*K)
    const T* v_raw = nullptr;  // (T, HV*V)
    const T* a_raw = nullptr;  // (T, HV)  decay logits
    const T* b_raw = nullptr;  // (T, HV)  beta logits
    const T* z = nullptr;      // (T, HV*V) output gate
};

// Input gradients, OVERWRITTEN; all required.
template <typename T>
struct GdnInputGrads {
    T* q_raw = nullptr;
    T* k_raw = nullptr;
    T* v_raw = nullptr;
    T* a_raw = nullptr;
    T* b_raw = nullptr;
    T* z = nullptr;
};

// A view of a carried state (or of its gradient), e.g. into a cache's tensors.
template <typename T>
struct GdnStateView {
    T* conv_q = nullptr;  // (W-1, H*K) the last W-1 q_raw rows before the segment, oldest first
    T* conv_k = nullptr;  // (W-1, H*K)
    T* conv_v = nullptr;  // (W-1, HV*V)
    T* ssm = nullptr;     // (HV, V, K) recurrent state M = S^T per value head (V-major, K contiguous)
};

// An owned state, zeros at construction (= sequence start).
template <typename T>
struct GdnState {
    std::vector<T> conv_q, conv_k, conv_v, ssm;  // shapes as in GdnStateView

    GdnState() = default;
    explicit GdnState(const GdnConfig& c) { resize(c); }
    void resize(const GdnConfig& c);  // sizes for c, all zeros
    GdnStateView<T> view() { return {conv_q.data(), conv_k.data(), conv_v.data(), ssm.data()}; }
    bool empty() const { return ssm.empty(); }
    int64_t numel() const { return int64_t(conv_q.size() + conv_k.size() + conv_v.size() + ssm.size()); }
    size_t bytes() const { return size_t(numel()) * sizeof(T); }

    // Elements of one head group's state: 2 (W-1) H K + (W-1) HV V + HV V K, independent of the
    // sequence length.
    static int64_t numel(const GdnConfig& c);
    // Bytes of that state in fp32 (what inference keeps per layer and sequence).
    static int64_t fp32_bytes(const GdnConfig& c) { return numel(c) * 4; }
};

// What the backward needs from the forward (filled by gdn_block_forward when asked for).
// Memory per token: 2 H K + 2 H + 2 HV V + 3 HV values, plus for the chunked form the state entering
// every chunk (HV V K / chunk_size per token), plus one copy of the entering state.
template <typename T>
struct GdnSaved {
    int64_t num_tokens = 0;
    bool chunked = false;           // which core form produced it (the backward uses the same one)
    int64_t chunk_size = 0;         // of the chunked form
    bool has_state_in = false;      // false: the segment started from zeros
    std::vector<T> q, k;            // (T, H, K) after conv, SiLU and L2 norm
    std::vector<T> rstd_q, rstd_k;  // (T, H) the L2 norms' reciprocal lengths
    std::vector<T> v;               // (T, HV, V) after conv and SiLU
    std::vector<T> g, beta;         // (T, HV) log-decay and write strength
    std::vector<T> o;               // (T, HV, V) core output, before the gated norm
    std::vector<T> norm_rstd;       // (T, HV)
    std::vector<T> chunk_states;    // (NT, HV, V, K) chunked form only
    GdnState<T> state_in;           // copy of the entering state when has_state_in

    size_t bytes() const;
};

// Forward over a segment of num_tokens tokens; out: (T, HV*V) OVERWRITTEN.
// state_in: null = zeros (sequence start). state_out: null = not returned; it may be the same state
// as state_in (updated in place: prefill in pieces, decode). T = 1 always takes the recurrent step
// (decode). saved: null for inference; then intermediates live in a thread-local scratch that is
// reused across calls, so a decode step does not allocate after the first one.
template <typename T>
void gdn_block_forward(T* out, const GdnConfig& cfg, const GdnParams<T>& params, const GdnInputs<T>& in,
                       int64_t num_tokens, const GdnStateView<T>* state_in, const GdnStateView<T>* state_out,
                       GdnSaved<T>* saved);

// Backward of gdn_block_forward with the same cfg, params, inputs and the forward's saved record.
// d_out: (T, HV*V). d_state_out: gradient w.r.t. the state the forward returned (null, or any of its
// pointers null = zero). d_inputs are OVERWRITTEN; d_params ACCUMULATED. d_state_in: null, or any of
// its pointers non-null to receive (OVERWRITE) the gradient w.r.t. the entering state (also when the
// segment started from zeros), for backpropagation across segments.
template <typename T>
void gdn_block_backward(const GdnInputGrads<T>& d_inputs, const GdnParamGrads<T>& d_params,
                        const GdnStateView<T>* d_state_in, const T* d_out, const GdnStateView<T>* d_state_out,
                        const GdnConfig& cfg, const GdnParams<T>& params, const GdnInputs<T>& in,
                        int64_t num_tokens, const GdnSaved<T>& saved);

}  // namespace hydra
