// PipelineConfig: everything `hydra pipeline` does, from a preset (tiny-cpu, smollm2-gpu), a JSON or
// TOML file and key=value overrides: the teacher (a model path, or trained here), head scoring, the
// model variants to build (selection, ratio, granularity, fusion), the three transfer stages (each a
// `hydra train` config applied on top of the stage defaults), the evaluation and the report.
// Every variant gets the same stages, so the same token budget.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/train_config.h"

namespace hydra {

// The report's name of the task group no stage trained on (PipelineConfig::heldout_tasks).
inline constexpr const char* kHeldoutTaskGroup = "held-out tasks";

struct PipelineVariant {
    std::string name;               // directory and label, e.g. "hydra-7:1-scores"
    std::string select = "random";  // scores | random | uniform | layerwise | all-la | all-fa (the teacher)
    std::string ratio;              // LA:FA, e.g. "7:1" (empty for all-la / all-fa / layerwise with layers)
    std::string granularity = "kv";
    std::string fusion = "scale-norm";
    std::string layers;  // layerwise: "3,7"
    uint64_t seed = 1;
    std::string score_method;  // select=scores: one method's table (e.g. "retrieval"); "": the aggregate
    // Positions of the FA heads, as `hydra convert --rope-scaling` / `--nope` take them: "" keeps the
    // teacher's; e.g. "yarn:4" (the teacher's context x4), "ntk:4" (static NTK-aware base), "dynamic:4".
    // all-fa + rope_scaling + no stages is the teacher with training-free scaling.
    std::string rope_scaling;
    bool nope = false;
    // The transfer stages this variant runs, in this order (a subset of align, distill, longctx). An
    // all-fa variant runs at most longctx: the teacher fine-tuned at length with the hybrids' stage-3 budget.
    std::vector<std::string> stages = {"align", "distill", "longctx"};
    // > 0: the head-level sliding-window baseline: the heads the selection would make LA keep softmax
    // attention over their last `window` positions plus the first `sinks` (no GDN heads, no fusion; no
    // align stage, so its stages default to distill, longctx).
    int64_t window = 0, sinks = 0;
    // The fusion's LA offsets, set to the teacher heads' mean outputs (HybridPlan::la_bias; `hydra convert
    // --la-bias`).
    bool la_bias = false;
};

struct PipelineConfig {
    std::string name = "pipeline";
    std::string teacher;         // model path; empty: train one with teacher_train
    std::string device = "cpu";  // cpu | cuda: where training steps and evaluation decoding run
    TrainConfig teacher_train;   // used when teacher is empty
    // head scoring (for variants with select = scores)
    std::vector<std::string> score_methods = {"activation", "attribution"};
    std::vector<std::string> score_tasks = {"passkey", "niah_single_1"};
    std::vector<int64_t> score_lengths = {256};
    int64_t score_samples = 4;
    int64_t ablation_samples = 20;  // per task, for the causality check (top-scored vs random heads ablated)
    std::string score_file;  // a scores.json of `hydra score-heads` for this teacher: used instead of scoring
    int64_t calib_tokens = 512;  // conversion calibration (teacher head RMS, attention span)
    std::vector<PipelineVariant> variants;
    // stage configs (stage.kind/init/teacher are filled in by the runner)
    TrainConfig align, distill, longctx;
    // evaluation
    std::vector<std::string> eval_tasks = {"passkey", "niah_single_1", "mqar"};
    std::vector<int64_t> eval_lengths = {256, 512, 1024};
    int64_t eval_samples = 10;
    // KL(t||s), top-1 agreement and perplexity: measured on the held-out split of token shards
    // (train/token_shards.h), which no stage trains on, in windows of the distill stage's length.
    int64_t heldout_tokens = 4096;  // predicted tokens (fewer when the split is shorter; the report says)
    std::string heldout_shards;     // a shard directory; empty: the distill stage's own shards
    std::string heldout_text;       // a prose file every stage leaves out (default: austen_persuasion.txt)
    int64_t bootstrap_resamples = 1000;  // B of the 95% percentile-bootstrap intervals
    // Evaluate the teacher too (its row of the report). false: only the variants, for a study run in parts
    // whose teacher record an earlier part wrote (`hydra report merge` joins them); saves its evaluation.
    bool eval_teacher = true;
    // Evaluation tasks no stage (nor a teacher trained here) saw as synthetic training rows, reported as
    // their own group.
    std::vector<std::string> heldout_tasks() const;

    static PipelineConfig preset(const std::string& name);  // tiny-cpu | smollm2-gpu
    static std::vector<std::string> preset_names();
    // Applies a (nested) JSON object; unknown keys and wrong types are errors naming `origin`.
    void apply(const nlohmann::json& object, const std::string& origin);
    // "key=value" with dotted keys, e.g. teacher=runs/t, eval.samples=20, align.run.steps=50.
    void apply_override(const std::string& assignment);
    void validate() const;
    nlohmann::json to_json() const;
};

}  // namespace hydra
