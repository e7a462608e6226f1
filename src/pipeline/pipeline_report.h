// The pipeline's report: OUT/report.md with the headline table (per model: plan, KV and state bytes,
// held-out perplexity, KL and agreement with the teacher, RULER-style score per length, the held-out
// task group's mean; every number with its 95% bootstrap interval), per-task scores, loss curves per stage
// (one PNG per stage, one line per variant), wall time and tokens per step, and the exact configuration.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/eval_runner.h"
#include "eval/results_io.h"
#include "pipeline/pipeline_config.h"

namespace hydra {

struct ReportInputs {
    const PipelineConfig* config = nullptr;
    std::string out_dir;
    std::string teacher_path;
    std::vector<std::pair<std::string, std::string>> models;  // (name, path), teacher first
    const std::vector<ModelEvalResult>* results = nullptr;    // same order as models
    nlohmann::json
        agreement;  // name -> heldout_metrics_json (kl, top1_agreement, ppl, ... with *_ci, tokens)
    nlohmann::json timings;                                  // step -> {seconds, tokens}
    const EvalRunInfo* info = nullptr;                       // bootstrap settings and task groups (optional)
};

struct ReportOutput {
    std::string path;   // report.md
    std::string table;  // the headline table (markdown)
};

ReportOutput write_pipeline_report(const ReportInputs& in);

}  // namespace hydra
