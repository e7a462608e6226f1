// analysis.json and the figures of `hydra analyze` (see analysis_report.h).
#include "interp/analysis_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "interp/scores_io.h"
#include "io/atomic_dir.h"
#include "report/heatmap.h"
#include "report/line_plot.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

nlohmann::json number(double v) {
    return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

nlohmann::json vector_json(const std::vector<double>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : v) a.push_back(number(x));
    return a;
}

nlohmann::json matrix_json(const std::vector<std::vector<double>>& m) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& row : m) a.push_back(vector_json(row));
    return a;
}

std::vector<double> layer_axis(int64_t L) {
    std::vector<double> x(static_cast<size_t>(L));
    std::iota(x.begin(), x.end(), 0.0);
    return x;
}

// Layers ordered by their CKA with the teacher, lowest (furthest) first; NaN last.
std::vector<int64_t> furthest_layers(const std::vector<double>& cka, size_t count) {
    std::vector<int64_t> order(cka.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const double x = cka[size_t(a)], y = cka[size_t(b)];
        if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
        return x < y;
    });
    order.resize(std::min(count, order.size()));
    return order;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> similarity_blocks(const std::vector<std::vector<double>>& cka,
                                                           double threshold) {
    std::vector<std::pair<int64_t, int64_t>> blocks;
    const int64_t L = int64_t(cka.size());
    int64_t first = 0;
    for (int64_t l = 1; l <= L; ++l) {
        bool joins = l < L;
        for (int64_t k = first; joins && k < l; ++k)
            joins = cka[size_t(k)][size_t(l)] >= threshold;  // NaN: no
        if (!joins) {
            blocks.emplace_back(first, l - 1);
            first = l;
        }
    }
    return blocks;
}

nlohmann::json analysis_json(const AnalysisReport& r) {
    const ModelConfig& c = r.config;
    const LayerSimilarity& s = r.similarity;
    nlohmann::json j;
    j["format"] = "hydra-analysis";
    j["version"] = 1;
    j["model"] = {{"name", c.name},
                  {"source", r.model_source},
                  {"num_layers", c.num_layers},
                  {"hidden_size", c.hidden_size},
                  {"num_heads", c.num_heads},
                  {"hybrid", r.la_heads > 0},
                  {"la_heads", r.la_heads}};
    j["data"] = {
        {"kind", r.data_kind},  {"path", r.data_path}, {"tokens", s.tokens},         {"rows", s.rows},
        {"windows", s.windows}, {"window", r.window},  {"skip_first", r.skip_first}, {"bos_id", r.bos_id}};
    std::vector<double> adjacent;
    for (int64_t l = 0; l + 1 < s.layers; ++l) adjacent.push_back(s.cka[size_t(l)][size_t(l + 1)]);
    nlohmann::json blocks = nlohmann::json::array();
    for (auto [a, b] : r.blocks) blocks.push_back({a, b});
    j["layer_cka"] = {
        {"estimator",
         "linear CKA of the residual stream after each layer; 'debiased': unbiased HSIC (Song et al. "
         "2012) as in Kornblith et al. 2019, 'biased': the standard centered estimator"},
        {"debiased", matrix_json(s.cka)},
        {"biased", matrix_json(s.cka_biased)},
        {"adjacent", vector_json(adjacent)},
        {"block_threshold", r.block_threshold},
        {"blocks", blocks},
        {"residual_norm",
         {{"position0", vector_json(s.norm_first)},
          {"counted", vector_json(s.norm_counted)},
          {"counted_max", vector_json(s.norm_counted_max)}}},
        {"accumulator_bytes", s.accumulator_bytes},
        {"seconds", s.seconds}};
    if (r.has_scores) {
        nlohmann::json layers = nlohmann::json::array();
        for (size_t l = 0; l < r.spread.layers.size(); ++l) {
            const LayerHeadSpread& x = r.spread.layers[l];
            layers.push_back({{"layer", l},
                              {"min", number(x.min)},
                              {"median", number(x.median)},
                              {"max", number(x.max)},
                              {"mean", number(x.mean)},
                              {"cv", number(x.cv)},
                              {"top_share", number(x.top_share)},
                              {"top_head", x.top_head}});
        }
        j["head_scores"] = {{"source", r.scores_source},
                            {"layers", layers},
                            {"within_layer_share", number(r.spread.within_layer_share)}};
    }
    if (s.has_teacher)
        j["teacher"] = {{"source", r.teacher_source},
                        {"cka", vector_json(s.teacher.cka)},
                        {"cka_biased", vector_json(s.teacher.cka_biased)},
                        {"rel_mse", vector_json(s.teacher.rel_mse)},
                        {"furthest", furthest_layers(s.teacher.cka, 5)}};
    return j;
}

std::vector<std::string> write_analysis(const std::string& dir, const AnalysisReport& r) {
    const fs::path root(dir);
    std::vector<std::string> written;
    const fs::path json_path = root / "analysis.json";
    write_text_file(json_path, analysis_json(r).dump(1) + "\n");
    written.push_back(json_path.string());
    auto figure = [&](const char* name, const std::function<void(const std::string&)>& draw) {
        const std::string path = (root / name).string();
        try {
            draw(path);
            written.push_back(path);
        } catch (const Error& e) {
            fmt::print(stderr, "warning: no {}: {}\n", name, e.what());
        }
    };
    const LayerSimilarity& s = r.similarity;
    const int64_t L = s.layers;
    const std::vector<double> x = layer_axis(L);
    figure("layer_cka.png", [&](const std::string& path) {
        HeatmapOptions o;
        o.title = fmt::format("layer CKA (debiased): {}, {} positions", r.config.name, s.rows);
        o.row_label = o.col_label = "layer";
        o.value_label = "linear CKA";
        o.vmax = 1.0;
        write_heatmap(path, s.cka, o);
    });
    if (r.has_scores) {
        const int64_t H = r.config.num_heads;
        std::vector<double> flat;
        for (const auto& row : r.scores.heads) flat.insert(flat.end(), row.begin(), row.end());
        figure("heads.png", [&](const std::string& path) {
            write_scores_heatmap(path, flat, L, H, fmt::format("head scores: {}", r.config.name), "score",
                                 (L * H + 7) / 8);
        });
        Series lo{"min", x, {}}, med{"median", x, {}}, hi{"max", x, {}};
        Series cv{"coefficient of variation", x, {}}, top{"top-head share of the layer's score", x, {}};
        Series equal{fmt::format("equal heads (1/{})", H), x,
                     std::vector<double>(size_t(L), 1.0 / double(H))};
        for (const LayerHeadSpread& p : r.spread.layers) {
            lo.y.push_back(p.min);
            med.y.push_back(p.median);
            hi.y.push_back(p.max);
            cv.y.push_back(p.cv);
            top.y.push_back(p.top_share);
        }
        figure("head_spread.png", [&](const std::string& path) {
            LinePlotOptions o;
            o.title = fmt::format("head scores within each layer: {}", r.config.name);
            o.x_label = "layer";
            o.y_label = "head score";
            write_line_plot(path, {hi, med, lo}, o);
        });
        figure("head_concentration.png", [&](const std::string& path) {
            LinePlotOptions o;
            o.title = fmt::format("specialisation within each layer: {}", r.config.name);
            o.x_label = "layer";
            o.y_label = "ratio";
            write_line_plot(path, {cv, top, equal}, o);
        });
    }
    if (s.has_teacher) {
        Series d{"1 - CKA with the teacher's layer", x, {}}, m{"relative MSE of the hidden state", x, {}};
        for (int64_t l = 0; l < L; ++l) {
            d.y.push_back(1.0 - s.teacher.cka[size_t(l)]);
            m.y.push_back(s.teacher.rel_mse[size_t(l)]);
        }
        figure("teacher_distance.png", [&](const std::string& path) {
            LinePlotOptions o;
            o.title = fmt::format("distance from the teacher per layer: {}", r.config.name);
            o.x_label = "layer";
            o.y_label = "distance";
            write_line_plot(path, {d, m}, o);
        });
    }
    return written;
}

}  // namespace hydra
