// Aggregation tasks (RULER §1.6): common-words extraction (cwe: a numbered word list where 10 words
// repeat far more often than the rest) and frequent-words extraction (fwe: Zipf-distributed coded
// words; the answer is the three most frequent after the '...' noise word).
#pragma once

#include <memory>

#include "eval/task.h"
#include "eval/task_common.h"

namespace hydra {

std::unique_ptr<TaskGenerator> make_cwe_task(std::shared_ptr<const TaskContext> ctx);
std::unique_ptr<TaskGenerator> make_fwe_task(std::shared_ptr<const TaskContext> ctx);

}  // namespace hydra
