// Plan builders: turn a user's request ("7:1 LA:FA, chosen by scores / at random / uniformly per
// layer / layer-wise / all LA") into a validated HybridPlan. A ratio a:b counts LA:FA heads over the
// whole model, as in the paper; with kv granularity the unit is the KV group, so a group's query heads
// are always FA or LA together and the KV cache really shrinks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/hybrid_plan.h"
#include "model/model_config.h"

namespace hydra {

struct Ratio {
    int64_t la = 7, fa = 1;
    double fa_fraction() const { return double(fa) / double(la + fa); }
};
// "7:1" -> {7, 1}. Both parts are non-negative integers and not both zero; throws naming `where`.
Ratio parse_ratio(const std::string& text, const std::string& where);
// "3,7,11" -> {3, 7, 11}; throws naming `where` on anything else.
std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& where);

// Per-head importance scores (higher = keep as FA), as written by `hydra score-heads`.
struct HeadScoreTable {
    std::vector<std::vector<double>> heads;      // [layer][query head]
    std::vector<std::vector<double>> kv_groups;  // [layer][KV group]; max over the group when absent
    std::string source;
};
// Reads the "aggregate" scores of a scores.json (or, with `method`, that one method's table, e.g.
// "retrieval", KV groups as the max over their query heads) and checks that it was made for a model of
// `config`'s shape (layers, heads, KV heads); a file for another model is an error naming both, a method
// the file does not hold an error listing those it does.
HeadScoreTable load_head_scores(const std::string& path, const ModelConfig& config,
                                const std::string& method = "");

struct PlanRequest {
    std::string select = "random";  // scores | random | uniform | layerwise | all-la | all-fa
    std::optional<Ratio> ratio;     // required except for all-la, all-fa and layerwise with layers
    std::string granularity = "kv"; // kv | head
    FusionKind fusion = FusionKind::ScaleNorm;
    bool la_bias = false;  // HybridPlan::la_bias (refused with fusion none and the sliding-window baseline)
    uint64_t seed = 1;
    std::vector<int64_t> layers;    // layerwise: the FA layers (empty: every k-th layer from the ratio)
    const HeadScoreTable* scores = nullptr;  // select=scores; uniform uses it within layers when given
    GdnSettings gdn;
    // > 0: the head-level sliding-window baseline (DuoAttention's design): the heads the selection would
    // turn into GDN stay softmax attention over their last `window` positions plus the first `sinks`.
    int64_t window = 0, sinks = 0;
};

// Builds and validates the plan; errors say what cannot be met and what to change.
HybridPlan build_plan(const ModelConfig& config, const PlanRequest& request);

}  // namespace hydra
