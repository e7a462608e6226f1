// Score against cache (see pareto.h).
#include "eval/pareto.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "report/line_plot.h"

namespace hydra {

std::vector<bool> pareto_frontier(const std::vector<ParetoPoint>& points) {
    std::vector<bool> on(points.size(), false);
    for (size_t i = 0; i < points.size(); ++i) {
        const ParetoPoint& p = points[i];
        if (!std::isfinite(p.score) || !std::isfinite(p.kv_bytes)) continue;
        bool dominated = false;
        for (size_t j = 0; j < points.size() && !dominated; ++j) {
            const ParetoPoint& q = points[j];
            if (j == i || !std::isfinite(q.score) || !std::isfinite(q.kv_bytes)) continue;
            dominated = q.kv_bytes <= p.kv_bytes && q.score >= p.score &&
                        (q.kv_bytes < p.kv_bytes || q.score > p.score);
        }
        on[i] = !dominated;
    }
    return on;
}

namespace {

std::vector<size_t> by_bytes(const std::vector<ParetoPoint>& points) {
    std::vector<size_t> order(points.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (points[a].kv_bytes != points[b].kv_bytes) return points[a].kv_bytes < points[b].kv_bytes;
        return points[a].score > points[b].score;
    });
    return order;
}

}  // namespace

std::string pareto_table(const std::vector<ParetoPoint>& points) {
    const std::vector<bool> on = pareto_frontier(points);
    std::string md = "| model | KV bytes/token (bf16) | mean score | on the frontier |\n|---|---|---|---|\n";
    for (size_t i : by_bytes(points))
        md += fmt::format("| {} | {:.0f} | {} | {} |\n", points[i].label, points[i].kv_bytes,
                          format_with_interval(points[i].score, points[i].ci), on[i] ? "yes" : "no");
    return md;
}

void write_pareto_plot(const std::string& path, const std::vector<ParetoPoint>& points) {
    const std::vector<bool> on = pareto_frontier(points);
    std::vector<Series> series;
    Series frontier;
    frontier.label = "frontier";
    for (size_t i : by_bytes(points))
        if (on[i]) frontier.x.push_back(points[i].kv_bytes), frontier.y.push_back(points[i].score);
    if (frontier.x.size() >= 2) series.push_back(std::move(frontier));
    for (const ParetoPoint& p : points) {
        Series s;
        s.label = p.label;
        s.x = {p.kv_bytes};
        s.y = {p.score};
        s.y_lo = {p.ci.lo};
        s.y_hi = {p.ci.hi};
        series.push_back(std::move(s));
    }
    LinePlotOptions o;
    o.title = "Mean score against KV cache (95% bootstrap intervals)";
    o.x_label = "KV cache bytes per token (bf16)";
    o.y_label = "mean score";
    o.y_min = 0;
    o.y_max = 100;
    write_line_plot(path, series, o);
}

std::string pareto_section(const std::vector<ParetoPoint>& points, const std::filesystem::path& out_dir) {
    std::string md =
        "## Score against cache\n\nThe mean score (all tasks and lengths) against the KV cache each model "
        "keeps per "
        "token. On the frontier: no other model scores at least as high with at most as many bytes (point "
        "estimates; the intervals say which differences the samples resolve).\n\n" +
        pareto_table(points);
    try {
        write_pareto_plot((out_dir / "pareto.png").string(), points);
        md += "\n![score against cache](pareto.png)\n\n";
    } catch (const Error& e) {
        md += fmt::format("\n(plot not drawn: {})\n\n", e.what());
    }
    return md;
}

}  // namespace hydra
