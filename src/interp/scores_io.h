// scores.json and the heads heatmap: what `hydra score-heads` writes. The file is the contract with
// `hydra convert --select scores` (model/plan_builders.h load_head_scores reads "model" and
// "aggregate"); everything else documents how the scores were made:
//   {"format": "hydra-head-scores", "version": 1,
//    "model": {"name", "source", "num_layers", "num_heads", "num_kv_heads", "hidden_size", "head_dim"},
//    "settings": {...request, clip, lambda, min_gap...},
//    "methods": {"<method>": {"weight", "heads": [L][H],
//                             "tasks": {"<task>": {"count", "skipped", "score": [L][H],
//                                                  "denoising": [L][H], "noising": [L][H]}}}},
//    "receivers": {"<task>": [[layer, head], ...]},          (path patching)
//    "pairs": [{task, corruption, length, index, answer_token, distractor_token, ld_clean,
//               ld_corrupted, used, seconds: {...}}],
//    "trials": [{task, length, index, output, correct}],      (retrieval)
//    "timing": {"<stage>": seconds}, "cpu_timing": {"<stage>": CPU seconds, all threads},
//    "aggregate": {"formula", "heads": [L][H], "kv_groups": [L][Hkv]}}
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "interp/score_aggregation.h"
#include "model/model_config.h"

namespace hydra {

struct PairRecord {
    std::string task, corruption;
    int64_t length = 0, index = 0;
    int32_t answer_token = -1, distractor_token = -1;
    double ld_clean = 0, ld_corrupted = 0;
    int64_t shared_prefix = 0;              // positions the corrupted run reused from the clean run
    bool used = false;                      // gap >= min_gap
    std::map<std::string, double> seconds;  // forward, activation, attribution, path
};

struct TrialRecord {
    std::string task;
    int64_t length = 0, index = 0;
    std::string output;
    bool correct = false;
    double seconds = 0;
};

struct ScoreReport {
    std::string model_source;
    ScoreSet scores;
    nlohmann::json settings = nlohmann::json::object();
    std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> receivers;  // per task
    std::vector<PairRecord> pairs;
    std::vector<TrialRecord> trials;
    std::map<std::string, double> seconds;      // wall time per stage
    std::map<std::string, double> cpu_seconds;  // process CPU time per stage (all threads)
};

// (L*H) row-major -> [L][H] nested arrays.
nlohmann::json score_table(const std::vector<double>& values, int64_t rows, int64_t cols);
nlohmann::json report_to_json(const ModelConfig& config, const ScoreReport& report);
// Atomic write (temporary file + rename); hydra::Error naming the path on failure.
void write_scores_json(const std::string& path, const ModelConfig& config, const ScoreReport& report);

// Layers x heads heatmap of `heads` (L*H); the `outline_top` best heads are outlined (0 = none).
void write_scores_heatmap(const std::string& path, const std::vector<double>& heads, int64_t layers,
                          int64_t heads_per_layer, const std::string& title, const std::string& value_label,
                          int64_t outline_top);

}  // namespace hydra
