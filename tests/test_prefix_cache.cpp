// PrefixCache: the longest cached prefix wins, keys are compared token by token, the caller's bound
// on the prefix length holds, duplicates are not stored twice, and LRU eviction keeps the bytes
// under the budget. Also the CPU backend's snapshots: a restored slot continues exactly like the slot
// it was taken from (teacher KV rows and hybrid GDN state).
#include <gtest/gtest.h>

#include <cstring>

#include "model/llama_forward.h"
#include "serve/prefix_cache.h"
#include "serve_fixtures.h"

namespace hydra {
namespace {

using serve::PrefixCache;
using serve::PrefixSnapshot;

std::shared_ptr<const PrefixSnapshot> fake(int64_t pos, size_t bytes) {
    auto s = std::make_shared<PrefixSnapshot>();
    s->pos = pos;
    s->bytes = bytes;
    return s;
}

TEST(PrefixCache, LongestPrefixWithinTheBound) {
    PrefixCache cache(1000);
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
    cache.insert(std::span(a).first(2), fake(2, 10));
    cache.insert(std::span(a).first(5), fake(5, 10));
    cache.insert(std::span(a).first(8), fake(8, 10));
    EXPECT_EQ(cache.entries(), 3);
    EXPECT_EQ(cache.bytes(), 30u);
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    EXPECT_EQ(cache.lookup(prompt, 8).tokens, 8);
    EXPECT_EQ(cache.lookup(prompt, 7).tokens, 5);  // at least one prompt token must be left to run
    EXPECT_EQ(cache.lookup(prompt, 1).tokens, 0);
    EXPECT_EQ(cache.lookup(prompt, 1).snapshot, nullptr);
    // A prompt that diverges at token 3 only shares the 2-token prefix.
    const std::vector<int32_t> other = {1, 2, 9, 4, 5, 6, 7, 8, 9};
    const PrefixCache::Hit hit = cache.lookup(other, 8);
    EXPECT_EQ(hit.tokens, 2);
    ASSERT_NE(hit.snapshot, nullptr);
    EXPECT_EQ(hit.snapshot->pos, 2);
    // The same prefix again is not stored twice.
    cache.insert(std::span(a).first(5), fake(5, 10));
    EXPECT_EQ(cache.entries(), 3);
    // Nothing in common.
    EXPECT_EQ(cache.lookup(std::vector<int32_t>{9, 9, 9}, 2).snapshot, nullptr);
}

TEST(PrefixCache, LeastRecentlyUsedIsEvictedByBytes) {
    PrefixCache cache(100);
    const std::vector<int32_t> a = {1, 1, 1}, b = {2, 2, 2}, c = {3, 3, 3}, d = {4, 4, 4};
    cache.insert(a, fake(3, 40));
    cache.insert(b, fake(3, 40));
    EXPECT_EQ(cache.lookup(std::vector<int32_t>{1, 1, 1, 0}, 3).tokens, 3);  // a is now the most recent
    cache.insert(c, fake(3, 40));                                            // 120 > 100: b goes
    EXPECT_EQ(cache.entries(), 2);
    EXPECT_EQ(cache.bytes(), 80u);
    EXPECT_EQ(cache.lookup(std::vector<int32_t>{2, 2, 2, 0}, 3).snapshot, nullptr);
    EXPECT_EQ(cache.lookup(std::vector<int32_t>{1, 1, 1, 0}, 3).tokens, 3);
    EXPECT_EQ(cache.lookup(std::vector<int32_t>{3, 3, 3, 0}, 3).tokens, 3);
    cache.insert(d, fake(3, 500));  // larger than the whole budget: not kept, nothing evicted
    EXPECT_EQ(cache.entries(), 2);
    EXPECT_EQ(cache.lookup(std::vector<int32_t>{4, 4, 4, 0}, 3).snapshot, nullptr);
}

// The logits of `tokens` fed one by one into the slot (f32 rows of n tokens each).
std::vector<float> run(serve::CpuBatchBackend& backend, int32_t slot, const std::vector<int32_t>& tokens) {
    std::vector<float> logits, all;
    for (size_t i = 0; i < tokens.size(); ++i) {
        const serve::StepRow row{slot, std::span(tokens).subspan(i, 1), 1};
        backend.step({&row, 1}, logits);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
}

TEST(CpuBatchBackend, RestoredSnapshotContinuesExactly) {
    auto teacher = test::tiny_teacher();
    auto hybrid = test::tiny_hybrid(*teacher);
    const int64_t V = teacher->config().vocab_size;
    const auto prefix = test::random_tokens(17, V, 5), rest = test::random_tokens(6, V, 6);
    for (const LlamaModel* model : {teacher.get(), hybrid.get()}) {
        serve::CpuBatchBackend backend(*model, 2, 64, size_t(16) << 20);
        const int32_t a = backend.acquire();
        ASSERT_TRUE(backend.reserve(a, 40));
        const serve::StepRow row{a, prefix, 0};
        std::vector<float> logits;
        backend.step({&row, 1}, logits);
        EXPECT_TRUE(logits.empty());
        auto snap = backend.snapshot(a);
        EXPECT_EQ(snap->pos, 17);
        EXPECT_GT(snap->bytes, 0u);
        const std::vector<float> want = run(backend, a, rest);
        backend.release(a);
        // A fresh slot (its memory reused) restored from the snapshot gives the same logits, bit for bit.
        const int32_t b = backend.acquire();
        ASSERT_TRUE(backend.reserve(b, 40));
        backend.restore(b, *snap);
        EXPECT_EQ(backend.pos(b), 17);
        const std::vector<float> got = run(backend, b, rest);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    }
}

// A reservation that grows keeps what the slot holds: the slot continues like a single cache.
TEST(CpuBatchBackend, GrowingAReservationKeepsTheCache) {
    auto teacher = test::tiny_teacher();
    auto hybrid = test::tiny_hybrid(*teacher);
    const int64_t V = teacher->config().vocab_size;
    const auto prefix = test::random_tokens(9, V, 7), rest = test::random_tokens(5, V, 8);
    for (const LlamaModel* model : {teacher.get(), hybrid.get()}) {
        serve::CpuBatchBackend backend(*model, 1, 64, size_t(16) << 20);
        const int32_t a = backend.acquire();
        ASSERT_TRUE(backend.reserve(a, 9));
        const serve::StepRow row{a, prefix, 1};
        std::vector<float> logits;
        backend.step({&row, 1}, logits);
        ASSERT_TRUE(backend.reserve(a, 14));
        const std::vector<float> got = run(backend, a, rest);
        KVCache cache(*model, 14);
        forward_hidden(*model, prefix, cache);
        std::vector<float> want;
        for (size_t i = 0; i < rest.size(); ++i) {
            const Tensor l = forward_last_logits(*model, std::span(rest).subspan(i, 1), cache);
            want.insert(want.end(), l.f32(), l.f32() + V);
        }
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
    }
}

TEST(CpuBatchBackend, ReservationsStayWithinTheBudget) {
    auto teacher = test::tiny_teacher();
    const size_t per_token = KVCache(*teacher, 1).bytes_per_token();
    serve::CpuBatchBackend backend(*teacher, 3, 64, 100 * per_token);
    const int32_t a = backend.acquire(), b = backend.acquire(), c = backend.acquire();
    EXPECT_EQ(backend.acquire(), -1);
    EXPECT_TRUE(backend.reserve(a, 60));
    EXPECT_FALSE(backend.reserve(b, 41));
    EXPECT_TRUE(backend.reserve(b, 40));
    EXPECT_FALSE(backend.reserve(c, 1));
    EXPECT_EQ(backend.usage().used_bytes, 100 * per_token);
    backend.release(a);
    EXPECT_TRUE(backend.reserve(c, 60));
    EXPECT_EQ(backend.usage().used_slots, 2);
    EXPECT_THROW(backend.reserve(c, 65), Error);  // past the context
}

}  // namespace
}  // namespace hydra
