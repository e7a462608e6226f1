// Eval results on disk: results.json (settings, per model: task x length scores, per-length and
// overall means, every sample's output and timing), results.csv (one row per model x task x length)
// and a score-vs-length PNG comparing the models. All writes are atomic.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/eval_runner.h"

namespace hydra {

struct EvalRunInfo {
    std::string suite;
    EvalSettings settings;
    std::string prompt_format, prompt_style;
    std::string device = "cpu";  // where the models ran (hydra eval --device)
};

nlohmann::json results_to_json(const EvalRunInfo& info, const std::vector<ModelEvalResult>& results);
void write_results_json(const std::string& path, const EvalRunInfo& info,
                        const std::vector<ModelEvalResult>& results);
// Columns: model,task,length,score,samples,mean_prefill_s,mean_decode_s (then task "overall" rows).
std::string results_to_csv(const std::vector<ModelEvalResult>& results);
void write_results_csv(const std::string& path, const std::vector<ModelEvalResult>& results);
// Mean score over tasks vs length, one series per model.
void write_score_plot(const std::string& path, const std::vector<ModelEvalResult>& results);
// The end-of-run table (task x length per model, then the mean row).
std::string results_table(const ModelEvalResult& r);

}  // namespace hydra
