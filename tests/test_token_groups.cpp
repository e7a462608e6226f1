// group_tokens (train/token_groups.h): a batch's positions grouped by id for the deterministic GPU
// embedding backward: groups by increasing id, positions increasing within each, ids outside [0, V) left
// out, the fixed-size padding as documented.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "train/token_groups.h"

namespace hydra {
namespace {

struct View {
    int32_t groups;
    std::vector<int32_t> start, id, order;
};

View view(const std::vector<int32_t>& packed, int64_t N) {
    View v;
    v.groups = packed[0];
    v.start.assign(packed.begin() + 1, packed.begin() + 1 + (N + 1));
    v.id.assign(packed.begin() + 1 + (N + 1), packed.begin() + 1 + (N + 1) + N);
    v.order.assign(packed.begin() + 1 + (N + 1) + N, packed.end());
    return v;
}

TEST(TokenGroups, SmallBatchByHand) {
    // positions: 0 1 2 3 4 5 6 7
    const std::vector<int32_t> ids{5, 2, 5, -1, 2, 9, 5, 12};  // -1 and 12 lie outside V = 10
    std::vector<int32_t> packed, counts;
    group_tokens(ids, 10, packed, counts);
    ASSERT_EQ(int64_t(packed.size()), token_groups_size(8));
    const View v = view(packed, 8);
    EXPECT_EQ(v.groups, 3);
    EXPECT_EQ(v.id, (std::vector<int32_t>{2, 5, 9, -1, -1, -1, -1, -1}));
    EXPECT_EQ(v.start, (std::vector<int32_t>{0, 2, 5, 6, 6, 6, 6, 6, 6}));
    EXPECT_EQ(v.order, (std::vector<int32_t>{1, 4, 0, 2, 6, 5, -1, -1}));
}

TEST(TokenGroups, RandomBatchesEqualAMapOfPositions) {
    Rng rng(7);
    std::vector<int32_t> packed, counts;  // reused across batches, as the training step does
    for (const int64_t N : {1, 33, 1000}) {
        const int64_t V = 50;
        std::vector<int32_t> ids(static_cast<size_t>(N));
        for (auto& x : ids) x = int32_t(rng.uniform() * 60.0) - 5;  // some outside [0, V)
        std::map<int32_t, std::vector<int32_t>> want;
        for (int64_t t = 0; t < N; ++t)
            if (ids[size_t(t)] >= 0 && ids[size_t(t)] < V) want[ids[size_t(t)]].push_back(int32_t(t));
        group_tokens(ids, V, packed, counts);
        const View v = view(packed, N);
        ASSERT_EQ(v.groups, int32_t(want.size())) << "N " << N;
        int32_t g = 0;
        for (const auto& [id, positions] : want) {
            EXPECT_EQ(v.id[size_t(g)], id);
            const std::vector<int32_t> got(v.order.begin() + v.start[size_t(g)],
                                           v.order.begin() + v.start[size_t(g) + 1]);
            EXPECT_EQ(got, positions) << "id " << id;
            ++g;
        }
    }
}

TEST(TokenGroups, EmptyAndImpossibleInputs) {
    std::vector<int32_t> packed, counts;
    group_tokens({}, 10, packed, counts);
    EXPECT_EQ(packed, (std::vector<int32_t>{0, 0}));
    const std::vector<int32_t> ids{1, 2};
    EXPECT_THROW(group_tokens(ids, 0, packed, counts), Error);
}

}  // namespace
}  // namespace hydra
