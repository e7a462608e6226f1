// Synthetic retrieval rows for training: a DataLoader mixer (train/data_loader.h) that draws a task
// from a list (passkey, NIAH, MQAR, ...) and returns one training row of exactly seq_len + 1 tokens:
// the task prompt followed by its answer and an end-of-text token, so a teacher learns retrieval while
// it learns the prose, and a stage-3 student keeps practising it at long context.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "eval/model_text_encoder.h"
#include "eval/task_common.h"
#include "train/data_loader.h"

namespace hydra {

// Holds the generators it uses. All randomness comes from the Rng the loader passes, so runs stay
// resumable. Besides the evaluation tasks, "repeat" draws a copying row (a prose passage with random
// numbers, then the same passage again): a dense induction signal for tiny teachers. Throws
// hydra::Error for an unknown task name.
DataLoader::Generator synthetic_task_mixer(const ModelText& text, const TaskOptions& options,
                                           const std::vector<std::string>& tasks, int64_t seq_len);

// TaskOptions that fit tiny byte-level models (compact prompts, short values); the RULER defaults
// otherwise.
TaskOptions training_task_options(const ModelText& text);

}  // namespace hydra
