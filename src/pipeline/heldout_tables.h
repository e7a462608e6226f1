// The held-out detail of a pipeline report and a merged report, from each model's held-out JSON
// (the pipeline's agreement.json entries, a record's "heldout"): the metrics after each training stage
// (where the distance to the teacher was won or lost) and per corpus source with the mix-weighted
// numbers (eval/heldout_sources.h). Models without that detail (older records) are left out; nothing
// at all gives "".
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hydra {

// models: (name, held-out JSON) in table order.
std::string heldout_detail_markdown(const std::vector<std::pair<std::string, nlohmann::json>>& models);

}  // namespace hydra
