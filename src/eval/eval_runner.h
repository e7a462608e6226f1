// Runs task samples through a model (teacher or hybrid: the forward + hybrid KVCache of
// model/llama_forward.h) with greedy decoding and scores them as RULER does; aggregates per task and
// length, per length (mean over tasks) and overall (mean over lengths).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

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
    double score = 0;
    std::string output;
    std::vector<std::string> answers;
    int64_t generated = 0;
    double prefill_seconds = 0, decode_seconds = 0, generate_seconds = 0;  // generate = building the sample
};

struct ModelEvalResult {
    std::string model;  // the MODEL argument
    std::vector<SampleOutcome> samples;
    std::map<std::string, std::map<int64_t, double>> task_scores;  // task -> length -> mean score x 100
    std::map<int64_t, double> length_scores;                       // mean over tasks
    double overall = 0;                                            // mean over lengths
    double seconds = 0;
};

struct EvalSettings {
    std::vector<std::string> tasks;
    std::vector<int64_t> lengths;
    int64_t samples = 1;
    uint64_t seed = 0;
    bool stop_at_full_score = true;  // stop decoding once every answer is found (cannot change the score)
    int64_t context_limit = 0;       // positions the model may use (0: the config's max)
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

// progress(done, total, status) after every sample.
ModelEvalResult run_eval(const std::string& model_name, const LlamaModel& model,
                         const std::vector<const TaskGenerator*>& tasks, const ModelText& text,
                         const EvalSettings& settings,
                         const std::function<void(int64_t, int64_t, const std::string&)>& progress = {});

// Recomputes task/length/overall means from the samples (what run_eval returns; also for results
// read back or merged).
void aggregate(ModelEvalResult& r);

}  // namespace hydra
