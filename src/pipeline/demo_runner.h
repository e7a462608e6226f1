// `hydra demo`: the HydraHead method on the real default model (SmolLM2-135M) within about half an hour
// of a 2-core CPU. It runs the pipeline's own steps (pipeline_steps.h, interp/, model/, train/), sized
// down, and reports what each one shows:
//   score    the fast screen of every head (attribution patching on a few clean/corrupted pairs)
//   ablation the causal check: retrieval of the teacher with the top-scored eighth of its heads
//            zero-ablated against random eighths, on the same samples
//   convert  the 7:1 hybrid (interpretability-selected KV groups) and its KV cache against the teacher's;
//            its held-out KL(teacher || student) before any training
//   align    stage 1 (per-layer alignment of the linear-attention heads); held-out KL after it
//   distill  a short stage 2 (KL distillation of every weight); held-out KL after it
//   cost     the teacher and the recovered hybrid at a 4K-token context on this CPU: prefill, decode, cache
//   report   OUT/report.md, pointing to the latest full-budget GPU report under docs/results/
// The held-out KL is measured on the same tokens of prose no stage trains on. Every step writes its
// result into OUT and is skipped when that result is complete, so a cut demo resumes where it stopped;
// `from` recomputes a step and everything after it.
//
// OUT/demo_config.json   the settings (a PipelineConfig: the same keys as `hydra pipeline`)
// OUT/scores.json, heads.png, ablation.json
// OUT/hybrid/            the converted 7:1 model (loads like any model);  OUT/conversion.json
// OUT/align/ OUT/distill/ stage checkpoints;  OUT/shards/ the stages' token shards
// OUT/agreement.json     held-out KL, top-1 agreement and perplexity per model state
// OUT/cost.json          the cost step's figures (eval/decode_cost.h)
// OUT/timings.json, OUT/report.md
#pragma once

#include <string>
#include <vector>

#include "pipeline/pipeline_config.h"
#include "pipeline/pipeline_runner.h"

namespace hydra {

const std::vector<std::string>& demo_steps();  // score, ablation, convert, align, distill, cost, report

// The demo's settings for `teacher`: the smollm2-gpu preset's stage recipe at CPU sizes. The demo
// builds the first variant only (7:1 by head scores, KV granularity).
PipelineConfig demo_config(const std::string& teacher);

struct DemoResult {
    std::string report_path;
    std::string summary;  // a few lines for the terminal
    double seconds = 0;
};

// hooks: progress, and for device = cuda the training engine and the generator (as the pipeline's).
DemoResult run_demo(const PipelineConfig& config, const std::string& out_dir, const std::string& from,
                    const PipelineHooks& hooks);

}  // namespace hydra
