// The LA heads of one hybrid layer at inference: the Gated DeltaNet input projections (q, k, v, a, b,
// g) from the layer's normed hidden state, then the GDN block (model/gdn_block.h) continuing the
// layer's cached conv and recurrent state. Prompts use the chunked form, single tokens the recurrent
// step; both advance the same state, so prefill in pieces and decode agree with one prefill.
#pragma once

#include <cstdint>

#include "model/gdn_block.h"
#include "model/hybrid_plan.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"

namespace hydra {

// The GdnConfig of a layer's LA heads: one q/k head per value head, K = V = Dh.
GdnConfig gdn_config(const GdnSettings& settings, int64_t n_la, int64_t head_dim);

// out: (T, n_la*Dh) OVERWRITTEN; xn: (T, C) the layer's normed input. `state` is read and advanced.
void gdn_heads_forward(float* out, const float* xn, const LayerWeights& w, const GdnSettings& settings,
                       GdnLayerState& state, int64_t num_tokens, int64_t C, int64_t Dh);

}  // namespace hydra
