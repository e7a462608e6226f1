// One self-contained record per evaluated model of a pipeline run (OUT/results/<model>.json, no
// weights): what it is (variant settings, plan, KV and state bytes), what it cost (token budget per
// stage, data mix, wall time), and what it scored (the eval results with intervals, the held-out KL /
// agreement / perplexity with intervals). Variants may train in separate GPU sessions; their records
// are merged into one report by `hydra report merge` (pipeline/results_merge.h).
//
// {"format": "hydra-variant-result", "version": 1, "pipeline": name, "run_dir": OUT, "written": date,
//  "model": name, "path": model dir, "teacher": path, "device": cpu|cuda, "variant": {..} | null,
//  "plan": ratio summary, "kv_bytes_per_token": n, "state_bytes": n,
//  "budget": {"stages": {"align": {steps, batch_size, seq_len, tokens}, ...}, "total_tokens": n},
//  "data_mix": {"stages": {"align": {sources, shard_dir, heldout_fraction, synthetic_fraction,
//                                    synthetic_tasks}, ...}},
//  "wall_seconds": {"steps": {step: seconds}, "total": s},
//  "eval_settings": {tasks, lengths, samples, seed, bootstrap_resamples, groups},
//  "eval": model entry of results.json (eval/results_io.h), "heldout": heldout_metrics_json}
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/results_io.h"
#include "pipeline/pipeline_config.h"

namespace hydra {

struct VariantRecordInputs {
    const PipelineConfig* config = nullptr;
    std::string out_dir, name, path, teacher_path;
    const PipelineVariant* variant = nullptr;  // null for the teacher
    std::map<std::string, TrainConfig>
        stages;  // align / distill / longctx as they ran (empty for the teacher)
    const ModelEvalResult* result = nullptr;
    const EvalRunInfo* info = nullptr;
    nlohmann::json heldout;  // the model's agreement.json entry
    nlohmann::json timings;  // the run's timings.json
    std::string plan_summary;
    int64_t kv_bytes_per_token = 0, state_bytes = 0;
};

nlohmann::json variant_record(const VariantRecordInputs& in);

// Checks a record read from `where` (format, version, the fields the merge reads); throws hydra::Error
// naming the field.
void check_variant_record(const nlohmann::json& record, const std::string& where);

}  // namespace hydra
