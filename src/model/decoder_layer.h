// The one CPU decoder layer of a teacher or HydraHead hybrid, forward and backward, templated on float
// (inference, training) and double (gradient checks). Per layer:
//   x -> RMSNorm -> FA heads: q,k,v (+bias) -> [q/k RMSNorm] -> RoPE -> causal GQA (KV-group map)
//                   LA heads: q,k,v,a,b,g projections -> GdnBlock (model/gdn_block.h)
//     -> [fusion] -> o_proj -> +x -> RMSNorm -> gate,up -> silu(gate)*up -> down -> +x
// The teacher is the all-FA plan: the same code with n_la = 0. Every CPU caller runs this layer:
// inference with the hybrid cache (model/llama_forward.h), the training step and stage-1 alignment
// (train/), and head scoring's forwards and backwards (interp/). What differs between them is the mode
// (LayerRun): rows as B sequences of S tokens; a cache to append to and attend over; independent
// single-token rows over a shared prefix; activations kept for the backward; taps; quantized weights.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "model/gdn_block.h"
#include "model/hybrid_plan.h"
#include "model/layer_params.h"
#include "model/model_config.h"
#include "model/taps.h"

namespace hydra {

// The layer's side of named taps (model/taps.h: same point names, same order): `fire` may overwrite the
// tensor in place. attn_probs is only computed when `wants` asks for it.
template <typename T>
class LayerTapSink {
  public:
    virtual ~LayerTapSink() = default;
    virtual bool wants(std::string_view point) const = 0;
    virtual void fire(std::string_view point, T* data, const Shape& shape) const = 0;
};

// A model's Taps seen from layer `layer` (float views of the layer's buffers).
class LayerTaps final : public LayerTapSink<float> {
  public:
    LayerTaps(const Taps& taps, int layer) : taps_(taps), layer_(layer) {}
    bool wants(std::string_view point) const override { return taps_.wants(point, layer_); }
    void fire(std::string_view point, float* data, const Shape& shape) const override {
        Tensor view = Tensor::view(data, shape, DType::F32);
        taps_.fire(point, layer_, view);
    }

  private:
    const Taps& taps_;
    int layer_;
};

// One layer's slice of a sequence's hybrid cache (model/kv_cache.h).
template <typename T>
struct LayerCache {
    T* k = nullptr;  // (capacity, n_kv, Dh): rows [0, pos0) valid; the new rows are written at pos0
    T* v = nullptr;
    GdnStateView<T> gdn;  // LA heads: conv windows and recurrent state, read and advanced in place
};

// How the layer runs. Rows: N = batch * seq_len, row-major (sequence, token).
template <typename T>
struct LayerRun {
    int64_t batch = 1, seq_len = 0;  // B independent sequences of S tokens
    int64_t pos0 = 0;                // absolute position of each sequence's first token
    // Hybrid cache of one sequence (batch == 1): K/V appended at pos0, attention over [0, pos0 + S), GDN
    // state continued. Null: the sequences start at position 0 and attend to their own rows only.
    const LayerCache<T>* cache = nullptr;
    // Shared prefix (seq_len == 1, FA-only layer): the B rows are independent copies of one sequence at
    // position pos0, each attending to these keys/values of [0, pos0) (stride n_kv*Dh, read-only) plus
    // its own key/value (model/prefix_attention.h).
    const T* prefix_k = nullptr;
    const T* prefix_v = nullptr;
    bool save = false;                          // keep what decoder_layer_backward needs
    bool recompute_attention = false;           // save without the (B, S, n_fa, S) attention weights
    const LayerQuantized* quantized = nullptr;  // single-row steps use these copies (float only)
    // With `quantized`: the activations of single-row steps quantized to 8 bits, integer dot products
    // (ops/cpu/quant_gemv_q8.h); false keeps them f32 (ops/cpu/quant_gemv.h, the reference).
    bool q8_activations = false;
    const LayerTapSink<T>* taps = nullptr;
};

// The layer's intermediates (grow-only buffers reused between calls; each call overwrites what it
// uses). After a forward they hold that call's values, whether or not it saved for the backward.
template <typename T>
struct LayerActs {
    std::vector<T> x_in;            // (N, C) layer input (saved only)
    std::vector<T> xn1, rstd1;      // (N, C), (N)
    std::vector<T> q_pre, k_pre;    // (N, n_fa*Dh), (N, n_kv*Dh) before q/k norm (qk_norm only)
    std::vector<T> rstd_q, rstd_k;  // (N*n_fa), (N*n_kv) (qk_norm only)
    std::vector<T> q, k, v;         // FA after RoPE: (N, n_fa, Dh), (N, n_kv, Dh), (N, n_kv, Dh)
    // attention weights: (B, S, n_fa, pos0+S) when saved or tapped; shared prefix: (n_kv, N*G, pos0+1)
    std::vector<T> probs;
    std::vector<T> fa_out;                              // (N, n_fa*Dh) scratch in mixed layers
    std::vector<T> la_q, la_k, la_v, la_a, la_b, la_z;  // LA projections (N, n_la*Dh) / (N, n_la)
    std::vector<T> la_out;                              // (N, n_la*Dh)
    std::vector<GdnSaved<T>> gdn;                       // per sequence (saved only)
    std::vector<T> heads;          // (N, H, Dh) per-head mixer outputs (FA first), after the head_out tap
    std::vector<T> fused;          // (N, H, Dh) after the fusion (fusion layers only)
    std::vector<T> proj;           // (N, C) o_proj / down_proj output
    std::vector<T> x_mid;          // (N, C) residual after the mixer
    std::vector<T> xn2, rstd2;     // (N, C), (N)
    std::vector<T> gate, up, act;  // (N, F)
};

// Values per token that a training forward (run.save) keeps in one layer's LayerActs, GDN saved tensors
// included, for rows of seq_len tokens: what the backward needs until it reaches this layer. Kept beside
// LayerActs so a new buffer is counted where it is declared (train/cpu_step_memory sums it over layers).
int64_t layer_saved_values_per_token(const ModelConfig& cfg, const HybridPlan& plan, int64_t layer,
                                     int64_t seq_len, bool recompute_attention);

// At least n elements (grow-only).
template <typename T>
T* layer_buffer(std::vector<T>& b, int64_t n) {
    if (b.size() < size_t(n)) b.resize(size_t(n));
    return b.data();
}

// The whole layer: x_out (N, C) from x_in (N, C) (may alias).
template <typename T>
void decoder_layer_forward(T* x_out, const T* x_in, const ModelConfig& cfg, const HybridPlan& plan,
                           const LayerParams<const T>& w, const LayerRun<T>& run, LayerActs<T>& acts);

// Its two halves, for callers that edit or reuse head outputs between them (the patching sweeps):
// the mixer fills acts.heads (N, H, Dh) (taps attn_norm .. head_out), the block runs the rest from
// acts.heads (taps fused_out .. resid_out). A block may run on more rows than its mixer did.
template <typename T>
void decoder_layer_mixer(const T* x_in, const ModelConfig& cfg, const HybridPlan& plan,
                         const LayerParams<const T>& w, const LayerRun<T>& run, LayerActs<T>& acts);
template <typename T>
void decoder_layer_block(T* x_out, const T* x_in, const ModelConfig& cfg, const HybridPlan& plan,
                         const LayerParams<const T>& w, const LayerRun<T>& run, LayerActs<T>& acts);

// Backward of a saving forward with the same run (no cache). dx (N, C): on entry the gradient w.r.t. the
// layer output, on exit w.r.t. its input. Parameter gradients ACCUMULATED into g (null pointers skip a
// tensor: frozen or not wanted). d_heads: null, or (N, H, Dh) OVERWRITTEN with the gradient w.r.t. the
// head outputs (before the fusion). Consumes acts (some buffers are reused as gradient scratch).
template <typename T>
void decoder_layer_backward(T* dx, const ModelConfig& cfg, const HybridPlan& plan,
                            const LayerParams<const T>& w, const LayerParams<T>& g, const LayerRun<T>& run,
                            LayerActs<T>& acts, T* d_heads = nullptr);

// The GdnConfig of a layer's n_la LA heads: one q/k head per value head, K = V = Dh.
GdnConfig gdn_config(const GdnSettings& settings, int64_t n_la, int64_t head_dim);

}  // namespace hydra
