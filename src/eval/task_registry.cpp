// Task registry (see task_registry.h).
#include "eval/task_registry.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "core/error.h"
#include "eval/niah.h"
#include "eval/variable_tracking.h"
#include "eval/word_extraction.h"

namespace hydra {

namespace {
const std::vector<std::string> kRuler = {"niah_single_1",
                                         "niah_single_2",
                                         "niah_single_3",
                                         "niah_multikey_1",
                                         "niah_multikey_2",
                                         "niah_multikey_3",
                                         "niah_multivalue",
                                         "niah_multiquery",
                                         "vt",
                                         "cwe",
                                         "fwe"};
}

const std::vector<std::string>& all_task_names() {
    static const std::vector<std::string> all = [] {
        auto v = kRuler;
        v.push_back("passkey");
        v.push_back("mqar");
        return v;
    }();
    return all;
}

std::vector<std::string> suite_tasks(const std::string& suite) {
    if (suite == "ruler") return kRuler;
    if (suite == "passkey") return {"passkey"};
    if (suite == "mqar") return {"mqar"};
    if (suite == "all") return all_task_names();
    fail("unknown suite '{}' (expected ruler, passkey, mqar or all)", suite);
}

std::vector<std::string> parse_task_list(const std::string& list) {
    std::vector<std::string> out;
    size_t b = 0;
    while (b <= list.size()) {
        size_t e = list.find(',', b);
        if (e == std::string::npos) e = list.size();
        std::string t = list.substr(b, e - b);
        t.erase(0, t.find_first_not_of(' '));
        t.erase(t.find_last_not_of(' ') + 1);
        HYDRA_CHECK(!t.empty(), "--tasks: empty task name in '{}'", list);
        HYDRA_CHECK(std::find(all_task_names().begin(), all_task_names().end(), t) != all_task_names().end(),
                    "--tasks: unknown task '{}' (known: {})", t, fmt::join(all_task_names(), ", "));
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
        b = e + 1;
    }
    return out;
}

std::unique_ptr<TaskGenerator> make_task(const std::string& name, std::shared_ptr<const TaskContext> ctx) {
    if (name == "vt") return make_vt_task(std::move(ctx));
    if (name == "cwe") return make_cwe_task(std::move(ctx));
    if (name == "fwe") return make_fwe_task(std::move(ctx));
    return make_niah_task(niah_config(name), std::move(ctx));  // throws for unknown names
}

}  // namespace hydra
