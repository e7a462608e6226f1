// LayerParams<P>: pointers to one decoder layer's parameters (or gradients) of a teacher or hybrid,
// null where the plan has no such tensor (or, for gradients, where the caller passes no buffer /
// the tensor is frozen). The one decoder layer (model/decoder_layer.h) reads its weights through this,
// whether they live in a LlamaModel (inference), a flat training buffer with the arena's layout
// (training, float or double) or a double copy of the arena (finite-difference checks).
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "core/param_arena.h"
#include "model/hybrid_plan.h"
#include "model/llama_model.h"
#include "model/model_config.h"

namespace hydra {

template <typename P>
struct LayerParams {
    int64_t n_fa = 0, n_la = 0, n_kv = 0;  // FA heads, LA heads, FA KV groups
    std::vector<int32_t> kv_index;         // (n_fa) KV slot of each FA head
    bool uniform_groups = true;            // kv_index is h / (n_fa / n_kv): the attention needs no map
    std::vector<int32_t> fa_window;        // (n_fa) sliding window per FA head (0 = full); empty: none
    int64_t window_sinks = 0;              // first keys every windowed head also attends to
    P *attn_norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    P *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    // LA heads (GDN), see LlamaModel's linear_attn.* tensors
    P *la_wq = nullptr, *la_wk = nullptr, *la_wv = nullptr, *la_bq = nullptr, *la_bk = nullptr,
      *la_bv = nullptr;
    P *la_wa = nullptr, *la_wb = nullptr, *la_wg = nullptr;
    P *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr, *A_log = nullptr, *dt_bias = nullptr,
      *o_norm = nullptr;
    // fusion
    P *fusion_head_scale = nullptr, *fusion_fa_scale = nullptr, *fusion_la_scale = nullptr,
      *fusion_la_bias = nullptr;
    // MLP
    P *ffn_norm = nullptr, *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
};

// The quantized copies of a layer's linear weights (inference only; null where there is none).
struct LayerQuantized {
    const QuantizedWeight *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    const QuantizedWeight *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
    // the LA heads' projections
    const QuantizedWeight *la_wq = nullptr, *la_wk = nullptr, *la_wv = nullptr, *la_wa = nullptr,
                          *la_wb = nullptr, *la_wg = nullptr;
};

// Pointers into a flat buffer `base` with `layout`'s offsets; base == null gives all-null pointers
// (e.g. no gradient buffer) with the head counts filled.
template <typename P>
LayerParams<P> layer_params(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout, P* base,
                            int64_t layer);

// A LlamaModel's own f32 weights of layer `layer` (views, no name lookups: cheap enough per decode step).
LayerParams<const float> layer_params(const LlamaModel& model, int64_t layer);
LayerQuantized layer_quantized(const LlamaModel& model, int64_t layer);

// Nulls the pointers of `p` (into buffer `base`) whose arena offset is in `frozen_offsets`, so the
// backward neither computes nor writes gradients of frozen tensors.
template <typename P>
void drop_frozen(LayerParams<P>& p, const P* base, const std::unordered_set<int64_t>& frozen_offsets);

}  // namespace hydra
