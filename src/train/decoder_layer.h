// One decoder layer of a teacher or HydraHead hybrid, forward and backward for training, on B
// sequences of S tokens: x -> RMSNorm -> [FA heads: q,k,v, q/k norm, RoPE, causal GQA (KV-group map)]
// + [LA heads: q,k,v,a,b,g projections, GdnBlock] -> fusion -> o_proj -> +x -> RMSNorm -> SwiGLU MLP
// -> +x. Parameters and gradients are flat buffers with the layout of a LlamaModel's ParamArena, so
// the optimizer and checkpoints see one buffer each. Used by the whole-model training step and by
// stage-1 alignment (teacher-forced layers). Templated on float (training) and double (checks).
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "core/param_arena.h"
#include "model/gdn_block.h"
#include "model/hybrid_plan.h"
#include "model/model_config.h"

namespace hydra {

// Pointers to one layer's parameters (or gradients) inside a flat buffer; null where the plan has
// no such tensor (or, for gradients, where the caller passes no buffer).
template <typename P>
struct LayerParams {
    int64_t n_fa = 0, n_la = 0, n_kv = 0;  // FA heads, LA heads, FA KV groups
    std::vector<int32_t> kv_index;         // (n_fa) KV slot of each FA head
    bool uniform_groups = true;            // kv_index is h / (n_fa / n_kv)
    P *attn_norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    P *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    // LA heads (GDN), see LlamaModel's linear_attn.* tensors
    P *la_wq = nullptr, *la_wk = nullptr, *la_wv = nullptr, *la_bq = nullptr, *la_bk = nullptr, *la_bv = nullptr;
    P *la_wa = nullptr, *la_wb = nullptr, *la_wg = nullptr;
    P *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr, *A_log = nullptr, *dt_bias = nullptr, *o_norm = nullptr;
    // fusion
    P *fusion_head_scale = nullptr, *fusion_fa_scale = nullptr, *fusion_la_scale = nullptr;
    // MLP
    P *ffn_norm = nullptr, *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
};

// base == null gives all-null pointers (e.g. no gradient buffer).
template <typename P>
LayerParams<P> layer_params(const ModelConfig& cfg, const HybridPlan& plan, const ParamArena& layout, P* base,
                            int64_t layer);

// Nulls the pointers of `p` (into buffer `base`) whose arena offset is in `frozen_offsets`, so the
// backward neither computes nor writes gradients of frozen tensors.
template <typename P>
void drop_frozen(LayerParams<P>& p, const P* base, const std::unordered_set<int64_t>& frozen_offsets);

// What one layer keeps from its forward for the backward. N = B * S.
template <typename T>
struct LayerActivations {
    std::vector<T> x_in;            // (N, C) layer input
    std::vector<T> rstd1;           // (N)
    std::vector<T> q_pre, k_pre;    // (N, n_fa*Dh), (N, n_kv*Dh) before q/k norm (qk_norm only)
    std::vector<T> rstd_q, rstd_k;  // qk_norm only
    std::vector<T> q, k, v;         // FA after RoPE: (N, n_fa, Dh), (N, n_kv, Dh), (N, n_kv, Dh)
    std::vector<T> probs;           // (B, S, n_fa, S) unless recomputed
    std::vector<T> la_q, la_k, la_v, la_a, la_b, la_z;  // LA projections (N, n_la*Dh) / (N, n_la)
    std::vector<GdnSaved<T>> gdn;   // per sequence
    std::vector<T> heads;           // (N, H, Dh) mixer head outputs before the fusion
    std::vector<T> fused;           // (N, H, Dh) after the fusion (fusion layers only)
    std::vector<T> x_mid;           // (N, C)
    std::vector<T> rstd2;           // (N)
    std::vector<T> gate, up, act;   // (N, F)
};

struct LayerShape {
    int64_t batch = 0, seq_len = 0;  // B, S
    bool recompute_attention = false;
};

// x: (N, C) in: the layer input; out: the layer output (may alias x). acts: filled for the backward
// (null for a forward only).
template <typename T>
void decoder_layer_forward(T* x_out, const T* x_in, const ModelConfig& cfg, const HybridPlan& plan,
                           const LayerParams<const T>& w, const LayerShape& shape, LayerActivations<T>* acts);

// dx: (N, C) on entry the gradient w.r.t. the layer output, on exit w.r.t. its input (in place).
// Parameter gradients are ACCUMULATED into g (null pointers skip a tensor: frozen).
template <typename T>
void decoder_layer_backward(T* dx, const ModelConfig& cfg, const HybridPlan& plan, const LayerParams<const T>& w,
                            const LayerParams<T>& g, const LayerShape& shape, LayerActivations<T>& acts);

}  // namespace hydra
