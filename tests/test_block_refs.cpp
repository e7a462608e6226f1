// The paged KV pool's block bookkeeping (src/gpu/block_refs.h, host logic of the GPU serving backend):
// all-or-nothing takes, sharing by reference count (a prefix snapshot and the slots restored from it),
// blocks free again only when their last holder drops them, misuse refused, concurrent drops.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "core/error.h"
#include "gpu/block_refs.h"

namespace hydra {
namespace {

using gpu::BlockRefs;

TEST(BlockRefs, TakeIsAllOrNothingAndLowestFirst) {
    BlockRefs r(5);
    std::vector<int32_t> a;
    ASSERT_TRUE(r.take(2, a));
    EXPECT_EQ(a, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(r.free_count(), 3);
    std::vector<int32_t> b;
    EXPECT_FALSE(r.take(4, b));
    EXPECT_TRUE(b.empty());
    EXPECT_EQ(r.free_count(), 3);
    ASSERT_TRUE(r.take(3, b));
    EXPECT_EQ(r.free_count(), 0);
    EXPECT_FALSE(r.take(1, b));
    EXPECT_EQ(b.size(), 3u);
}

TEST(BlockRefs, SharedBlocksLiveUntilTheLastHolderDrops) {
    BlockRefs r(4);
    std::vector<int32_t> slot;
    ASSERT_TRUE(r.take(3, slot));
    const std::vector<int32_t> snapshot(slot.begin(), slot.begin() + 2);  // the two full blocks
    r.add(snapshot);
    EXPECT_EQ(r.refs(0), 2);
    EXPECT_EQ(r.refs(2), 1);
    r.drop(slot);  // the slot is released: its own block is free, the shared ones are not
    EXPECT_EQ(r.free_count(), 2);
    r.add(snapshot);   // a slot restored from the snapshot
    r.drop(snapshot);  // the snapshot goes
    EXPECT_EQ(r.free_count(), 2);
    r.drop(snapshot);  // the restored slot goes
    EXPECT_EQ(r.free_count(), 4);
    std::vector<int32_t> again;
    EXPECT_TRUE(r.take(4, again)) << "every block is reusable";
}

TEST(BlockRefs, MisuseIsRefused) {
    BlockRefs r(2);
    const std::vector<int32_t> free_block{1};
    EXPECT_THROW(r.add(free_block), Error);
    EXPECT_THROW(r.drop(free_block), Error);
    const std::vector<int32_t> outside{7};
    EXPECT_THROW(r.add(outside), Error);
    std::vector<int32_t> a;
    ASSERT_TRUE(r.take(1, a));
    r.drop(a);
    EXPECT_THROW(r.drop(a), Error) << "a double release";
    EXPECT_EQ(r.free_count(), 2);
}

TEST(BlockRefs, ConcurrentDropsFreeEveryBlockOnce) {
    constexpr int kThreads = 8, kBlocks = 64;
    BlockRefs r(kBlocks);
    std::vector<int32_t> all;
    ASSERT_TRUE(r.take(kBlocks, all));
    for (int t = 1; t < kThreads; ++t) r.add(all);  // kThreads references each
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) ts.emplace_back([&] { r.drop(all); });
    for (std::thread& t : ts) t.join();
    EXPECT_EQ(r.free_count(), kBlocks);
    std::vector<int32_t> again;
    ASSERT_TRUE(r.take(kBlocks, again));
    std::sort(again.begin(), again.end());
    for (int i = 0; i < kBlocks; ++i) EXPECT_EQ(again[size_t(i)], i) << "a block freed twice or lost";
}

}  // namespace
}  // namespace hydra
