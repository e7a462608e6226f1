// `hydra score-heads` as a library call: for every task (a RULER generator from src/eval/ with its
// clean/corrupted pairs and samples), length and sample index, run the requested methods and gather
// their per-head scores; then aggregate (score_aggregation.h) into one score per head and KV group.
//
// Per pair: one clean and one corrupted forward pass of the teacher (interp/fa_forward.h), then
//   activation: exact patching of every head, both directions (activation_patching.h)
//   attribution: first-order estimates, one backward pass per direction (attribution_patching.h)
//   path: senders -> logits and senders -> q/k/v of the task's receivers (path_patching.h); the
//         receivers are the top `receivers` heads of the task by activation patching, so path
//         patching runs after all of a task's pairs (their runs are kept until then) and needs the
//         activation pass even when activation is not a requested method (then it is not reported).
//   retrieval: copy-paste score while greedily decoding the task's samples (retrieval_score.h); the
//         needle spans that count are those whose text contains an answer.
// Pairs whose clean-vs-corrupted logit difference is below min_gap carry no signal and are skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/model_text_encoder.h"
#include "eval/task.h"
#include "interp/attribution_patching.h"
#include "interp/scores_io.h"
#include "interp/scoring_backend.h"
#include "model/llama_model.h"

namespace hydra {

// "activation,path", "all" (= activation, attribution, path, retrieval). Throws hydra::Error naming
// an unknown method and listing the known ones. Result: known order, no duplicates.
std::vector<std::string> parse_methods(const std::string& text);

// "niah_single_2,niah_multikey_1:key-swap": task names, each with an optional corruption (empty =
// the task's default, the first of TaskGenerator::corruptions()).
struct TaskSpec {
    std::string task, corruption;
};
std::vector<TaskSpec> parse_task_specs(const std::string& list);

struct ScoreHeadsOptions {
    std::vector<std::string> methods = {"activation", "attribution"};
    std::vector<int64_t> lengths = {1024};
    int64_t samples = 4;  // pairs (and retrieval samples) per task and length
    uint64_t seed = 1;
    int64_t receivers = 8;  // path patching: receiver heads per task
    AttributionPositions attribution_positions = AttributionPositions::Answer;
    int64_t max_batch = 96;  // patched copies per batch
    // Retrieval decodes at most this many tokens per sample (Wu et al. decode 50); decoding also stops
    // once every answer is in the output.
    int64_t retrieval_max_new_tokens = 64;
    ScoreConfig config;
};

// Input checks, hydra::Error naming the option: unknown method, lengths below 16 or beyond the model's
// context (with retrieval: no position left to decode), samples / receivers / max_batch < 1, lambda
// outside [0, 1], clip_lo >= clip_hi.
void check_score_options(const ModelConfig& config, const ScoreHeadsOptions& options);

// A task to score: its generator (kept alive by the caller) and the corruption its pairs use.
struct ScoreTask {
    const TaskGenerator* generator = nullptr;
    std::string corruption;   // resolved (never empty when pairs are needed)
    std::string key() const;  // "task" or "task:corruption" when it is not the default
};

// progress(done, total, status) after every pair / trial.
using ScoreProgress = std::function<void(int64_t, int64_t, const std::string&)>;

// The model must be the all-FA teacher. Pairs whose generator cannot make them throw hydra::Error.
// Runs on the CPU (CpuScoringBackend).
ScoreReport score_heads(const LlamaModel& model, const ModelText& text, const std::vector<ScoreTask>& tasks,
                        const ScoreHeadsOptions& options, const ScoreProgress& progress = {});
// The same on any scoring backend (interp/scoring_backend.h); its model is the one scored.
ScoreReport score_heads(ScoringBackend& backend, const ModelText& text, const std::vector<ScoreTask>& tasks,
                        const ScoreHeadsOptions& options, const ScoreProgress& progress = {});

}  // namespace hydra
