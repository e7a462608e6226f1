// LlamaModel: the weights of a llama-family decoder (Llama, Qwen2, Qwen3, SmolLM2), or of a HydraHead
// hybrid made from one, in one ParamArena under Hugging Face tensor names, with typed per-layer
// views. All linear weights are PyTorch [out, in] row-major; q/k rows are in HF order (NEOX RoPE),
// whatever the source file. The HybridPlan decides each layer's shapes: the FA heads keep
// self_attn.{q,k,v}_proj rows (only their KV groups), the LA heads get linear_attn.* GDN weights, and
// mixed layers get fusion.* scales. The teacher (all-FA plan) has exactly the HF layout.
#pragma once

#include <string>
#include <vector>

#include "core/param_arena.h"
#include "io/ggml_types.h"
#include "model/hybrid_plan.h"
#include "model/model_config.h"

namespace hydra {

// A weight matrix kept in its original ggml block format (rows in HF order) for decode-time GEMV:
// the same values as the f32 copy, at a quarter or less of the bytes to stream per token.
struct QuantizedWeight {
    GgmlType type = GgmlType::F32;
    int64_t rows = 0, cols = 0;      // (N, K) like the f32 [out, in] weight
    std::vector<uint8_t> bytes;      // rows * ggml_row_bytes(type, cols)
    bool empty() const { return bytes.empty(); }
};

// The Gated DeltaNet weights of a layer's n_la LA heads (research/gdn.md §1; K = V = Dh, one q/k
// head per value head). Empty tensors when the layer has no LA head.
struct GdnWeights {
    Tensor wq, wk, wv;                 // (n_la*Dh, C) each
    Tensor bq, bk, bv;                 // (n_la*Dh); empty unless attention_bias
    Tensor wa, wb;                     // (n_la, C): decay and beta logits
    Tensor wg;                         // (n_la*Dh, C): output gate z
    Tensor conv_q, conv_k, conv_v;     // (n_la*Dh, W) depthwise causal convolutions
    Tensor A_log, dt_bias;             // (n_la)
    Tensor o_norm;                     // (n_la, Dh) gated RMSNorm weight
    // Optional quantized copies of the projections (model/weight_quantizer.h), for decode only.
    QuantizedWeight qwq, qwk, qwv, qwa, qwb, qwg;
};

struct LayerWeights {
    int64_t n_fa = 0, n_la = 0;  // FA / LA query heads (n_fa + n_la = H); FA heads come first
    int64_t n_fa_kv = 0;         // KV groups read by the FA heads (the layer's KV cache rows)
    std::vector<int32_t> fa_kv_index;  // (n_fa) KV slot of each FA head, for the attention kernel
    Tensor attn_norm;            // (C)
    Tensor wq, wk, wv, wo;       // (n_fa*Dh, C), (n_fa_kv*Dh, C), (n_fa_kv*Dh, C), (C, H*Dh)
    Tensor bq, bk, bv;           // (n_fa*Dh), (n_fa_kv*Dh), (n_fa_kv*Dh); empty unless attention_bias
    Tensor q_norm, k_norm;       // (Dh); empty unless qk_norm
    GdnWeights la;               // the LA heads
    Tensor fusion_head_scale;    // scale-norm (H, Dh) / la-only (n_la, Dh); see model/fusion.h
    Tensor fusion_fa_scale, fusion_la_scale;  // hymba: (n_fa*Dh), (n_la*Dh)
    Tensor fusion_la_bias;                    // la_bias plans: (n_la, Dh)
    Tensor ffn_norm;             // (C)
    Tensor w_gate, w_up, w_down; // (F, C), (F, C), (C, F)
    // Optional quantized copies of the linear weights (from a quantized GGUF, or model/weight_quantizer.h).
    QuantizedWeight qwq, qwk, qwv, qwo, qw_gate, qw_up, qw_down;
};

class LlamaModel {
public:
    // Declares and allocates zeroed parameters for `config` and `plan` (null: the all-FA teacher).
    explicit LlamaModel(const ModelConfig& config, const HybridPlan* plan = nullptr);

    const ModelConfig& config() const { return config_; }
    const HybridPlan& plan() const { return plan_; }
    ParamArena& params() { return params_; }
    const ParamArena& params() const { return params_; }

    const Tensor& embedding() const { return embed_; }  // (V, C)
    const Tensor& lm_head() const { return lm_head_; }  // (V, C); the embedding when tied
    const Tensor& final_norm() const { return final_norm_; }
    const LayerWeights& layer(int64_t i) const { return layers_[size_t(i)]; }
    const QuantizedWeight& quantized_lm_head() const { return q_lm_head_; }

    // Every linear weight that can take a quantized copy, by HF name (the LM head under the name it is stored
    // as, then each layer's FA, MLP and LA projections; an absent one, e.g. the FA projections of an all-LA
    // layer, has an empty f32 tensor).
    struct LinearSlot {
        std::string name;
        const Tensor* f32;
        QuantizedWeight* copy;
    };
    std::vector<LinearSlot> linear_slots();

    // Attaches the quantized copy of a linear weight by HF name (rows already in HF order). Returns false
    // when `hf_name` is not a linear weight of this model or the copy's shape is not the weight's (a GGUF
    // teacher's full-width matrix offered to a hybrid's narrower one). The copies are for inference: they
    // do not follow later changes of the f32 weights.
    bool attach_quantized(const std::string& hf_name, QuantizedWeight weight);

    // HF names of the parameters, e.g. layer_name(3, "self_attn.q_proj.weight").
    static std::string layer_name(int64_t layer, const std::string& suffix);

private:
    ModelConfig config_;
    HybridPlan plan_;
    ParamArena params_;
    Tensor embed_, lm_head_, final_norm_;
    std::vector<LayerWeights> layers_;
    QuantizedWeight q_lm_head_;
};

}  // namespace hydra
