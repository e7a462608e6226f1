// HybridPlan: the single description of a head-level hybrid architecture. For every layer it says
// which of the teacher's query heads stay full softmax attention (FA) and which became Gated DeltaNet
// (LA) heads, plus the GDN settings and the fusion kind. The FA teacher is the plan with every head
// FA; a layer-wise hybrid is a plan whose layers are all-FA or all-LA; pure GDN has no FA head.
//
// Head order inside a converted layer: the FA heads first (sorted by KV group, then head), then the LA
// heads (ascending). `fa_heads`/`la_heads` keep the teacher's original head indices so scores, taps
// and reports can always be mapped back. FA heads read only the KV groups in `fa_kv_groups()`, which
// is all the KV cache of the layer holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/model_config.h"

namespace hydra {

// How the FA and LA head outputs of a mixed layer are put on one scale before o_proj.
enum class FusionKind {
    ScaleNorm,  // every head: RMSNorm over its channels times a learnable per-channel scale (init: teacher RMS)
    None,       // plain concatenation
    Hymba,      // per group (FA heads, LA heads): RMSNorm over the group's width times a learnable vector, averaged
    LaOnly,     // only LA heads normalised (FA heads exactly the teacher's at init)
};
const char* fusion_name(FusionKind kind);
// Parses scale-norm | none | hymba | la-only; throws naming `where` and the accepted values.
FusionKind parse_fusion(const std::string& text, const std::string& where);

// Settings of the Gated DeltaNet heads (research/gdn.md §1).
struct GdnSettings {
    int64_t conv_size = 4;          // causal depthwise short convolution width
    bool allow_neg_eigval = false;  // beta = 2 * sigmoid(b) instead of sigmoid(b)
    int64_t chunk_size = 64;        // chunked form used for prompts and training
    float norm_eps = 1e-5f;         // gated output RMSNorm epsilon (set to the model's rms_norm_eps)
};

struct LayerPlan {
    std::vector<int32_t> fa_heads;  // teacher query-head indices kept FA, in the layer's head order
    std::vector<int32_t> la_heads;  // teacher query-head indices turned into GDN heads, ascending
    // Per FA head (fa_heads' order): 0 = full causal attention, W > 0 = sliding-window attention over the
    // last W positions plus the plan's window_sinks first ones (the head-level sliding-window baseline,
    // DuoAttention's streaming heads). Empty: every FA head full.
    std::vector<int32_t> fa_window;

    int64_t num_fa() const { return int64_t(fa_heads.size()); }
    int64_t num_la() const { return int64_t(la_heads.size()); }
    bool mixed() const { return !fa_heads.empty() && !la_heads.empty(); }
};

struct HybridPlan {
    std::vector<LayerPlan> layers;
    std::string granularity = "kv";  // kv: whole KV groups are FA or LA; head: single query heads
    FusionKind fusion = FusionKind::ScaleNorm;
    // The fusion adds a learnable offset to each LA head's output (fusion.la_bias, (n_la, Dh) per mixed
    // layer), set at conversion to the teacher head's mean output: a GDN head starts from what its softmax
    // head contributes on average instead of from nothing (model/fusion.h).
    bool la_bias = false;
    GdnSettings gdn;
    std::string selection = "teacher";  // how the FA heads were chosen (provenance for reports)
    int64_t window_sinks = 0;           // first positions every sliding-window head also attends to

    // The teacher: every head FA, in the original order.
    static HybridPlan all_fa(const ModelConfig& config);

    bool is_all_fa() const;  // every head full causal attention: no LA head, no window
    // Some FA head attends through a sliding window (LayerPlan::fa_window).
    bool has_windows() const;
    // The layer's per-FA-head windows (fa_heads' order, 0 = full), zeros when the layer has none.
    std::vector<int32_t> fa_windows(int64_t layer) const;
    int64_t total_fa_heads() const;
    int64_t total_la_heads() const;
    // Distinct teacher KV groups read by the layer's FA heads, ascending (the KV cache's rows).
    std::vector<int32_t> fa_kv_groups(const ModelConfig& config, int64_t layer) const;
    // For each FA head (layer order) the index of its KV group inside fa_kv_groups(layer).
    std::vector<int32_t> fa_kv_index(const ModelConfig& config, int64_t layer) const;
    int64_t total_fa_kv_groups(const ModelConfig& config) const;

    // Cache sizes for one sequence. KV: keys+values of the FA KV groups per token; state: the GDN
    // recurrent state (Dh x Dh per LA head) plus the short-convolution history (conv_size-1 inputs of
    // q, k and v), independent of the sequence length. `bytes_per_value` is 4 (fp32) or 2 (bf16);
    // the recurrent state is always fp32.
    int64_t kv_bytes_per_token(const ModelConfig& config, int64_t bytes_per_value) const;
    int64_t state_bytes(const ModelConfig& config) const;

    // Checks the plan against `config`: one entry per layer, every head exactly once, FA heads sorted
    // by KV group, whole groups under kv granularity. Throws hydra::Error naming `source`.
    void validate(const ModelConfig& config, const std::string& source) const;

    nlohmann::json to_json() const;
    // Parses (and validates against `config`) the "plan" object written by to_json.
    static HybridPlan from_json(const nlohmann::json& j, const ModelConfig& config, const std::string& source);

    // "7.18:1 LA:FA heads (33 FA / 237 LA)"; with windows "33 full + 237 sliding-window heads (window
    // 1024, 4 sinks)".
    std::string ratio_summary() const;
};

}  // namespace hydra
