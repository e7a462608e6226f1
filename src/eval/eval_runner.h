// Runs task samples through a model (teacher or hybrid: the forward + hybrid KVCache of
// model/llama_forward.h) with greedy decoding and scores them as RULER does; aggregates per task and
// length, per length (mean over tasks) and overall (mean over lengths).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "eval/bootstrap.h"
#include "eval/model_text_encoder.h"
#include "eval/task.h"
#include "model/llama_model.h"

namespace hydra {

// "4096", "4k" (k = 1024), "1K"; throws hydra::Error for anything else or a value < 1.
int64_t parse_length(const std::string& text);
std::vector<int64_t> parse_lengths(const std::string& list);  // "1k,2k,4k"

struct SampleOutcome {
    std::string task;
    int64_t length = 0, index = 0;
    int64_t prompt_tokens = 0;  // the prompt that ran (== length unless the context forced it shorter)
    double score = 0;
    std::string output;
    std::vector<std::string> answers;
    int64_t generated = 0;
    double prefill_seconds = 0, decode_seconds = 0, generate_seconds = 0;  // generate = building the sample
    std::string id;  // --tasks-file rows: the row's "id" (or "line N"); empty for built-in tasks
};

struct ModelEvalResult {
    std::string model;  // the MODEL argument
    std::vector<SampleOutcome> samples;
    std::map<std::string, std::map<int64_t, double>> task_scores;  // task -> length -> mean score x 100
    std::map<int64_t, double> length_scores;                       // mean over tasks
    double overall = 0;                                            // mean over lengths
    double seconds = 0;
    // 95% bootstrap intervals (x 100) of the numbers above, samples resampled within each task x
    // length cell (eval/bootstrap.h); NaN ends where nothing was resampled (results read back without
    // samples).
    std::map<std::string, std::map<int64_t, Interval>> task_ci;
    std::map<int64_t, Interval> length_ci;
    Interval overall_ci{NAN, NAN};
};

// A group of tasks (e.g. the tasks no stage trained on): its mean over tasks per length and its mean
// over lengths, with intervals, computed from the samples like the full means.
struct GroupScore {
    std::vector<std::string> tasks;
    std::map<int64_t, double> length_scores;
    std::map<int64_t, Interval> length_ci;
    double overall = NAN;
    Interval overall_ci{NAN, NAN};
};
GroupScore group_score(const ModelEvalResult& r, const std::vector<std::string>& tasks,
                       const BootstrapOptions& boot = {});

// Samples built once and shared by several run_eval calls over the same tasks and settings (the
// pipeline evaluates five models on identical samples; building a 32K-token sample costs more than
// running it on the GPU). Keyed by (task, requested length, context, seed, index).
using SampleCache = std::map<std::tuple<std::string, int64_t, int64_t, uint64_t, int64_t>, TaskSample>;

struct EvalSettings {
    std::vector<std::string> tasks;
    std::vector<int64_t> lengths;
    int64_t samples = 1;
    uint64_t seed = 0;
    bool stop_at_full_score = true;  // stop decoding once every answer is found (cannot change the score)
    int64_t context_limit = 0;       // positions the model may use (0: the config's max)
    SampleCache* sample_cache = nullptr;  // optional: reuse samples across calls (not owned)
};

// Greedy decode after `prompt`: stops at a stop id, after max_new tokens, at the context limit, or
// (when `done` is given and returns true on the text so far) early.
struct GreedyResult {
    std::vector<int32_t> tokens;
    std::string text;
    double prefill_seconds = 0, decode_seconds = 0;
};
GreedyResult greedy_generate(const LlamaModel& model, const ModelText& text,
                             const std::vector<int32_t>& prompt, int64_t max_new, int64_t context_limit,
                             const std::function<bool(const std::string&)>& done = {});

// The positions a greedy decode of a prompt may fill: min(limit, prompt + max_new), limit being
// context_limit or else the config's max_position_embeddings (8192 when unset). Throws when the prompt
// alone does not fit below the limit.
int64_t greedy_capacity(const ModelConfig& config, int64_t prompt_tokens, int64_t max_new, int64_t context_limit);

// The stopping rules of greedy_generate over any engine (CPU forward, GPU forward): `next(tokens)`
// runs tokens through the engine's cache (the prompt once, then one token at a time) and returns the
// argmax of the last position's logits. Stops at a stop id, after max_new tokens, when the cache holds
// `capacity` positions, or when `done` returns true on the text so far.
using NextTokenFn = std::function<int32_t(std::span<const int32_t> tokens)>;
GreedyResult greedy_decode(const ModelText& text, const std::vector<int32_t>& prompt, int64_t max_new,
                           int64_t capacity, const NextTokenFn& next,
                           const std::function<bool(const std::string&)>& done = {});

// A greedy generator run_eval calls per sample: (prompt, max_new, done) -> result. Empty = the CPU
// greedy_generate on the model with settings.context_limit.
using GenerateFn = std::function<GreedyResult(const std::vector<int32_t>& prompt, int64_t max_new,
                                              const std::function<bool(const std::string&)>& done)>;

// progress(done, total, status) after every sample. `generate` replaces the CPU decoding (e.g. the
// GPU path of src/gpu); everything else (samples, scoring, aggregation) is the same.
// A length whose prompt plus a task's decoding budget would not fit the context (length ==
// max_position, RULER's 8k on an 8k model) gets a prompt of context - max_new_tokens tokens instead,
// as RULER sizes its inputs; the sample still counts under the requested length (SampleOutcome
// prompt_tokens says what ran).
ModelEvalResult run_eval(const std::string& model_name, const LlamaModel& model,
                         const std::vector<const TaskGenerator*>& tasks, const ModelText& text,
                         const EvalSettings& settings,
                         const std::function<void(int64_t, int64_t, const std::string&)>& progress = {},
                         const GenerateFn& generate = {});

// Recomputes task/length/overall means and their intervals from the samples (what run_eval returns;
// also for results read back or merged).
void aggregate(ModelEvalResult& r, const BootstrapOptions& boot = {});

}  // namespace hydra
