// Percentile bootstrap (see bootstrap.h).
#include "eval/bootstrap.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"

namespace hydra {

namespace {

void check_options(const BootstrapOptions& o) {
    HYDRA_CHECK(o.resamples >= 1 && o.resamples <= 10'000'000, "bootstrap: resamples {} not in [1, 1e7]",
                o.resamples);
    HYDRA_CHECK(o.level > 0 && o.level < 1, "bootstrap: level {} not in (0, 1)", o.level);
}

// Unbiased index in [0, n): rejection on the top of the 64-bit range.
size_t draw_index(Rng& rng, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = rng.next_u64();
    while (r >= limit);
    return size_t(r % n);
}

Interval percentile_interval(std::vector<double>& stats, double level) {
    std::sort(stats.begin(), stats.end());
    const double tail = 50.0 * (1.0 - level);
    return {percentile_sorted(stats, tail), percentile_sorted(stats, 100.0 - tail)};
}

}  // namespace

double percentile_sorted(std::span<const double> sorted, double q) {
    HYDRA_CHECK(!sorted.empty(), "percentile of no values");
    HYDRA_CHECK(q >= 0 && q <= 100, "percentile {} not in [0, 100]", q);
    const double pos = q / 100.0 * double(sorted.size() - 1);
    const size_t i = size_t(std::floor(pos));
    if (i + 1 >= sorted.size()) return sorted.back();
    const double f = pos - double(i);
    return sorted[i] + f * (sorted[i + 1] - sorted[i]);
}

Interval bootstrap_mean(std::span<const double> values, const BootstrapOptions& o) {
    check_options(o);
    if (values.empty()) return {NAN, NAN};
    for (double v : values) HYDRA_CHECK(std::isfinite(v), "bootstrap: non-finite value {}", v);
    const uint64_t n = values.size();
    Rng rng(o.seed);
    std::vector<double> stats(size_t(o.resamples));
    for (double& s : stats) {
        double sum = 0;
        for (uint64_t i = 0; i < n; ++i) sum += values[draw_index(rng, n)];
        s = sum / double(n);
    }
    return percentile_interval(stats, o.level);
}

Interval bootstrap_ratio(std::span<const double> num, std::span<const double> den,
                         const BootstrapOptions& o) {
    check_options(o);
    HYDRA_CHECK(num.size() == den.size(), "bootstrap: {} numerators but {} denominators", num.size(),
                den.size());
    if (num.empty()) return {NAN, NAN};
    double total = 0;
    for (size_t i = 0; i < num.size(); ++i) {
        HYDRA_CHECK(std::isfinite(num[i]) && std::isfinite(den[i]) && den[i] >= 0,
                    "bootstrap: unit {} has numerator {} and denominator {} (need finite, denominator >= 0)",
                    i, num[i], den[i]);
        total += den[i];
    }
    if (total <= 0) return {NAN, NAN};
    const uint64_t n = num.size();
    Rng rng(o.seed);
    std::vector<double> stats(size_t(o.resamples));
    for (double& s : stats) {
        double a = 0, b = 0;
        while (b <= 0) {  // only possible when some units have no tokens
            a = b = 0;
            for (uint64_t i = 0; i < n; ++i) {
                const size_t k = draw_index(rng, n);
                a += num[k];
                b += den[k];
            }
        }
        s = a / b;
    }
    return percentile_interval(stats, o.level);
}

Interval bootstrap_weighted_means(const std::vector<std::vector<double>>& groups,
                                  std::span<const double> weights, const BootstrapOptions& o) {
    check_options(o);
    HYDRA_CHECK(groups.size() == weights.size(), "bootstrap: {} groups but {} weights", groups.size(),
                weights.size());
    bool any = false;
    for (size_t g = 0; g < groups.size(); ++g) {
        HYDRA_CHECK(std::isfinite(weights[g]), "bootstrap: weight {} of group {} is not finite", weights[g],
                    g);
        for (double v : groups[g])
            HYDRA_CHECK(std::isfinite(v), "bootstrap: non-finite value {} in group {}", v, g);
        any |= !groups[g].empty();
    }
    if (!any) return {NAN, NAN};
    Rng rng(o.seed);
    std::vector<double> stats(size_t(o.resamples));
    for (double& s : stats) {
        s = 0;
        for (size_t g = 0; g < groups.size(); ++g) {
            const uint64_t n = groups[g].size();
            if (n == 0) continue;
            double sum = 0;
            for (uint64_t i = 0; i < n; ++i) sum += groups[g][draw_index(rng, n)];
            s += weights[g] * sum / double(n);
        }
    }
    return percentile_interval(stats, o.level);
}

Interval bootstrap_weighted_ratios(const std::vector<std::vector<double>>& num,
                                   const std::vector<std::vector<double>>& den,
                                   std::span<const double> weights, const BootstrapOptions& o) {
    check_options(o);
    HYDRA_CHECK(num.size() == den.size() && num.size() == weights.size(),
                "bootstrap: {} numerator groups, {} denominator groups, {} weights", num.size(), den.size(),
                weights.size());
    std::vector<size_t> live;  // groups with tokens
    for (size_t g = 0; g < num.size(); ++g) {
        HYDRA_CHECK(num[g].size() == den[g].size(),
                    "bootstrap: group {} has {} numerators but {} denominators", g, num[g].size(),
                    den[g].size());
        HYDRA_CHECK(std::isfinite(weights[g]), "bootstrap: weight {} of group {} is not finite", weights[g],
                    g);
        double total = 0;
        for (size_t i = 0; i < num[g].size(); ++i) {
            HYDRA_CHECK(std::isfinite(num[g][i]) && std::isfinite(den[g][i]) && den[g][i] >= 0,
                        "bootstrap: unit {} of group {} has numerator {} and denominator {}", i, g, num[g][i],
                        den[g][i]);
            total += den[g][i];
        }
        if (total > 0) live.push_back(g);
    }
    if (live.empty()) return {NAN, NAN};
    Rng rng(o.seed);
    std::vector<double> stats(size_t(o.resamples));
    for (double& s : stats) {
        s = 0;
        for (const size_t g : live) {
            const uint64_t n = num[g].size();
            double a = 0, b = 0;
            while (b <= 0) {  // only possible when some units of the group have no tokens
                a = b = 0;
                for (uint64_t i = 0; i < n; ++i) {
                    const size_t k = draw_index(rng, n);
                    a += num[g][k];
                    b += den[g][k];
                }
            }
            s += weights[g] * a / b;
        }
    }
    return percentile_interval(stats, o.level);
}

std::string format_with_interval(double value, const Interval& ci, int digits) {
    if (!std::isfinite(value)) return "n/a";
    if (!std::isfinite(ci.lo) || !std::isfinite(ci.hi)) return fmt::format("{:.{}f}", value, digits);
    return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", value, digits, ci.lo, digits, ci.hi, digits);
}

nlohmann::json rounded_json(double v, int digits) {
    if (!std::isfinite(v)) return nullptr;
    const double scale = std::pow(10.0, digits);
    return std::round(v * scale) / scale;
}

nlohmann::json interval_json(const Interval& ci, int digits) {
    return {{"lo", rounded_json(ci.lo, digits)}, {"hi", rounded_json(ci.hi, digits)}};
}

Interval interval_from_json(const nlohmann::json& j) {
    Interval ci{NAN, NAN};
    if (!j.is_object()) return ci;
    if (j.contains("lo") && j["lo"].is_number()) ci.lo = j["lo"].get<double>();
    if (j.contains("hi") && j["hi"].is_number()) ci.hi = j["hi"].get<double>();
    return ci;
}

}  // namespace hydra
