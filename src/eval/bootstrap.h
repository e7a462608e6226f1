// 95% percentile-bootstrap confidence intervals for evaluation numbers: the mean of per-sample
// scores (a RULER cell, a --tasks-file group) and per-token metrics over held-out windows. Per-token
// metrics resample whole windows (a ratio of sums over the resampled windows), never single tokens:
// neighbouring tokens of one document are correlated, so token-level resampling would give intervals
// that are far too narrow. Seeded and deterministic, so a report reproduces bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hydra {

struct Interval {
    double lo = 0, hi = 0;  // NaN when there is nothing to resample
};

struct BootstrapOptions {
    int64_t resamples = 1000;  // B
    uint64_t seed = 0;
    double level = 0.95;  // two-sided coverage; the interval is the (1-level)/2 and (1+level)/2 percentiles
};

// The q-th percentile (q in [0, 100]) of sorted values with linear interpolation between order
// statistics (numpy.percentile's default "linear" method). Throws hydra::Error when empty.
double percentile_sorted(std::span<const double> sorted, double q);

// Percentile bootstrap of the mean of `values`: B resamples of n values drawn with replacement.
// Empty input gives {NaN, NaN}; throws hydra::Error for non-finite values or bad options.
Interval bootstrap_mean(std::span<const double> values, const BootstrapOptions& options = {});

// Percentile bootstrap of sum(num) / sum(den) with units (windows) resampled as pairs: den[i] is the
// token count of window i, num[i] its summed metric (NLL, KL, agreements). Sizes must match; empty
// input gives {NaN, NaN}; a resample whose den sums to zero is drawn again.
Interval bootstrap_ratio(std::span<const double> num, std::span<const double> den,
                         const BootstrapOptions& options = {});

// Stratified percentile bootstrap of sum_g weights[g] * mean(groups[g]): every resample redraws each
// group's values with replacement within the group (the design fixes how many samples each task x
// length cell has). A score averaged over tasks (weights 1/tasks) or over tasks and lengths is one such
// statistic. Empty groups are skipped (their weight drops out); all empty gives {NaN, NaN}.
Interval bootstrap_weighted_means(const std::vector<std::vector<double>>& groups,
                                  std::span<const double> weights, const BootstrapOptions& options = {});

// Stratified percentile bootstrap of sum_g weights[g] * (sum num[g] / sum den[g]): each group's units
// (held-out windows of one corpus source) are redrawn with replacement within the group, and the
// per-group ratios are mixed by the weights (a source's share of the training mix). Groups with no units
// or no tokens drop out, their weight with them (the remaining weights are used as given: normalize them
// first). All empty gives {NaN, NaN}.
Interval bootstrap_weighted_ratios(const std::vector<std::vector<double>>& num,
                                   const std::vector<std::vector<double>>& den,
                                   std::span<const double> weights, const BootstrapOptions& options = {});

// "57.0 [49.5, 64.0]" (value and interval with `digits` decimals); the value alone when the interval
// has a NaN end; "n/a" for a NaN value.
std::string format_with_interval(double value, const Interval& ci, int digits = 1);

// v rounded to `digits` decimals as JSON (null for a non-finite v, as JSON has no NaN).
nlohmann::json rounded_json(double v, int digits);
// {"lo": .., "hi": ..} rounded to `digits` decimals (null for NaN ends, as JSON has no NaN).
nlohmann::json interval_json(const Interval& ci, int digits = 2);
// Reads interval_json back; a missing or malformed value gives {NaN, NaN} (old results have none).
Interval interval_from_json(const nlohmann::json& j);

}  // namespace hydra
