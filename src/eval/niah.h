// Needle-in-a-haystack tasks (RULER §1.3-1.4): niah_single_1/2/3, niah_multikey_1/2/3,
// niah_multivalue, niah_multiquery. Haystack = noise paragraphs, prose, or look-alike needle lines;
// keys = adjective-noun words or UUIDs; values = numbers (TaskOptions::number_digits) or UUIDs.
// Also passkey and MQAR (NiahConfig::variant). Clean/corrupted pairs for the single and multikey
// tasks, passkey and mqar: value-swap, needle-removed, key-swap.
#pragma once

#include <memory>
#include <string>

#include "eval/task.h"
#include "eval/task_common.h"

namespace hydra {

struct NiahConfig {
    std::string name;
    enum Haystack { kNoise, kEssay, kNeedles } haystack = kNoise;
    bool uuid_keys = false, uuid_values = false;
    int keys = 1, values = 1, queries = 1;
    // Variants sharing the machinery: passkey retrieval (Mohtashami & Jaggi; noise haystack, one
    // numeric key) and text MQAR (Zoology-style associative recall: the haystack is the list of
    // "key: value" pairs itself, several keys queried at once; pairs use one query).
    enum Variant { kRuler, kPasskey, kMqar } variant = kRuler;
};

// The configuration of `name` (the 8 RULER NIAH tasks, "passkey", "mqar"); throws for other names.
NiahConfig niah_config(const std::string& name);

std::unique_ptr<TaskGenerator> make_niah_task(const NiahConfig& config,
                                              std::shared_ptr<const TaskContext> ctx);

}  // namespace hydra
