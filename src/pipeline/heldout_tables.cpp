// Held-out detail tables (see heldout_tables.h).
#include "pipeline/heldout_tables.h"

#include <cmath>
#include <map>

#include <fmt/format.h>

#include "eval/bootstrap.h"

namespace hydra {

using json = nlohmann::json;

namespace {

std::string metric(const json& a, const std::string& key, int digits) {
    const json v = a.value(key, json());
    return format_with_interval(v.is_number() ? v.get<double>() : NAN,
                                interval_from_json(a.value(key + "_ci", json())), digits);
}

}  // namespace

std::string heldout_detail_markdown(const std::vector<std::pair<std::string, json>>& models) {
    std::string md;
    std::string stages;
    for (const auto& model : models) {
        const std::string& name = model.first;  // not a structured binding: the lambda below captures it
        const json& h = model.second;
        if (!h.is_object() || !h.contains("after_stage") || !h["after_stage"].is_object()) continue;
        // the mixed KL is the stage entry's mix_kl, and the final model's by_source.kl
        auto row = [&](const std::string& stage, const json& a, const json& mix, const char* mix_key) {
            stages += fmt::format("| {} | {} | {} | {} | {} | {} |\n", name, stage, metric(a, "kl", 3),
                                  metric(a, "top1_agreement", 3), metric(a, "ppl_ratio", 3),
                                  metric(mix, mix_key, 3));
        };
        for (const auto& [stage, a] : h["after_stage"].items()) row(stage, a, a, "mix_kl");
        row("final", h, h.value("by_source", json::object()), "kl");
    }
    if (!stages.empty())
        md +=
            "## Held-out agreement after each stage\n\n"
            "The same held-out windows measured on each stage's output (the last row is the final model). "
            "Mix KL: "
            "each corpus source's KL weighted by its share of the training mix.\n\n"
            "| model | after | KL(t||s) | top-1 agree | ppl / teacher | mix KL "
            "|\n|---|---|---|---|---|---|\n" +
            stages + "\n";

    // By source: one column per model that has the breakdown; sources in the first such model's order.
    std::vector<std::pair<std::string, const json*>> with;
    for (const auto& [name, h] : models)
        if (h.is_object() && h.contains("by_source") && h["by_source"].contains("sources") &&
            name != "teacher")
            with.emplace_back(name, &h["by_source"]);
    if (with.empty()) return md;
    md +=
        "## Held-out agreement by source\n\n"
        "Each held-out window belongs to the corpus source whose held-out span holds its first token. "
        "KL(t||s) "
        "and top-1 agreement per source; the last rows mix the sources by their training weights (over the "
        "sources the windows reach: their share of the whole mix is given).\n\n| source | mix weight | "
        "tokens |";
    for (const auto& [name, b] : with) md += fmt::format(" {} KL | {} top-1 |", name, name);
    md += "\n|---|---|---|";
    for (size_t i = 0; i < with.size(); ++i) md += "---|---|";
    md += "\n";
    for (const json& s : (*with.front().second)["sources"]) {
        const std::string src = s.value("name", std::string("?"));
        md += fmt::format("| {} | {:.3f} | {} |", src, s.value("weight", 0.0), s.value("tokens", int64_t(0)));
        for (const auto& [name, b] : with) {
            const json* found = nullptr;
            for (const json& t : (*b)["sources"])
                if (t.value("name", std::string()) == src) found = &t;
            md += found ? fmt::format(" {} | {} |", metric(*found, "kl", 3),
                                      metric(*found, "top1_agreement", 3))
                        : std::string(" n/a | n/a |");
        }
        md += "\n";
    }
    md += "| **mix-weighted** | | |";
    for (const auto& [name, b] : with)
        md += fmt::format(" {} | {} |", metric(*b, "kl", 3), metric(*b, "top1_agreement", 3));
    md += "\n| (share of the mix reached) | | |";
    for (const auto& [name, b] : with) md += fmt::format(" {:.3f} | |", b->value("weight_covered", 0.0));
    md += "\n\n";
    return md;
}

}  // namespace hydra
