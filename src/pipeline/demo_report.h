// `hydra demo`'s report (OUT/report.md): the six things the demo shows (head scores, the causal
// ablation check, the 7:1 conversion and its KV cache, the held-out KL before and after a short
// recovery, the cost of a long context on this CPU, the full-budget GPU table), with the wall time of every
// step and the settings.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "pipeline/pipeline_config.h"

namespace hydra {

// The newest `hydra pipeline` report of a GPU run under results_dir (a report.md next to a
// pipeline_config.json whose device is cuda), by the report's date line; nullopt when there is none.
struct GpuReportRef {
    std::string path;     // .../report.md
    std::string date;     // "2026-11-29 23:46 UTC"
    std::string results;  // the report's "## Results" table (markdown)
};
std::optional<GpuReportRef> latest_gpu_report(const std::string& results_dir);

struct DemoReportInputs {
    const PipelineConfig* config = nullptr;
    std::string out_dir;
    nlohmann::json scores;      // {method, tasks, length, pairs, pairs_used, top: [{layer, head, score}]}
    nlohmann::json ablation;    // pipeline_steps.h ablation_check
    nlohmann::json conversion;  // {plan, fa_kv_groups, kv_groups, kv_bytes_teacher, kv_bytes_hybrid, ...}
    nlohmann::json agreement;   // converted / align / distill -> {tokens, top1_agreement, kl, ppl}
    nlohmann::json stages;      // align / distill -> {steps, tokens, final_loss}
    nlohmann::json cost;        // {context, decode_tokens, teacher / hybrid: eval/decode_cost.h's figures}
    nlohmann::json timings;     // step -> {seconds}
    std::optional<GpuReportRef> gpu_report;
};

// Writes OUT/report.md; returns its path.
std::string write_demo_report(const DemoReportInputs& in);

}  // namespace hydra
