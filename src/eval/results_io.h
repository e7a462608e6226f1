// Eval results on disk: results.json (settings, per model: task x length scores, per-length and
// overall means, each with its 95% bootstrap interval, task groups such as the held-out tasks, every
// sample's output and timing), results.csv (one row per model x task x length, with the interval) and
// a score-vs-length PNG comparing the models with error bars. All writes are atomic.
//
// Interval fields (added next to the numbers they qualify, so older readers keep working):
//   "overall_ci": {lo, hi}, "per_length_ci": {len: {lo, hi}}, "scores_ci": {task: {len: {lo, hi}}},
//   "groups": {name: {tasks, per_length, per_length_ci, overall, overall_ci}}, and at the top
//   "bootstrap": {method, resamples, seed, level}.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/eval_runner.h"

namespace hydra {

struct EvalRunInfo {
    std::string suite;
    EvalSettings settings;
    std::string prompt_format, prompt_style;
    std::string device = "cpu";  // where the models ran (hydra eval --device)
    BootstrapOptions bootstrap;
    // Named task groups reported next to the overall mean, e.g. {"held-out tasks", {"vt", ...}}.
    std::vector<std::pair<std::string, std::vector<std::string>>> groups;
    std::string tasks_file;  // --tasks-file: the JSONL the samples came from ("" for built-in tasks)
};

// One model's entry of results.json (also the pipeline's eval/<model>.json "results").
nlohmann::json model_result_json(const ModelEvalResult& r, const EvalRunInfo& info);
nlohmann::json results_to_json(const EvalRunInfo& info, const std::vector<ModelEvalResult>& results);
void write_results_json(const std::string& path, const EvalRunInfo& info,
                        const std::vector<ModelEvalResult>& results);
// Reads a model entry back: with samples, every mean and interval is recomputed from them (so results
// written before intervals existed gain them); without, the stored numbers are kept (intervals NaN
// where absent). Accepts the pipeline's older eval/<model>.json layout (task_scores, length_scores)
// too. Throws hydra::Error naming `where` for a malformed entry.
ModelEvalResult model_result_from_json(const nlohmann::json& m, const std::string& where,
                                       const BootstrapOptions& boot = {});
// Columns: model,task,length,score,ci_lo,ci_hi,samples,mean_prefill_s,mean_decode_s (then task
// "overall" rows per length).
std::string results_to_csv(const std::vector<ModelEvalResult>& results);
void write_results_csv(const std::string& path, const std::vector<ModelEvalResult>& results);
// Mean score over tasks vs length, one series per model, error bars = the 95% intervals.
void write_score_plot(const std::string& path, const std::vector<ModelEvalResult>& results);
// A report's score figure: draws OUT_DIR/score_vs_length.png and returns the markdown that shows it, or,
// when it cannot be drawn (no PNG driver on the GPU machine, ...), a line that says why and how to draw it
// later, so a report never links a figure that is not there.
std::string score_plot_markdown(const std::string& out_dir, const std::vector<ModelEvalResult>& results);
// The end-of-run table (task x length per model, "57.0 [49.5, 64.0]" cells, then the mean row and the
// groups' rows).
std::string results_table(const ModelEvalResult& r, const EvalRunInfo& info = {});
// One task's cells of a markdown row, " 57.0 [49.5, 64.0] |" per length ("n/a" for a length not run).
std::string task_markdown_cells(const ModelEvalResult& r, const std::string& task,
                                const std::vector<int64_t>& lengths);

}  // namespace hydra
