// Score against cache: which models no other beats on both the RULER-style mean (higher is better) and the
// KV cache bytes per token (lower is better), as a table and a plot with the scores' 95% intervals, for
// reports that compare variants (hydra report merge, hydra pipeline).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "eval/bootstrap.h"

namespace hydra {

struct ParetoPoint {
    std::string label;
    double kv_bytes = 0;  // per token, bf16 K/V of the FA heads (the GDN state does not grow)
    double score = 0;     // mean over tasks and lengths
    Interval ci;          // its 95% interval (NaN ends: none)
};

// on_frontier[i]: no other point has kv_bytes <= and score >= point i's with one of them strictly
// better (point estimates; equal points are both on it). Points with a non-finite score are never on it.
std::vector<bool> pareto_frontier(const std::vector<ParetoPoint>& points);

// A Markdown table, cheapest first: model, KV bytes per token, mean [95% interval], on the frontier.
std::string pareto_table(const std::vector<ParetoPoint>& points);

// The PNG: each model a point with its interval as an error bar, the frontier as a line through its
// points in order of bytes. Throws hydra::Error as write_line_plot does.
void write_pareto_plot(const std::string& path, const std::vector<ParetoPoint>& points);

// A report's section "Score against cache": the table, and OUT_DIR/pareto.png (or why it was not drawn).
std::string pareto_section(const std::vector<ParetoPoint>& points, const std::filesystem::path& out_dir);

}  // namespace hydra
