// The per-chunk GDN backward's split of its two triangular tf32 products over 16 warps
// (src/ops/cuda/gdn_triangle_parts.h). Checks that every tile on or below the diagonal is formed over exactly
// the k-blocks where T is not zero, each (tile, k-block) once, nothing above the diagonal. A split tile must
// have both halves, so the second buffer the reader adds never holds stale values there. No warp may run more
// than 2 of the 4 k-blocks. No GPU needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/cuda/gdn_triangle_parts.h"

using namespace hydra::cuda;

namespace {

// k-blocks [first, last) tile (I, J) needs: tL = dT T^T over 0 .. J, dA = -T^T tL over I .. 3
struct KRange {
    int first, last;
};
KRange needed_tl(int /*I*/, int J) {
    return {0, J + 1};
}
KRange needed_da(int I, int /*J*/) {
    return {I, 4};
}

// Every way `table` breaks the rules above, one line each (empty: none).
std::vector<std::string> table_problems(const TriangleParts& table, KRange (*needed)(int, int)) {
    std::vector<std::string> out;
    int covered[4][4][4] = {};  // [I][J][k-block]
    int whole[4][4] = {}, first_half[4][4] = {}, second_half[4][4] = {};
    for (int w = 0; w < kTriangleWarps; ++w) {
        const TrianglePart& p = table.warp[w];
        const std::string at = "warp " + std::to_string(w) + ": ";
        if (p.I < 0) continue;  // idle
        if (p.I > 3 || p.J < 0 || p.J > p.I) {
            out.push_back(at + "tile outside the lower triangle");
            continue;
        }
        if (p.kb0 < 0 || p.kb0 >= p.kb1 || p.kb1 > 4) {
            out.push_back(at + "bad k-block range");
            continue;
        }
        if (p.kb1 - p.kb0 > 2) out.push_back(at + "more than 2 k-blocks");
        for (int kb = p.kb0; kb < p.kb1; ++kb) ++covered[p.I][p.J][kb];
        if (p.part == 0)
            ++whole[p.I][p.J];
        else if (p.part == 2)
            ++first_half[p.I][p.J];
        else if (p.part == 1)
            ++second_half[p.I][p.J];
        else
            out.push_back(at + "part " + std::to_string(p.part));
    }
    for (int I = 0; I < 4; ++I)
        for (int J = 0; J <= I; ++J) {
            const std::string at = "tile " + std::to_string(I) + "," + std::to_string(J) + ": ";
            const KRange r = needed(I, J);
            for (int kb = 0; kb < 4; ++kb) {
                const int want = kb >= r.first && kb < r.last ? 1 : 0;
                if (covered[I][J][kb] != want)
                    out.push_back(at + "k-block " + std::to_string(kb) + " formed " +
                                  std::to_string(covered[I][J][kb]) + " times, want " + std::to_string(want));
            }
            // one whole part, or a first half (to the output) and a second half (to the second buffer)
            const bool one_whole = whole[I][J] == 1 && first_half[I][J] == 0 && second_half[I][J] == 0;
            const bool two_halves = whole[I][J] == 0 && first_half[I][J] == 1 && second_half[I][J] == 1;
            if (!one_whole && !two_halves) out.push_back(at + "not one whole part nor two halves");
        }
    return out;
}

std::string joined(const std::vector<std::string>& lines) {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
}

}  // namespace

TEST(GdnTriangleParts, TLCoversItsLowerTilesOverKUpToTheColumnBlock) {
    const auto problems = table_problems(kTrianglePartsTL, needed_tl);
    EXPECT_TRUE(problems.empty()) << joined(problems);
}

TEST(GdnTriangleParts, DACoversItsLowerTilesOverKFromTheRowBlock) {
    const auto problems = table_problems(kTrianglePartsDA, needed_da);
    EXPECT_TRUE(problems.empty()) << joined(problems);
}

// The check itself finds a dropped half, a tile formed twice, and the tables swapped.
TEST(GdnTriangleParts, TheCheckFindsBrokenTables) {
    TriangleParts dropped = kTrianglePartsDA;
    dropped.warp[12].I = -1;  // the second half of tile (1, 1)
    EXPECT_FALSE(table_problems(dropped, needed_da).empty());
    TriangleParts twice = kTrianglePartsTL;
    twice.warp[13] = twice.warp[0];  // tile (0, 0) formed twice
    EXPECT_FALSE(table_problems(twice, needed_tl).empty());
    EXPECT_FALSE(table_problems(kTrianglePartsTL, needed_da).empty());
    EXPECT_FALSE(table_problems(kTrianglePartsDA, needed_tl).empty());
}
