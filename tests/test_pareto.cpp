// Score against cache (eval/pareto.h): the frontier on known points (ties, a dominated point, one with
// no score), the table's order and verdicts, and the section's plot.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "eval/pareto.h"
#include "temp_dir.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;

std::vector<ParetoPoint> points() {
    return {
        {"teacher", 23040, 50.8, {48.7, 52.8}},     // dominated by hydra-7:1 (fewer bytes, higher score)
        {"hydra-7:1", 2816, 60.0, {57.9, 62.2}},    // on: nothing cheaper scores as high
        {"hydra-7:1-b", 2816, 60.0, {57.0, 63.0}},  // an equal point: both on
        {"layerwise-3:1", 5376, 55.0, {52.0, 58.0}},
        {"all-la", 0, 20.0, {18.0, 22.0}},         // on: the cheapest
        {"broken", 100, NAN, {NAN, NAN}},          // no score: never on
        {"hydra-15:1", 1536, 58.0, {55.0, 61.0}},  // on: cheaper than 7:1, better than all-la
    };
}

TEST(Pareto, FrontierOnKnownPoints) {
    const std::vector<bool> on = pareto_frontier(points());
    EXPECT_EQ(on, (std::vector<bool>{false, true, true, false, true, false, true}));
    EXPECT_TRUE(pareto_frontier({}).empty());
    EXPECT_EQ(pareto_frontier({{"only", 5, 1, {NAN, NAN}}}), std::vector<bool>{true});
}

TEST(Pareto, TableCheapestFirstWithVerdicts) {
    const std::string md = pareto_table(points());
    const size_t la = md.find("| all-la | 0 | 20.0 [18.0, 22.0] | yes |");
    const size_t h15 = md.find("| hydra-15:1 | 1536 | 58.0 [55.0, 61.0] | yes |");
    const size_t h7 = md.find("| hydra-7:1 | 2816 | 60.0 [57.9, 62.2] | yes |");
    const size_t lw = md.find("| layerwise-3:1 | 5376 | 55.0 [52.0, 58.0] | no |");
    const size_t t = md.find("| teacher | 23040 | 50.8 [48.7, 52.8] | no |");
    ASSERT_NE(la, std::string::npos) << md;
    ASSERT_NE(h15, std::string::npos) << md;
    ASSERT_NE(h7, std::string::npos) << md;
    ASSERT_NE(lw, std::string::npos) << md;
    ASSERT_NE(t, std::string::npos) << md;
    EXPECT_LT(la, md.find("| broken |"));  // 0 < 100 bytes
    EXPECT_LT(md.find("| broken |"), h15);
    EXPECT_LT(h15, h7);
    EXPECT_LT(h7, lw);
    EXPECT_LT(lw, t);
}

TEST(Pareto, SectionDrawsThePlot) {
    const test::TempDir tmp("pareto");
    const fs::path& dir = tmp.path;
    const std::string md = pareto_section(points(), dir);
    EXPECT_NE(md.find("## Score against cache"), std::string::npos);
    EXPECT_NE(md.find("![score against cache](pareto.png)"), std::string::npos) << md;
    EXPECT_TRUE(fs::exists(dir / "pareto.png"));
    // an unwritable place: the section says why, nothing is thrown
    const std::string bad = pareto_section(points(), dir / "missing" / "deeper");
    EXPECT_NE(bad.find("(plot not drawn:"), std::string::npos) << bad;
}

}  // namespace
}  // namespace hydra
