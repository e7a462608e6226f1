// `hydra pipeline`: teacher -> head scores -> for every variant: plan + convert -> stage 1 (align) ->
// stage 2 (distill) -> stage 3 (long context) -> evaluation of the teacher and every variant ->
// report. Every step writes its result into OUT (atomically: model directories, checkpoints, JSON)
// and is skipped when that result is already complete, so an interrupted pipeline continues where it
// stopped; `from` recomputes a step and everything after it.
//
// OUT/teacher/                 trained teacher (when the config has no teacher path)
// OUT/scores.json, heads.png   head scores (variants with select = scores; copied from score.file if set)
// OUT/ablation.json            the scores' causality check (top-scored vs random heads zero-ablated)
// OUT/<variant>/converted/     the converted hybrid;  align/ distill/ longctx/  stage checkpoints
// OUT/eval/<model>.json        RULER-style results with intervals (eval/results_io.h model entry)
// OUT/eval/agreement.json      held-out KL / top-1 agreement / perplexity with intervals
// (eval/heldout_metrics.h) OUT/results/<model>.json     one self-contained record per model (no weights): its
// eval results, held-out
//                              metrics, plan, token budget, data mix and wall time; `hydra report merge`
//                              reads them
// OUT/timings.json             wall time and tokens per step
// OUT/report.md + *.png        the report
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "eval/eval_runner.h"
#include "eval/heldout_metrics.h"
#include "pipeline/pipeline_config.h"
#include "train/data_loader.h"
#include "train/train_engine.h"

namespace hydra {

// The pipeline steps in order; `from` names one of them.
const std::vector<std::string>&
pipeline_steps();  // teacher, score, convert, align, distill, longctx, eval, report

struct PipelineHooks {
    // progress(step label, done, total, status): training steps, eval samples, score items.
    std::function<void(const std::string&, int64_t, int64_t, const std::string&)> progress;
    // Builds the synthetic-row generator a stage config asks for (lives above train/ and eval/).
    std::function<DataLoader::Generator(const TrainConfig&)> synthetic_rows;
    // device = cuda (injected by the CLI, which links the CUDA backend): the training step of every stage
    // and a greedy generator for a model (cache capacity, context limit) for evaluation and the ablation
    // check. Empty hooks with device = cuda are an error.
    TrainEngineFactory train_engine;
    std::function<GenerateFn(const LlamaModel&, const ModelText&, int64_t capacity, int64_t context_limit)>
        generator;
    // device = cuda: the held-out KL, agreement and perplexity statistics of a student (null: the teacher
    // itself) against the teacher, computed on the GPU (gpu/gpu_logits.h), windows of max_positions at most.
    std::function<WindowStatsFn(const LlamaModel& teacher, const LlamaModel* student, int64_t max_positions)>
        window_stats;
    // Runs one training stage outside this process (`hydra pipeline --gpus N`: a `hydra train` process over
    // N GPUs): the stage's whole config, its checkpoint directory, and whether it resumes the run saved
    // there; throws when the stage fails. Empty: the stage trains in this process.
    std::function<void(const TrainConfig&, const std::string& dir, bool resume)> run_stage;
};

struct PipelineResult {
    std::string report_path;
    std::string table;  // the headline table (markdown)
    double seconds = 0;
};

PipelineResult run_pipeline(const PipelineConfig& config, const std::string& out_dir, const std::string& from,
                            const PipelineHooks& hooks);

}  // namespace hydra
