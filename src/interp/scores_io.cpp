// scores.json writer and heatmap (see scores_io.h).
#include "interp/scores_io.h"

#include <cmath>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "report/heatmap.h"

namespace hydra {

namespace {

const char* kFormula =
    "per pair: PE, NE clipped to [clip_lo, clip_hi], s = 1/2 (PE+ + NE+); per method and task: mean over "
    "pairs "
    "and lengths (retrieval: mean copy-paste score over correct trials); per method: lambda * max_task + "
    "(1 - lambda) * mean_task; combined: sum_m w_m S_m / max_h S_m over sum_m w_m with w_activation = 1, "
    "w_attribution = 1 only without activation (else 0), w_path = 0.5 (sender -> receivers' q/k/v), "
    "w_retrieval = 0.25, w_path_direct = 0; kv_groups: max over the group's query heads";

// JSON numbers must be finite: a non-finite score (never expected) is written as 0 and flagged.
double finite(double v) {
    return std::isfinite(v) ? v : 0.0;
}

}  // namespace

nlohmann::json score_table(const std::vector<double>& values, int64_t rows, int64_t cols) {
    HYDRA_ASSERT(int64_t(values.size()) == rows * cols, "table of {} values is not {} x {}", values.size(),
                 rows, cols);
    nlohmann::json t = nlohmann::json::array();
    for (int64_t r = 0; r < rows; ++r) {
        nlohmann::json row = nlohmann::json::array();
        for (int64_t c = 0; c < cols; ++c) row.push_back(finite(values[size_t(r * cols + c)]));
        t.push_back(std::move(row));
    }
    return t;
}

nlohmann::json report_to_json(const ModelConfig& config, const ScoreReport& r) {
    const ScoreSet& s = r.scores;
    const int64_t L = s.layers, H = s.heads;
    HYDRA_ASSERT(L == config.num_layers && H == config.num_heads && s.kv_heads == config.num_kv_heads,
                 "scores of {}x{} heads for a {}x{} model", L, H, config.num_layers, config.num_heads);
    nlohmann::json j;
    j["format"] = "hydra-head-scores";
    j["version"] = 1;
    j["model"] = {{"name", config.name},
                  {"source", r.model_source},
                  {"num_layers", config.num_layers},
                  {"num_heads", config.num_heads},
                  {"num_kv_heads", config.num_kv_heads},
                  {"hidden_size", config.hidden_size},
                  {"head_dim", config.head_dim}};
    nlohmann::json settings = r.settings;
    settings["clip"] = {s.config.clip_lo, s.config.clip_hi};
    settings["lambda"] = s.config.lambda;
    settings["min_gap"] = s.config.min_gap;
    j["settings"] = settings;
    nlohmann::json methods = nlohmann::json::object();
    for (const auto& [name, m] : s.methods) {
        nlohmann::json mj;
        mj["weight"] = m.weight;
        mj["heads"] = score_table(m.heads, L, H);
        nlohmann::json tasks = nlohmann::json::object();
        for (const auto& [task, t] : m.tasks) {
            nlohmann::json tj = {
                {"count", t.count}, {"skipped", t.skipped}, {"score", score_table(t.score, L, H)}};
            if (!t.denoising.empty()) tj["denoising"] = score_table(t.denoising, L, H);
            if (!t.noising.empty()) tj["noising"] = score_table(t.noising, L, H);
            tasks[task] = std::move(tj);
        }
        mj["tasks"] = std::move(tasks);
        methods[name] = std::move(mj);
    }
    j["methods"] = std::move(methods);
    if (!r.receivers.empty()) {
        nlohmann::json rec = nlohmann::json::object();
        for (const auto& [task, list] : r.receivers) {
            nlohmann::json a = nlohmann::json::array();
            for (const auto& [l, h] : list) a.push_back({l, h});
            rec[task] = std::move(a);
        }
        j["receivers"] = std::move(rec);
    }
    nlohmann::json pairs = nlohmann::json::array();
    for (const PairRecord& p : r.pairs)
        pairs.push_back({{"task", p.task},
                         {"corruption", p.corruption},
                         {"length", p.length},
                         {"index", p.index},
                         {"answer_token", p.answer_token},
                         {"distractor_token", p.distractor_token},
                         {"ld_clean", finite(p.ld_clean)},
                         {"ld_corrupted", finite(p.ld_corrupted)},
                         {"shared_prefix", p.shared_prefix},
                         {"used", p.used},
                         {"seconds", p.seconds}});
    j["pairs"] = std::move(pairs);
    nlohmann::json trials = nlohmann::json::array();
    for (const TrialRecord& t : r.trials)
        trials.push_back({{"task", t.task},
                          {"length", t.length},
                          {"index", t.index},
                          {"output", t.output},
                          {"correct", t.correct},
                          {"seconds", t.seconds}});
    j["trials"] = std::move(trials);
    j["timing"] = r.seconds;
    j["cpu_timing"] = r.cpu_seconds;
    j["aggregate"] = {{"formula", kFormula},
                      {"heads", score_table(s.aggregate, L, H)},
                      {"kv_groups", score_table(s.aggregate_kv, L, s.kv_heads)}};
    return j;
}

void write_scores_json(const std::string& path, const ModelConfig& config, const ScoreReport& report) {
    // Decoded outputs may hold invalid UTF-8 (a token can split a character): replace, never throw.
    const std::string text =
        report_to_json(config, report).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    write_text_file(path, text + "\n");
}

void write_scores_heatmap(const std::string& path, const std::vector<double>& heads, int64_t layers,
                          int64_t heads_per_layer, const std::string& title, const std::string& value_label,
                          int64_t outline_top) {
    std::vector<std::vector<double>> grid(static_cast<size_t>(layers));
    for (int64_t l = 0; l < layers; ++l)
        grid[size_t(l)].assign(heads.begin() + l * heads_per_layer,
                               heads.begin() + (l + 1) * heads_per_layer);
    HeatmapOptions o;
    o.title = title;
    o.row_label = "layer";
    o.col_label = "head";
    o.value_label = value_label;
    for (const auto& [l, h] : top_heads(heads, heads_per_layer, outline_top))
        o.outlined.emplace_back(int(l), int(h));
    write_heatmap(path, grid, o);
}

}  // namespace hydra
