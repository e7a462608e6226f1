// `hydra eval MODEL --tasks-file FILE.jsonl`: user-supplied rows, one JSON object per line,
//   {"prompt": "...", "answer": "..." | ["...", ...], "length": 4096 | "4k" (optional), "id": "..."
//   (optional)}
// scored with the built-in tasks' answer matcher (eval/task.h score_answers, metric "part": the row
// scores 1 when the output contains any acceptable answer, case-insensitive, RULER's normalisation) and
// written as the same results JSON / CSV with intervals (eval/results_io.h). Rows are grouped by
// "length" (a label, e.g. the context length the prompt was built for); a row without one is grouped by
// its prompt's token count rounded up to a power of two (at least 256).
//
// Validation (hydra::Error naming FILE:LINE): invalid UTF-8, bad JSON, not an object, unknown keys,
// "prompt" missing / not a non-empty string, "answer" missing / not a non-empty string or a non-empty list
// of non-empty strings, "length" not a positive integer or token count like "4k", "id" not a string or
// integer or repeated, no rows at all; per model: a prompt that with its decoding budget does not fit
// the model's context.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "eval/eval_runner.h"
#include "eval/task_common.h"

namespace hydra {

struct UserTaskRow {
    int64_t line = 0;  // 1-based line in the file
    std::string id;    // "id" or "line N"
    std::string prompt;
    std::vector<std::string> answers;  // acceptable answers
    int64_t length = 0;                // "length"; 0: grouped by the prompt's token count
};

// Reads and validates every row of `path` (blank lines are skipped).
std::vector<UserTaskRow> read_tasks_file(const std::string& path);
// The same on text already read (`name` names it in errors).
std::vector<UserTaskRow> parse_tasks_jsonl(const std::string& text, const std::string& name);

// Decoding budget of a row: enough for its longest answer twice over plus room for a preamble, in
// [32, 256] tokens.
int64_t row_max_new_tokens(const TaskContext& ctx, const UserTaskRow& row);

// Runs every row through the model (greedy, the prompt wrapped as the built-in tasks wrap theirs:
// BOS, ChatML when the model has a chat template unless the context's format says raw) and scores it.
// Samples are named `task` and keyed by the row's length group; the index is the row's position.
// Throws (before running anything) naming FILE:LINE when a prompt plus its budget exceeds
// `context` positions. `generate` as in run_eval (empty: the CPU path).
ModelEvalResult run_tasks_file(const std::string& model_name, const LlamaModel& model, const TaskContext& ctx,
                               const std::vector<UserTaskRow>& rows, const std::string& task,
                               const std::string& file, int64_t context, const EvalSettings& settings,
                               const std::function<void(int64_t, int64_t, const std::string&)>& progress = {},
                               const GenerateFn& generate = {});

}  // namespace hydra
