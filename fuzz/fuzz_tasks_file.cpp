// libFuzzer target for `hydra eval --tasks-file` rows (eval/tasks_file.h): parse_tasks_jsonl on arbitrary
// text must either return rows that keep the documented rules (a non-empty prompt, at least one non-empty
// answer, a positive or absent length, ids unique) or throw hydra::Error. Anything else (a crash, a
// sanitizer report, a nlohmann or std exception) is a bug.
// Build and run: tools/fuzz.sh fuzz_tasks_file 300   (seeds: fuzz/seeds/tasks_file)
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "eval/tasks_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        const std::vector<hydra::UserTaskRow> rows = hydra::parse_tasks_jsonl(text, "fuzz.jsonl");
        if (rows.empty()) __builtin_trap();  // "no rows at all" is an error
        std::set<std::string> ids;
        for (const hydra::UserTaskRow& r : rows) {
            if (r.prompt.empty() || r.answers.empty() || r.length < 0 || r.line < 1) __builtin_trap();
            for (const std::string& a : r.answers)
                if (a.empty()) __builtin_trap();
            if (!ids.insert(r.id).second) __builtin_trap();
        }
    } catch (const hydra::Error&) {
    }
    return 0;
}
