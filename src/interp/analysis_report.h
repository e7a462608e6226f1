// What `hydra analyze` writes: analysis.json and its figures.
//   analysis.json {"format": "hydra-analysis", "version": 1,
//     "model": {name, source, num_layers, hidden_size, num_heads, hybrid, la_heads},
//     "data": {kind: "text" | "shards", path, tokens, rows, windows, window, skip_first, bos_id},
//     "layer_cka": {"estimator", "debiased": [L][L], "biased": [L][L], "adjacent": [L-1] (debiased, l vs
//     l+1),
//                   "block_threshold", "blocks": [[first, last], ...],
//                   "residual_norm": {"position0": [L], "counted": [L], "counted_max": [L]} (L2 norms of the
//                                    layer outputs: means at position 0 and at the counted positions, their
//                                    max),
//                   "accumulator_bytes", "seconds"},
//     "head_scores": {source, "layers": [{layer, min, median, max, mean, cv, top_share, top_head}],
//                     "within_layer_share"}                                   (with --scores)
//     "teacher": {source, "cka": [L], "cka_biased": [L], "rel_mse": [L],
//                 "furthest": [layers by CKA, lowest first, at most 5]}}     (with --teacher)
//   NaN (undefined: a constant representation, an all-zero layer of scores) is written as null.
// Figures (PLplot, report/): layer_cka.png (L x L heatmap), heads.png (layers x heads, the top eighth
// outlined), head_spread.png (min / median / max per layer), head_concentration.png (CV, top-head share
// and the equal-heads share 1/H), teacher_distance.png (1 - CKA and relative MSE per layer).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "interp/head_spread.h"
#include "interp/layer_similarity.h"
#include "model/model_config.h"
#include "model/plan_builders.h"

namespace hydra {

struct AnalysisReport {
    ModelConfig config;
    std::string model_source;
    int64_t la_heads = 0;  // LA heads over all layers (0: a teacher)
    std::string data_kind, data_path;
    int64_t window = 0, skip_first = 0;
    int32_t bos_id = -1;
    LayerSimilarity similarity;
    double block_threshold = 0.9;
    std::vector<std::pair<int64_t, int64_t>> blocks;  // [first, last] layers
    bool has_scores = false;
    std::string scores_source;
    HeadScoreTable scores;
    HeadSpread spread;
    std::string teacher_source;
};

// Consecutive layers grouped greedily: a layer joins the current block when its debiased CKA with every
// layer already in the block is at least `threshold`; otherwise it starts the next block.
std::vector<std::pair<int64_t, int64_t>> similarity_blocks(const std::vector<std::vector<double>>& cka,
                                                           double threshold);

nlohmann::json analysis_json(const AnalysisReport& report);

// Writes analysis.json and the figures into `dir` (which must exist); returns the paths written. A figure
// PLplot cannot draw (its PNG device missing) is skipped with a warning on stderr; the JSON always lands.
std::vector<std::string> write_analysis(const std::string& dir, const AnalysisReport& report);

}  // namespace hydra
