// Name rules -> parameter spans (see param_groups.h).
#include "train/param_groups.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hydra {

bool glob_match(std::string_view pattern, std::string_view name) {
    // Iterative matcher with one backtrack point (the last '*'): linear in practice, never
    // exponential, whatever the pattern.
    size_t p = 0, n = 0, star = std::string_view::npos, star_n = 0;
    while (n < name.size()) {
        if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            star_n = n;
        } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
            ++p;
            ++n;
        } else if (star != std::string_view::npos) {
            p = star + 1;
            n = ++star_n;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

bool default_no_decay(const std::string& name, const Shape& shape) {
    if (shape.size() <= 1) return true;
    for (const char* key : {"norm", "bias", "A_log", "gate_param"})
        if (name.find(key) != std::string::npos) return true;
    return false;
}

namespace {

void check_rule(const ParamRule& r, size_t i) {
    HYDRA_CHECK(!r.pattern.empty(), "parameter rule {}: empty pattern (use \"*\" to match every parameter)",
                i);
    HYDRA_CHECK(!r.lr_scale || (std::isfinite(*r.lr_scale) && *r.lr_scale >= 0),
                "parameter rule {} ('{}'): lr_scale must be finite and >= 0", i, r.pattern);
    HYDRA_CHECK(!r.wd_scale || (std::isfinite(*r.wd_scale) && *r.wd_scale >= 0),
                "parameter rule {} ('{}'): wd_scale must be finite and >= 0", i, r.pattern);
}

int first_match(const std::string& name, const std::vector<ParamRule>& rules) {
    for (size_t i = 0; i < rules.size(); ++i)
        if (glob_match(rules[i].pattern, name)) return int(i);
    return -1;
}

}  // namespace

std::vector<ParamSpan> build_param_spans(const std::vector<ArenaEntry>& entries,
                                         const std::vector<ParamRule>& rules) {
    for (size_t i = 0; i < rules.size(); ++i) check_rule(rules[i], i);
    std::vector<ParamSpan> spans;
    spans.reserve(entries.size());
    for (const ArenaEntry& e : entries) {
        ParamSpan s;
        s.name = e.name;
        s.offset = e.offset;
        s.size = shape_numel(e.shape);
        const bool no_decay = default_no_decay(e.name, e.shape);
        s.wd_scale = no_decay ? 0.0f : 1.0f;
        const int ri = first_match(e.name, rules);
        if (ri >= 0) {
            const ParamRule& r = rules[size_t(ri)];
            s.trainable = r.trainable;
            if (r.lr_scale) s.lr_scale = *r.lr_scale;
            if (r.wd_scale) s.wd_scale = *r.wd_scale;
            s.group = r.group;
        }
        if (s.group.empty()) s.group = !s.trainable ? "frozen" : s.wd_scale == 0.0f ? "no_decay" : "decay";
        spans.push_back(std::move(s));
    }
    return spans;
}

std::vector<int64_t> rule_match_counts(const std::vector<ArenaEntry>& entries,
                                       const std::vector<ParamRule>& rules) {
    std::vector<int64_t> counts(rules.size(), 0);
    for (const ArenaEntry& e : entries) {
        const int ri = first_match(e.name, rules);
        if (ri >= 0) counts[size_t(ri)]++;
    }
    return counts;
}

std::vector<ParamRule> parse_param_rules(const nlohmann::json& array, const std::string& where) {
    HYDRA_CHECK(array.is_array(), "{}: parameter rules must be a JSON array of objects", where);
    std::vector<ParamRule> rules;
    for (size_t i = 0; i < array.size(); ++i) {
        const nlohmann::json& o = array[i];
        HYDRA_CHECK(o.is_object(), "{}[{}]: a parameter rule must be an object with a \"pattern\"", where, i);
        ParamRule r;
        for (auto it = o.begin(); it != o.end(); ++it) {
            const std::string& k = it.key();
            const nlohmann::json& v = it.value();
            if (k == "pattern") {
                HYDRA_CHECK(v.is_string(), "{}[{}].pattern: must be a string", where, i);
                r.pattern = v.get<std::string>();
            } else if (k == "trainable") {
                HYDRA_CHECK(v.is_boolean(), "{}[{}].trainable: must be true or false", where, i);
                r.trainable = v.get<bool>();
            } else if (k == "lr_scale" || k == "wd_scale") {
                HYDRA_CHECK(v.is_number(), "{}[{}].{}: must be a number", where, i, k);
                (k == "lr_scale" ? r.lr_scale : r.wd_scale) = v.get<float>();
            } else if (k == "group") {
                HYDRA_CHECK(v.is_string(), "{}[{}].group: must be a string", where, i);
                r.group = v.get<std::string>();
            } else {
                fail("{}[{}]: unknown key '{}' (expected pattern, trainable, lr_scale, wd_scale, group)",
                     where, i, k);
            }
        }
        HYDRA_CHECK(!r.pattern.empty(), "{}[{}]: missing or empty \"pattern\"", where, i);
        check_rule(r, i);
        rules.push_back(std::move(r));
    }
    return rules;
}

int64_t trainable_count(const std::vector<ParamSpan>& spans) {
    int64_t n = 0;
    for (const ParamSpan& s : spans)
        if (s.trainable) n += s.size;
    return n;
}

}  // namespace hydra
