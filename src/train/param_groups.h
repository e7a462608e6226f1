// Parameter groups: turns a ParamArena's entries into ParamSpans (offset, size, trainable, lr and
// weight-decay multipliers) by name rules, for AdamW, gradient clipping and freezing.
//
// Rules are tried in order; the FIRST rule whose glob pattern matches the full parameter name
// decides. Patterns are globs: '*' matches any run of characters (dots included, so
// "model.layers.*.self_attn.*" spans every layer), '?' matches one character, everything else
// matches itself. A rule sets trainable/frozen and, optionally, lr_scale and wd_scale; a field it
// leaves unset keeps the default below. Names no rule matches get the default.
//
// Default: trainable, lr_scale 1, wd_scale 1, except NO weight decay (wd_scale 0) for
//   - 1-D tensors (norm weights, biases, per-head gate vectors), and
//   - names containing "norm", "bias" (covers dt_bias), "A_log" or "gate_param",
// because decaying scales/offsets/gates toward 0 changes what the layer computes instead of
// regularising it. Embeddings and all 2-D+ matrices are decayed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/param_arena.h"

namespace hydra {

// One contiguous range of the parameter arena and how the optimizer treats it.
struct ParamSpan {
    std::string name;       // the arena entry's name (for logs and error messages)
    std::string group;      // label: the rule's group, else "decay" / "no_decay" / "frozen"
    int64_t offset = 0;     // elements from the arena start
    int64_t size = 0;       // elements (without alignment padding)
    float lr_scale = 1.0f;  // lr of this span = scheduled lr * lr_scale
    float wd_scale = 1.0f;  // weight decay of this span = AdamWConfig::weight_decay * wd_scale
    bool trainable = true;  // false: params, grads and optimizer state are never touched
};

struct ParamRule {
    std::string pattern;  // glob over the full name ('*', '?')
    bool trainable = true;
    std::optional<float> lr_scale;  // unset: 1
    std::optional<float> wd_scale;  // unset: the default decay classification (0 or 1)
    std::string group;              // optional label copied into the spans it matches
};

// Glob match of the whole name: '*' = any run (possibly empty) of characters, '?' = one character.
bool glob_match(std::string_view pattern, std::string_view name);

// The default weight-decay classification (see the file comment).
bool default_no_decay(const std::string& name, const Shape& shape);

// One span per entry, in entry order. Throws if a rule has an empty pattern or a negative/non-finite
// multiplier.
std::vector<ParamSpan> build_param_spans(const std::vector<ArenaEntry>& entries,
                                         const std::vector<ParamRule>& rules = {});

// For each rule, how many entries it decided (first match); a 0 usually means a typo in a pattern.
std::vector<int64_t> rule_match_counts(const std::vector<ArenaEntry>& entries,
                                       const std::vector<ParamRule>& rules);

// Rules from a JSON array of objects {"pattern": str, "trainable": bool?, "lr_scale": num?,
// "wd_scale": num?, "group": str?}; `where` names the source (file and key) in error messages.
std::vector<ParamRule> parse_param_rules(const nlohmann::json& array, const std::string& where);

// Number of trainable elements.
int64_t trainable_count(const std::vector<ParamSpan>& spans);

}  // namespace hydra
