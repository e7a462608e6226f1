// Bootstrap intervals (eval/bootstrap.h) on known input: percentiles against numpy.percentile, and
// intervals against numpy bootstraps with 200000 resamples (tools/bootstrap_reference.py ->
// tests/data/bootstrap_reference.json) within Monte Carlo error.
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/bootstrap.h"

namespace hydra {
namespace {

nlohmann::json reference() {
    std::ifstream f(HYDRA_SOURCE_DIR "/tests/data/bootstrap_reference.json");
    EXPECT_TRUE(f.good()) << "missing tests/data/bootstrap_reference.json (run tools/bootstrap_reference.py)";
    return nlohmann::json::parse(f);
}

TEST(Bootstrap, PercentileMatchesNumpyLinear) {
    for (const auto& c : reference()["percentile"]) {
        const auto sorted = c["sorted"].get<std::vector<double>>();
        const auto qs = c["q"].get<std::vector<double>>();
        const auto want = c["expected"].get<std::vector<double>>();
        for (size_t i = 0; i < qs.size(); ++i) EXPECT_NEAR(percentile_sorted(sorted, qs[i]), want[i], 1e-12);
    }
    EXPECT_THROW(percentile_sorted({}, 50), Error);
}

TEST(Bootstrap, MeanIntervalMatchesNumpyReference) {
    BootstrapOptions o;
    o.resamples = 20000;  // Monte Carlo error of each end about 0.02 standard errors
    o.seed = 7;
    for (const auto& c : reference()["mean"]) {
        const auto v = c["values"].get<std::vector<double>>();
        const double se = c["se"].get<double>();
        const Interval ci = bootstrap_mean(v, o);
        EXPECT_NEAR(ci.lo, c["lo"].get<double>(), 0.1 * se);
        EXPECT_NEAR(ci.hi, c["hi"].get<double>(), 0.1 * se);
        EXPECT_LT(ci.lo, c["mean"].get<double>());
        EXPECT_GT(ci.hi, c["mean"].get<double>());
    }
}

TEST(Bootstrap, DefaultResamplesCloseToNormalClosedForm) {
    // 50 RULER samples, 30 correct: mean 0.6, plug-in standard error sqrt(0.6 * 0.4 / 50); the
    // bootstrap distribution of a mean of 50 draws is close to normal, so the ends are near
    // mean -+ 1.96 se (B = 1000: within about 0.15 se).
    std::vector<double> v(50, 0.0);
    for (int i = 0; i < 30; ++i) v[size_t(i)] = 1.0;
    const double se = std::sqrt(0.6 * 0.4 / 50.0);
    const Interval ci = bootstrap_mean(v);
    EXPECT_NEAR(ci.lo, 0.6 - 1.96 * se, 0.25 * se);
    EXPECT_NEAR(ci.hi, 0.6 + 1.96 * se, 0.25 * se);
}

TEST(Bootstrap, RatioIntervalMatchesNumpyReference) {
    BootstrapOptions o;
    o.resamples = 20000;
    o.seed = 3;
    for (const auto& c : reference()["ratio"]) {
        const auto num = c["num"].get<std::vector<double>>(), den = c["den"].get<std::vector<double>>();
        const Interval ci = bootstrap_ratio(num, den, o);
        const double width = c["hi"].get<double>() - c["lo"].get<double>();
        EXPECT_NEAR(ci.lo, c["lo"].get<double>(), 0.05 * width);
        EXPECT_NEAR(ci.hi, c["hi"].get<double>(), 0.05 * width);
    }
}

TEST(Bootstrap, RatioWithEqualWeightsIsTheMeanInterval) {
    const std::vector<double> v = {0.1, 0.9, 0.4, 0.7, 0.3, 0.5, 0.8};
    const std::vector<double> ones(v.size(), 1.0);
    const Interval a = bootstrap_mean(v), b = bootstrap_ratio(v, ones);
    EXPECT_DOUBLE_EQ(a.lo, b.lo);  // same seed, same draws, same statistic
    EXPECT_DOUBLE_EQ(a.hi, b.hi);
}

TEST(Bootstrap, WeightedMeansOfOneGroupIsTheMeanInterval) {
    const std::vector<double> v = {0.2, 1.0, 0.0, 0.6, 0.4, 1.0, 0.8};
    const std::vector<double> w = {1.0};
    const Interval a = bootstrap_mean(v), b = bootstrap_weighted_means({v}, w);
    EXPECT_DOUBLE_EQ(a.lo, b.lo);
    EXPECT_DOUBLE_EQ(a.hi, b.hi);
}

TEST(Bootstrap, WeightedMeansMatchTheNormalClosedForm) {
    // Two tasks of 50 samples, averaged: var = (s1^2/n1 + s2^2/n2) / 4 (plug-in variances), the
    // bootstrap ends near mean -+ 1.96 sd.
    std::vector<double> a(50, 0.0), b(50, 0.0);
    for (int i = 0; i < 40; ++i) a[size_t(i)] = 1.0;  // 0.8
    for (int i = 0; i < 15; ++i) b[size_t(i)] = 1.0;  // 0.3
    const double sd = 0.5 * std::sqrt(0.8 * 0.2 / 50 + 0.3 * 0.7 / 50);
    BootstrapOptions o;
    o.resamples = 20000;
    const std::vector<double> w = {0.5, 0.5};
    const Interval ci = bootstrap_weighted_means({a, b}, w, o);
    // The statistic lives on a lattice of 1/100 (means of 0/1 over 50, halved): one step more.
    EXPECT_NEAR(ci.lo, 0.55 - 1.96 * sd, 0.1 * sd + 0.01);
    EXPECT_NEAR(ci.hi, 0.55 + 1.96 * sd, 0.1 * sd + 0.01);
    const std::vector<double> w3 = {0.5, 0.5, 1.0};
    const Interval skip = bootstrap_weighted_means({a, b, {}}, w3, o);  // the empty group drops out
    EXPECT_DOUBLE_EQ(skip.lo, ci.lo);
    EXPECT_THROW(bootstrap_weighted_means({a, b}, std::vector<double>{1.0}, o), Error);
}

TEST(Bootstrap, WeightedRatiosOfOneGroupIsTheRatioInterval) {
    const std::vector<double> num = {3, 1, 4, 1, 5, 9, 2}, den = {10, 12, 9, 11, 10, 14, 8};
    const std::vector<double> w = {1.0};
    const Interval a = bootstrap_ratio(num, den), b = bootstrap_weighted_ratios({num}, {den}, w);
    EXPECT_DOUBLE_EQ(a.lo, b.lo);  // same seed, same draws, same statistic
    EXPECT_DOUBLE_EQ(a.hi, b.hi);
}

TEST(Bootstrap, WeightedRatiosMixGroupsAndDropEmptyOnes) {
    // Every unit of a group has the same ratio (0.2 and 0.6): every resample gives 0.75 * 0.2 + 0.25 * 0.6.
    const std::vector<double> num_a = {2, 4, 1}, den_a = {10, 20, 5}, num_b = {6, 3}, den_b = {10, 5};
    const std::vector<double> w = {0.75, 0.25, 5.0};
    const Interval ci = bootstrap_weighted_ratios({num_a, num_b, {}}, {den_a, den_b, {}}, w);
    EXPECT_NEAR(ci.lo, 0.3, 1e-12);
    EXPECT_NEAR(ci.hi, 0.3, 1e-12);
    // Two varying groups: the mix's interval lies between the groups' own.
    const std::vector<double> vn = {1, 3, 2, 5, 1, 4}, vd = {10, 10, 10, 10, 10, 10};
    const std::vector<double> un = {6, 8, 7, 9}, ud = {10, 10, 10, 10};
    const std::vector<double> half = {0.5, 0.5};
    const Interval m = bootstrap_weighted_ratios({vn, un}, {vd, ud}, half);
    const Interval v = bootstrap_ratio(vn, vd), u = bootstrap_ratio(un, ud);
    EXPECT_GT(m.lo, v.lo);
    EXPECT_LT(m.hi, u.hi);
    EXPECT_LT(m.lo, 0.5 * (16.0 / 60 + 30.0 / 40));
    EXPECT_GT(m.hi, 0.5 * (16.0 / 60 + 30.0 / 40));
    const Interval none = bootstrap_weighted_ratios({{}}, {{}}, std::vector<double>{1.0});
    EXPECT_TRUE(std::isnan(none.lo) && std::isnan(none.hi));
    EXPECT_THROW(bootstrap_weighted_ratios({vn}, {ud}, std::vector<double>{1.0}), Error);  // sizes differ
    EXPECT_THROW(bootstrap_weighted_ratios({vn, un}, {vd, ud}, std::vector<double>{1.0}), Error);
    EXPECT_THROW(bootstrap_weighted_ratios({vn}, {vd}, std::vector<double>{NAN}), Error);
}

TEST(Bootstrap, DeterministicDegenerateAndChecked) {
    const std::vector<double> v = {1, 0, 1, 1, 0, 1, 0, 0, 1, 1};
    BootstrapOptions o;
    const Interval a = bootstrap_mean(v, o), b = bootstrap_mean(v, o);
    EXPECT_EQ(a.lo, b.lo);
    EXPECT_EQ(a.hi, b.hi);
    const std::vector<double> same(20, 0.75);
    const Interval c = bootstrap_mean(same, o);
    EXPECT_DOUBLE_EQ(c.lo, 0.75);
    EXPECT_DOUBLE_EQ(c.hi, 0.75);
    const Interval e = bootstrap_mean({}, o);
    EXPECT_TRUE(std::isnan(e.lo) && std::isnan(e.hi));
    EXPECT_THROW(bootstrap_mean(std::vector<double>{1.0, NAN}, o), Error);
    o.resamples = 0;
    EXPECT_THROW(bootstrap_mean(v, o), Error);
    EXPECT_THROW(bootstrap_ratio(std::vector<double>{1.0}, std::vector<double>{1.0, 2.0}), Error);
}

TEST(Bootstrap, JsonRoundTripKeepsMissingEnds) {
    const nlohmann::json j = interval_json({49.456, 64.0}, 1);
    EXPECT_DOUBLE_EQ(j["lo"].get<double>(), 49.5);
    const Interval back = interval_from_json(j);
    EXPECT_DOUBLE_EQ(back.hi, 64.0);
    EXPECT_TRUE(interval_json({NAN, NAN})["lo"].is_null());
    EXPECT_TRUE(std::isnan(interval_from_json(nlohmann::json()).lo));
    EXPECT_EQ(format_with_interval(57.0, {49.49, 64.0}), "57.0 [49.5, 64.0]");
    EXPECT_EQ(format_with_interval(0.5, {NAN, NAN}, 3), "0.500");
    EXPECT_EQ(format_with_interval(NAN, {1, 2}), "n/a");
}

}  // namespace
}  // namespace hydra
