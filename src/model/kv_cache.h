// KVCache: the hybrid cache of one sequence, filled by the forward pass. For every layer it holds
// keys and values of the layer's FA KV groups only (all groups for the teacher) and, for the layer's
// LA (Gated DeltaNet) heads, the fp32 recurrent state and the short-convolution history, whose size
// does not grow with the sequence. Positions [0, pos) are valid; a forward over T tokens writes KV rows
// [pos, pos+T), advances the GDN state by T tokens, then advances pos.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/llama_model.h"
#include "model/model_config.h"

namespace hydra {

// The GDN state of one layer's LA heads.
struct GdnLayerState {
    Tensor conv_q, conv_k, conv_v;  // (W-1, n_la*Dh): the last W-1 inputs of each short convolution
    Tensor recurrent;               // (n_la, Dh, Dh): per head M = S^T, V-major, K contiguous (gdn.md §2.1)
    bool empty() const { return recurrent.empty(); }
};

class KVCache {
public:
    // The all-FA teacher layout of `config`.
    KVCache(const ModelConfig& config, int64_t capacity);
    // The layout of `model`'s plan (KV only for FA KV groups, GDN state for LA heads).
    KVCache(const LlamaModel& model, int64_t capacity);

    int64_t capacity() const { return capacity_; }
    int64_t pos() const { return pos_; }
    void advance(int64_t n);
    // Back to an empty sequence (GDN states zeroed).
    void reset();
    // Forget everything after position p (p <= pos). A recurrent state cannot be rewound, so with LA
    // heads only p == pos (no-op) or p == 0 (reset) are possible; anything else is an error.
    void truncate(int64_t p);

    int64_t kv_heads(int64_t layer) const { return kv_heads_[size_t(layer)]; }
    float* k(int64_t layer) const { return k_[size_t(layer)].f32(); }  // (capacity, kv_heads(layer), Dh)
    float* v(int64_t layer) const { return v_[size_t(layer)].f32(); }  // (capacity, kv_heads(layer), Dh)
    GdnLayerState& gdn(int64_t layer) { return gdn_[size_t(layer)]; }
    bool has_recurrent_state() const;

    size_t bytes_per_token() const;  // KV bytes added per token (fp32)
    size_t state_bytes() const;      // constant GDN bytes (fp32)

private:
    void init(const ModelConfig& config, const HybridPlan& plan, int64_t capacity);

    int64_t capacity_ = 0;
    int64_t pos_ = 0;
    int64_t head_dim_ = 0;
    std::vector<int64_t> kv_heads_;
    std::vector<Tensor> k_, v_;
    std::vector<GdnLayerState> gdn_;
};

}  // namespace hydra
