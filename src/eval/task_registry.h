// Task names -> generators, and the suites: "ruler" (RULER's 13 tasks minus the two QA tasks: the 11
// synthetic ones), "passkey", "mqar", "all" (ruler + passkey + mqar).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "eval/task.h"
#include "eval/task_common.h"

namespace hydra {

const std::vector<std::string>& all_task_names();
// Task names of a suite; throws hydra::Error listing the suites for an unknown one.
std::vector<std::string> suite_tasks(const std::string& suite);
// Parses "a,b,c" into task names; throws naming an unknown task and listing the known ones.
std::vector<std::string> parse_task_list(const std::string& list);
std::unique_ptr<TaskGenerator> make_task(const std::string& name, std::shared_ptr<const TaskContext> ctx);

}  // namespace hydra
