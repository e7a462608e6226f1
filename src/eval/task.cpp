// RULER scoring (string_match_all / string_match_part) and the default TaskGenerator::pair().
#include "eval/task.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace hydra {

namespace {

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// RULER's postprocess: control characters become '\n', then strip surrounding whitespace.
std::string normalise_prediction(const std::string& output) {
    std::string s = output;
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20) c = '\n';
    const auto not_space = [](unsigned char c) { return !std::isspace(c); };
    auto b = std::find_if(s.begin(), s.end(), not_space);
    auto e = std::find_if(s.rbegin(), s.rend(), not_space).base();
    return b < e ? std::string(b, e) : std::string();
}

}  // namespace

double score_answers(const std::vector<std::string>& answers, const std::string& metric,
                     const std::string& output) {
    HYDRA_CHECK(metric == "all" || metric == "part", "unknown metric '{}' (expected \"all\" or \"part\")",
                metric);
    if (answers.empty()) return 0.0;
    const std::string pred = lower(normalise_prediction(output));
    int64_t found = 0;
    for (const std::string& a : answers)
        if (pred.find(lower(a)) != std::string::npos) ++found;
    if (metric == "part") return found > 0 ? 1.0 : 0.0;
    return double(found) / double(answers.size());
}

double score_output(const TaskSample& sample, const std::string& output) {
    return score_answers(sample.answers, sample.metric, output);
}

PatchingPair TaskGenerator::pair(int64_t, uint64_t, int64_t, const std::string&) const {
    fail(
        "task '{}' has no clean/corrupted pairs (pairs exist for niah_single_*, niah_multikey_*, passkey, "
        "mqar)",
        name());
}

}  // namespace hydra
