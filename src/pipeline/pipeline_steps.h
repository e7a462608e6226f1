// Building blocks of the steps that `hydra pipeline` (pipeline_runner.h) and `hydra demo`
// (demo_runner.h) share, so that both measure, train and check the same way: the held-out prose that
// no stage trains on, a resumable transfer stage, and the causality check of head scores by ablation.
#pragma once

#include <chrono>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/eval_runner.h"
#include "eval/model_text_encoder.h"
#include "eval/task.h"
#include "model/llama_model.h"
#include "train/data_loader.h"
#include "train/train_config.h"
#include "train/train_engine.h"
#include "train/trainer.h"

namespace hydra {

// Figures are side products of a step: one that cannot be drawn (no PNG driver on this machine, ...) is a
// warning, never the step's failure, so a resumed run does not redo the work the figure shows.
template <typename Draw>
void draw_figure(const std::string& path, Draw&& draw) {
    try {
        draw();
    } catch (const Error& e) {
        fmt::print(stderr, "warning: no figure {}: {}\n", path, e.what());
    }
}

// A file of the prose cache: $HYDRA_CACHE/prose/NAME, else <checkout>/.cache/prose/NAME.
std::string default_prose(const std::string& name);

// The first `count` tokens of `file` after skipping `skip_bytes` (a Project Gutenberg header) when the
// file is long enough; empty when count <= 0 or the file is missing.
std::vector<int32_t> prose_tokens(const ModelText& text, const std::string& file, int64_t count,
                                  int64_t skip_bytes);

// `tc` with the held-out text taken out of its training files, so perplexity, agreement and KL are
// measured on prose no model (teacher trained here or student) was trained on. The sources become the
// explicit list of the remaining files.
TrainConfig without_heldout(TrainConfig tc, const std::string& heldout, const std::string& label);

// A `hydra train` checkpoint that reached its configured number of steps.
bool stage_complete(const std::filesystem::path& dir, int64_t steps);

// Trains `tc` into `dir`: nothing when the checkpoint there is complete, resumed from it when it is
// partial, from scratch otherwise. Returns whether it trained. `engine` empty: the CPU step.
bool train_stage_resumable(const TrainConfig& tc, const std::filesystem::path& dir,
                           const std::function<void(const StepLog&)>& on_step,
                           const DataLoader::Generator& synthetic, const TrainEngineFactory& engine);

// A greedy generator for a model with a context limit (the GPU decoder); empty: the CPU's.
using ModelGenerator = std::function<GenerateFn(const LlamaModel&, int64_t context_limit)>;

// The causality check of head scores (issue: "ablating the top-scored eighth of the heads drops
// retrieval accuracy far more than ablating the same number of random heads"): RULER-style accuracy
// of the teacher intact, with the top eighth of heads by `aggregate` (layer-major, L * H) zero-ablated,
// and with a random eighth for each seed, on the same samples of `tasks` at `length` tokens.
// JSON: {heads_ablated, length, samples_per_task, tasks, none, top_scored, random: [{seed, accuracy}]}.
// `done` (an earlier call's partial result, as passed to `checkpoint`) skips the conditions it holds;
// `checkpoint` sees the partial result after every condition, so a cut run resumes per condition.
// progress(condition, samples done, samples total).
nlohmann::json ablation_check(const LlamaModel& teacher, const ModelText& text,
                              const std::vector<const TaskGenerator*>& tasks,
                              const std::vector<std::string>& task_names,
                              const std::vector<double>& aggregate, int64_t length, int64_t samples,
                              const std::vector<uint64_t>& random_seeds, const ModelGenerator& generator = {},
                              const nlohmann::json& done = {},
                              const std::function<void(const nlohmann::json&)>& checkpoint = {},
                              const std::function<void(const std::string&, int64_t, int64_t)>& progress = {});

// One line: intact, top-scored and random accuracies.
std::string ablation_summary(const nlohmann::json& ablation);

// `--from STEP` of a resumable run whose steps are `steps` in order (`what` names the run in the error): a
// predicate that is true for STEP and every step after it (those rerun even when their records exist), false
// for every step when `from` is empty.
std::function<bool(const std::string&)> steps_forced_from(const std::vector<std::string>& steps,
                                                          const std::string& from, const std::string& what);

// Seconds since t0 on the steady clock (a step's timing in timings.json).
double seconds_since(std::chrono::steady_clock::time_point t0);
// A step's JSON record, or `fallback` when the file is missing or unreadable (the step then runs again).
nlohmann::json read_json_or(const std::filesystem::path& path, nlohmann::json fallback);
// Atomic write of a step's record. `replace`: eval results carry model outputs, which may hold invalid
// UTF-8 (a character cut by the token budget).
void write_json(const std::filesystem::path& path, const nlohmann::json& j);

}  // namespace hydra
