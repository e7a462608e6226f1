// Plan builders (see plan_builders.h).
#include "model/plan_builders.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/rng.h"
#include "io/bounded_parse.h"
#include "io/json_kind.h"

namespace hydra {

namespace {

bool parse_int(std::string_view s, int64_t& out) {
    if (s.empty()) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size();
}

// A unit is one KV group (kv granularity) or one query head (head granularity) of one layer.
struct Unit {
    int64_t layer, index;
};

// Deterministic Fisher-Yates shuffle driven by our own RNG (std::shuffle is not portable across
// standard libraries, and the seed must mean the same heads everywhere).
template <typename V>
void seeded_shuffle(std::vector<V>& v, uint64_t seed) {
    Rng rng(seed);
    for (size_t i = v.size(); i > 1; --i) {
        const size_t j = size_t(rng.next_u64() % uint64_t(i));
        std::swap(v[i - 1], v[j]);
    }
}

int64_t rounded_count(int64_t units, const Ratio& r) {
    return int64_t(std::llround(double(units) * r.fa_fraction()));
}

}  // namespace

Ratio parse_ratio(const std::string& text, const std::string& where) {
    const size_t colon = text.find(':');
    Ratio r;
    HYDRA_CHECK(colon != std::string::npos && parse_int(std::string_view(text).substr(0, colon), r.la) &&
                    parse_int(std::string_view(text).substr(colon + 1), r.fa),
                "{}: '{}' is not a ratio LA:FA such as 7:1", where, text);
    HYDRA_CHECK(r.la >= 0 && r.fa >= 0 && r.la + r.fa > 0 && r.la < 1000000 && r.fa < 1000000,
                "{}: ratio '{}' needs non-negative parts, not both zero", where, text);
    return r;
}

std::vector<int64_t> parse_layer_list(const std::string& text, const std::string& where) {
    std::vector<int64_t> out;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        int64_t v = 0;
        HYDRA_CHECK(parse_int(std::string_view(text).substr(start, comma - start), v),
                    "{}: '{}' is not a comma-separated list of layer indices such as 3,7,11", where, text);
        out.push_back(v);
        start = comma + 1;
    }
    return out;
}

HeadScoreTable load_head_scores(const std::string& path, const ModelConfig& config,
                                const std::string& method) {
    const nlohmann::json j =
        parse_json_bounded(read_file_limited(path, kMaxConfigBytes, "the scores file"), path);
    HYDRA_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(),
                "{}: no \"model\" object (expected a scores.json written by `hydra score-heads`)", path);
    const auto& m = j["model"];
    auto dim = [&](const char* key, int64_t expected) {
        HYDRA_CHECK(m.contains(key) && m[key].is_number_integer(), "{}: model.{} missing or not an integer", path, key);
        const int64_t got = m[key].get<int64_t>();
        HYDRA_CHECK(got == expected,
                    "{}: scores were made for another model ({} = {}, this model has {}); score this model with "
                    "`hydra score-heads`",
                    path, key, got, expected);
    };
    dim("num_layers", config.num_layers);
    dim("num_heads", config.num_heads);
    dim("num_kv_heads", config.num_kv_heads);
    if (m.contains("hidden_size")) dim("hidden_size", config.hidden_size);
    HYDRA_CHECK(j.contains("aggregate") && j["aggregate"].is_object() && j["aggregate"].contains("heads"),
                "{}: no aggregate.heads table", path);
    auto table = [&](const nlohmann::json& t, int64_t rows, int64_t cols, const std::string& name) {
        HYDRA_CHECK(t.is_array() && int64_t(t.size()) == rows, "{}: {} must be an array of {} layers", path, name,
                    rows);
        std::vector<std::vector<double>> out;
        for (int64_t l = 0; l < rows; ++l) {
            const auto& row = t[size_t(l)];
            HYDRA_CHECK(row.is_array() && int64_t(row.size()) == cols, "{}: {}[{}] must hold {} numbers", path, name, l,
                        cols);
            std::vector<double> r;
            for (const auto& v : row) {
                HYDRA_CHECK(v.is_number(), "{}: {}[{}] holds {}, expected numbers", path, name, l, json_kind(v));
                const double d = v.get<double>();
                HYDRA_CHECK(std::isfinite(d), "{}: {}[{}] holds a non-finite score", path, name, l);
                r.push_back(d);
            }
            out.push_back(std::move(r));
        }
        return out;
    };
    HeadScoreTable s;
    s.source = path;
    if (!method.empty()) {
        const bool has = j.contains("methods") && j["methods"].is_object() && j["methods"].contains(method) &&
                         j["methods"][method].is_object() && j["methods"][method].contains("heads");
        if (!has) {
            std::string known;
            if (j.contains("methods") && j["methods"].is_object())
                for (const auto& [k, v] : j["methods"].items()) known += (known.empty() ? "" : ", ") + k;
            fail("{}: no scores of method '{}' (the file holds: {})", path, method,
                 known.empty() ? "none" : known);
        }
        s.source = path + "#" + method;
        s.heads = table(j["methods"][method]["heads"], config.num_layers, config.num_heads,
                        "methods." + method + ".heads");
    } else {
        s.heads = table(j["aggregate"]["heads"], config.num_layers, config.num_heads, "aggregate.heads");
    }
    if (method.empty() && j["aggregate"].contains("kv_groups")) {
        s.kv_groups = table(j["aggregate"]["kv_groups"], config.num_layers, config.num_kv_heads, "aggregate.kv_groups");
    } else {
        const int64_t G = config.group_size();
        for (const auto& row : s.heads) {
            std::vector<double> g(size_t(config.num_kv_heads), -INFINITY);
            for (int64_t h = 0; h < config.num_heads; ++h) g[size_t(h / G)] = std::max(g[size_t(h / G)], row[size_t(h)]);
            s.kv_groups.push_back(std::move(g));
        }
    }
    return s;
}

HybridPlan build_plan(const ModelConfig& config, const PlanRequest& req) {
    const int64_t L = config.num_layers, H = config.num_heads, G = config.group_size();
    const bool kv = req.granularity == "kv";
    HYDRA_CHECK(kv || req.granularity == "head", "--granularity: '{}' is not kv or head", req.granularity);
    const int64_t per_layer = kv ? config.num_kv_heads : H;  // units per layer

    // fa[l][u]: unit u of layer l stays full attention.
    std::vector<std::vector<char>> fa(size_t(L), std::vector<char>(size_t(per_layer), 0));
    auto need_ratio = [&] {
        HYDRA_CHECK(req.ratio.has_value(), "--ratio is required with --select {}", req.select);
        return *req.ratio;
    };
    auto score_of = [&](int64_t l, int64_t u) {
        return kv ? req.scores->kv_groups[size_t(l)][size_t(u)] : req.scores->heads[size_t(l)][size_t(u)];
    };
    const std::string unit_name = kv ? "KV groups" : "heads";

    std::string selection = req.select;
    if (req.select == "all-fa") {
        for (auto& row : fa) std::fill(row.begin(), row.end(), 1);
    } else if (req.select == "all-la") {
        HYDRA_CHECK(!req.ratio || req.ratio->fa == 0, "--select all-la keeps no FA head; drop --ratio or use 1:0");
    } else if (req.select == "scores" || req.select == "random") {
        const Ratio r = need_ratio();
        const int64_t units = L * per_layer, n = rounded_count(units, r);
        HYDRA_CHECK(r.fa == 0 || n > 0,
                    "ratio {}:{} cannot be met: {} {} x {:.4f} rounds to 0 FA {}; use a smaller ratio or "
                    "--granularity head",
                    r.la, r.fa, units, unit_name, r.fa_fraction(), unit_name);
        HYDRA_CHECK(r.la == 0 || n < units,
                    "ratio {}:{} cannot be met: {} {} x {:.4f} rounds to every unit FA; use a larger ratio", r.la, r.fa,
                    units, unit_name, r.fa_fraction());
        std::vector<Unit> all;
        for (int64_t l = 0; l < L; ++l)
            for (int64_t u = 0; u < per_layer; ++u) all.push_back({l, u});
        if (req.select == "scores") {
            HYDRA_CHECK(req.scores != nullptr, "--select scores needs --scores FILE (from `hydra score-heads`)");
            std::stable_sort(all.begin(), all.end(), [&](const Unit& a, const Unit& b) {
                return score_of(a.layer, a.index) > score_of(b.layer, b.index);
            });
            selection = fmt::format("scores({})", req.scores->source);
        } else {
            seeded_shuffle(all, req.seed);
            selection = fmt::format("random(seed={})", req.seed);
        }
        for (int64_t i = 0; i < n; ++i) fa[size_t(all[size_t(i)].layer)][size_t(all[size_t(i)].index)] = 1;
    } else if (req.select == "uniform") {
        const Ratio r = need_ratio();
        const int64_t m = rounded_count(per_layer, r);
        HYDRA_CHECK(r.fa == 0 || m > 0,
                    "ratio {}:{} cannot be met uniformly: {} {} per layer x {:.4f} rounds to 0 FA per layer; use "
                    "--granularity head, a smaller ratio, or --select scores|random",
                    r.la, r.fa, per_layer, unit_name, r.fa_fraction());
        HYDRA_CHECK(r.la == 0 || m < per_layer,
                    "ratio {}:{} cannot be met uniformly: {} {} per layer x {:.4f} rounds to all FA", r.la, r.fa,
                    per_layer, unit_name, r.fa_fraction());
        for (int64_t l = 0; l < L; ++l) {
            std::vector<int64_t> order(static_cast<size_t>(per_layer));
            std::iota(order.begin(), order.end(), 0);
            if (req.scores) {
                std::stable_sort(order.begin(), order.end(),
                                 [&](int64_t a, int64_t b) { return score_of(l, a) > score_of(l, b); });
            } else {
                seeded_shuffle(order, req.seed * 1000003u + uint64_t(l));
            }
            for (int64_t i = 0; i < m; ++i) fa[size_t(l)][size_t(order[size_t(i)])] = 1;
        }
        selection = req.scores ? fmt::format("uniform({} per layer, scores {})", m, req.scores->source)
                               : fmt::format("uniform({} per layer, seed={})", m, req.seed);
    } else if (req.select == "layerwise") {
        std::vector<int64_t> layers = req.layers;
        if (layers.empty()) {
            const Ratio r = need_ratio();
            HYDRA_CHECK(r.fa > 0, "--select layerwise with ratio {}:0 keeps no FA layer; use --select all-la", r.la);
            if ((r.la + r.fa) % r.fa == 0) {
                const int64_t k = (r.la + r.fa) / r.fa;  // every k-th layer is FA (Qwen3-Next: 3:1 -> 3, 7, 11, ...)
                for (int64_t l = k - 1; l < L; l += k) layers.push_back(l);
            } else {
                const int64_t n = rounded_count(L, r);
                for (int64_t i = 0; i < n; ++i) layers.push_back(int64_t(std::llround(double(i + 1) * L / n)) - 1);
            }
            HYDRA_CHECK(!layers.empty(), "ratio {}:{} cannot be met layer-wise with {} layers (no FA layer)", r.la, r.fa,
                        L);
        } else {
            HYDRA_CHECK(!req.ratio, "give either --layers or --ratio for --select layerwise, not both");
        }
        for (int64_t l : layers) {
            HYDRA_CHECK(l >= 0 && l < L, "--layers: layer {} does not exist (the model has layers 0..{})", l, L - 1);
            HYDRA_CHECK(!fa[size_t(l)][0], "--layers: layer {} is listed twice", l);
            std::fill(fa[size_t(l)].begin(), fa[size_t(l)].end(), 1);
        }
        selection = fmt::format("layerwise(layers {})", fmt::join(layers, ","));
    } else {
        fail("--select: '{}' is not scores, random, uniform, layerwise, all-la or all-fa", req.select);
    }
    HYDRA_CHECK(req.select == "layerwise" || req.layers.empty(), "--layers is only used with --select layerwise");

    HybridPlan plan;
    plan.granularity = req.granularity;
    plan.fusion = req.fusion;
    // The offsets live in the fusion: a plan without one (fusion none, the sliding-window baseline) has none.
    HYDRA_CHECK(!req.la_bias || (req.fusion != FusionKind::None && req.window == 0),
                "la_bias (--la-bias): the LA offsets are part of the fusion, and {} has none",
                req.window > 0 ? "the sliding-window baseline (no LA heads)" : "fusion none");
    plan.la_bias = req.la_bias;
    plan.gdn = req.gdn;
    plan.selection = selection;
    plan.layers.resize(size_t(L));
    HYDRA_CHECK(req.window >= 0 && req.sinks >= 0 && (req.window > 0 || req.sinks == 0),
                "sliding window {} with {} sinks: the window must be > 0 for sinks, neither negative",
                req.window, req.sinks);
    for (int64_t l = 0; l < L; ++l)
        for (int32_t h = 0; h < int32_t(H); ++h) {
            const bool keep = fa[size_t(l)][size_t(kv ? h / G : h)] != 0;
            LayerPlan& lp = plan.layers[size_t(l)];
            if (req.window > 0) {  // the heads that would be LA attend through the window instead
                lp.fa_heads.push_back(h);
                lp.fa_window.push_back(keep ? 0 : int32_t(req.window));
            } else {
                (keep ? lp.fa_heads : lp.la_heads).push_back(h);
            }
        }
    if (req.window > 0) {
        plan.window_sinks = req.sinks;
        plan.fusion = FusionKind::None;  // softmax heads only: nothing to put on one scale
        plan.selection += fmt::format(" + sliding window {} ({} sinks)", req.window, req.sinks);
    }
    plan.validate(config, "plan");
    return plan;
}

}  // namespace hydra
