// Variable tracking (RULER §1.5): a chain "VAR A = 12345", "VAR B = VAR A", ... hidden in noise lines;
// the model lists every variable that holds the value. RULER style adds a one-shot worked example.
#pragma once

#include <memory>

#include "eval/task.h"
#include "eval/task_common.h"

namespace hydra {

std::unique_ptr<TaskGenerator> make_vt_task(std::shared_ptr<const TaskContext> ctx);

}  // namespace hydra
