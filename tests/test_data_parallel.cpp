// Tests of the data-parallel layer's logic, no GPU (src/train: dist_env, zero_shards, grad_buckets,
// gradient_sync, tcp_rendezvous, worker_launcher): environment validation, shard ranges and bucket
// assignment (coverage without overlap, alignment, uneven sizes), the bucket launch order, and ZeRO-1
// training over tests/thread_collective.h (W threads standing in for W GPUs) running the same bucket /
// shard / gather code as the CUDA engine: W = 1, 2, 4 give bit-identical parameters and AdamW state, and a
// run saved with W = 2 resumes with W = 1, 3, 4 to the same full state. Then the TCP rendezvous on
// localhost and the launcher's supervision with real child processes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "thread_collective.h"
#include "train/adamw.h"
#include "train/dist_env.h"
#include "train/grad_buckets.h"
#include "train/gradient_sync.h"
#include "train/tcp_rendezvous.h"
#include "train/worker_launcher.h"
#include "train/zero_shards.h"

namespace hydra {
namespace {

using test::run_ranks;
using test::ThreadCollective;

template <typename Fn>
void expect_error(Fn&& fn, const std::string& part) {
    try {
        fn();
        ADD_FAILURE() << "no hydra::Error thrown; expected one mentioning " << part;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
            << "'" << part << "' not in: " << e.what();
    }
}

std::optional<DistEnv> parse(const std::map<std::string, std::string>& env) {
    return parse_dist_env([&](const char* k) -> const char* {
        auto it = env.find(k);
        return it == env.end() ? nullptr : it->second.c_str();
    });
}

TEST(DistEnv, ParsesAndValidates) {
    EXPECT_FALSE(parse({}).has_value());
    EXPECT_FALSE(parse({{"MASTER_ADDR", "x"}}).has_value());  // addresses alone do not make a rank
    const auto one = parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
    ASSERT_TRUE(one.has_value());
    EXPECT_EQ(one->world_size, 1);
    EXPECT_EQ(one->local_rank, 0);
    const auto e = parse({{"RANK", "3"},
                          {"WORLD_SIZE", "4"},
                          {"LOCAL_RANK", "1"},
                          {"MASTER_ADDR", "node7"},
                          {"MASTER_PORT", "29500"}});
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->rank, 3);
    EXPECT_EQ(e->world_size, 4);
    EXPECT_EQ(e->local_rank, 1);
    EXPECT_EQ(e->master_addr, "node7");
    EXPECT_EQ(e->master_port, 29500);
    EXPECT_FALSE(e->is_root());
    EXPECT_EQ(parse(e->to_env())->rank, 3);  // the launcher's environment parses back
    EXPECT_EQ(
        parse({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}})->local_rank,
        2);

    expect_error([] { parse({{"RANK", "x1"}, {"WORLD_SIZE", "2"}}); }, "RANK='x1' is not a decimal integer");
    expect_error(
        [] {
            parse({{"RANK", "0"}, {"WORLD_SIZE", ""}});
        },
        "WORLD_SIZE='' is not a decimal integer");
    expect_error([] { parse({{"RANK", "1"}, {"WORLD_SIZE", "2.0"}}); }, "WORLD_SIZE='2.0'");
    expect_error(
        [] {
            parse({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}});
        },
        "RANK=2 must be smaller than WORLD_SIZE=2");
    expect_error([] { parse({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}); }, "RANK=-1 is outside");
    expect_error([] { parse({{"RANK", "0"}, {"WORLD_SIZE", "0"}}); }, "WORLD_SIZE=0 is outside");
    expect_error([] { parse({{"RANK", "0"}}); }, "WORLD_SIZE is not");
    expect_error([] { parse({{"WORLD_SIZE", "2"}}); }, "RANK is not");
    expect_error([] { parse({{"LOCAL_RANK", "0"}}); }, "incomplete");
    expect_error(
        [] {
            parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500"}});
        },
        "needs MASTER_ADDR");
    expect_error(
        [] {
            parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}});
        },
        "needs MASTER_PORT");
    expect_error(
        [] {
            parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}});
        },
        "MASTER_PORT=70000 is outside [1, 65535]");
    expect_error([] { parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "-2"}}); }, "LOCAL_RANK=-2");
    expect_error([] { parse({{"RANK", "99999999999999999999"}, {"WORLD_SIZE", "2"}}); }, "RANK=");
}

// Spans of uneven sizes at 16-aligned offsets (ParamArena's padding), one frozen.
std::vector<ParamSpan> test_spans(int64_t& n_total) {
    const std::vector<int64_t> sizes = {300, 17, 1, 129, 64, 250, 33, 5, 400, 96};
    std::vector<ParamSpan> spans;
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
        ParamSpan s;
        s.name = "p" + std::to_string(i);
        s.offset = off;
        s.size = sizes[i];
        s.lr_scale = i % 3 == 0 ? 0.5f : 1.0f;
        s.wd_scale = i % 2 == 0 ? 1.0f : 0.0f;
        s.trainable = i != 4;
        spans.push_back(s);
        off += (sizes[i] + 15) / 16 * 16;
    }
    n_total = off;
    return spans;
}

TEST(ZeroShards, RangesCoverWithoutOverlapAligned) {
    int64_t n = 0;
    const std::vector<ParamSpan> spans = test_spans(n);
    for (int W : {1, 2, 3, 4, 5, 7, 16, 200})
        for (int64_t align : {1, 16, 128})
            for (bool weighted : {false, true}) {
                const auto rs = shard_ranges(n, W, align, weighted ? spans : std::vector<ParamSpan>{});
                ASSERT_EQ(rs.size(), size_t(W));
                EXPECT_EQ(rs.front().begin, 0);
                EXPECT_EQ(rs.back().end, n);
                int64_t trainable = 0;
                for (int r = 0; r < W; ++r) {
                    EXPECT_LE(rs[size_t(r)].begin, rs[size_t(r)].end);
                    if (r > 0) {
                        EXPECT_EQ(rs[size_t(r)].begin, rs[size_t(r - 1)].end);
                    }
                    if (r + 1 < W && rs[size_t(r)].end != n) {
                        EXPECT_EQ(rs[size_t(r)].end % align, 0);
                    }
                    trainable += trainable_in(spans, rs[size_t(r)]);
                }
                EXPECT_EQ(trainable, trainable_in(spans, {0, n}));
                // balance: no shard holds more than its share plus one alignment group
                if (W <= 7) {
                    const int64_t total = weighted ? trainable_in(spans, {0, n}) : n;
                    for (const ElemRange& r : rs) {
                        const int64_t w = weighted ? trainable_in(spans, r) : r.size();
                        EXPECT_LE(w, (total + W - 1) / W + align) << "W " << W << " align " << align;
                    }
                }
            }
    expect_error([] { shard_ranges(10, 0, 16); }, "world size 0");
    expect_error([] { shard_ranges(10, 2, 0); }, "alignment 0");
    ParamSpan out_of_range;
    out_of_range.name = "w";
    out_of_range.offset = 5;
    out_of_range.size = 10;
    expect_error([&] { shard_ranges(10, 2, 1, {out_of_range}); }, "span 'w'");
    // an empty arena: W empty ranges
    for (const ElemRange& r : shard_ranges(0, 3, 16)) EXPECT_TRUE(r.empty());
}

TEST(ZeroShards, ClipSpansSplitsAtBoundaries) {
    int64_t n = 0;
    const std::vector<ParamSpan> spans = test_spans(n);
    const auto rs = shard_ranges(n, 3, 16, spans);
    std::vector<int> covered(size_t(n), 0);
    for (const ElemRange& r : rs)
        for (const ParamSpan& c : clip_spans(spans, r)) {
            EXPECT_GE(c.offset, r.begin);
            EXPECT_LE(c.offset + c.size, r.end);
            EXPECT_GT(c.size, 0);
            for (int64_t i = c.offset; i < c.offset + c.size; ++i) ++covered[size_t(i)];
        }
    for (const ParamSpan& s : spans)
        for (int64_t i = s.offset; i < s.offset + s.size; ++i) EXPECT_EQ(covered[size_t(i)], 1) << i;
    const auto piece = clip_spans(spans, {10, 20});
    ASSERT_EQ(piece.size(), 1u);
    EXPECT_EQ(piece[0].name, "p0");
    EXPECT_EQ(piece[0].offset, 10);
    EXPECT_EQ(piece[0].size, 10);
    EXPECT_EQ(piece[0].lr_scale, 0.5f);
}

std::vector<GradItem> items_of(const std::vector<ParamSpan>& spans, int64_t n, int n_events) {
    // each span with its padding; events in reverse order of the spans (the backward visits the last first)
    std::vector<GradItem> items;
    for (size_t i = 0; i < spans.size(); ++i) {
        const int64_t end = i + 1 < spans.size() ? spans[i + 1].offset : n;
        items.push_back({spans[i].offset, end, int(spans.size() - 1 - i) * n_events / int(spans.size())});
    }
    return items;
}

TEST(GradBuckets, CoverEveryItemOnceInBackwardOrder) {
    int64_t n = 0;
    const std::vector<ParamSpan> spans = test_spans(n);
    for (int64_t cap : {1, 16, 100, 256, 10000})
        for (int64_t align : {1, 16}) {
            const std::vector<GradItem> items = items_of(spans, n, 5);
            const auto buckets = assign_buckets(items, cap, align);
            std::vector<int> covered(size_t(n), 0);
            int prev_max_event = -1;
            for (const GradBucket& b : buckets) {
                int64_t e = 0;
                for (size_t k = 0; k < b.ranges.size(); ++k) {
                    e += b.ranges[k].size();
                    if (k > 0) {
                        EXPECT_LT(b.ranges[k - 1].end, b.ranges[k].begin);  // merged when adjacent
                    }
                    for (int64_t i = b.ranges[k].begin; i < b.ranges[k].end; ++i) ++covered[size_t(i)];
                }
                EXPECT_EQ(e, b.elements);
                EXPECT_GT(b.elements, 0);
                // a bucket exceeds the cap only by one aligned piece of a split item
                EXPECT_LE(b.elements, std::max(cap, align));
                ASSERT_FALSE(b.events.empty());
                EXPECT_TRUE(std::is_sorted(b.events.begin(), b.events.end()));
                EXPECT_GE(b.events.back(), prev_max_event);  // readiness is monotone
                prev_max_event = b.events.back();
            }
            for (int64_t i = 0; i < n; ++i)
                EXPECT_EQ(covered[size_t(i)], 1) << "cap " << cap << " elem " << i;
            // deterministic: the same items in another order give the same buckets
            std::vector<GradItem> shuffled = items;
            std::reverse(shuffled.begin(), shuffled.end());
            const auto again = assign_buckets(shuffled, cap, align);
            ASSERT_EQ(again.size(), buckets.size());
            for (size_t b = 0; b < buckets.size(); ++b) {
                EXPECT_EQ(again[b].ranges, buckets[b].ranges);
                EXPECT_EQ(again[b].events, buckets[b].events);
            }
        }
    // the first bucket holds the end of the arena (reverse parameter order)
    const auto b = assign_buckets(items_of(spans, n, 10), 100, 16);
    EXPECT_EQ(b.front().ranges.back().end, n);
    // split pieces start at aligned offsets
    const auto big = assign_buckets({{3, 1000, 0}}, 100, 16);
    for (const GradBucket& g : big)
        for (const ElemRange& r : g.ranges)
            if (r.begin != 3) {
                EXPECT_EQ(r.begin % 16, 0);
            }
    expect_error([] { assign_buckets({{0, 10, 0}, {5, 20, 1}}, 100); }, "overlap");
    expect_error([] { assign_buckets({{10, 5, 0}}, 100); }, "bad item");
    expect_error([] { assign_buckets({{0, 5, 0}}, 0); }, "bucket size 0");
}

TEST(GradBuckets, TrackerLaunchesInBucketOrder) {
    // buckets 0..3 with events {0}, {0, 1}, {2}, {3}
    std::vector<GradBucket> buckets(4);
    buckets[0].events = {0};
    buckets[1].events = {0, 1};
    buckets[2].events = {2};
    buckets[3].events = {3};
    BucketTracker t(buckets, 4);
    EXPECT_EQ(t.fire(2), std::vector<int>{});  // bucket 2 is ready but 0 and 1 are not launched
    EXPECT_EQ(t.fire(0), std::vector<int>{0});
    EXPECT_EQ(t.fire(0), std::vector<int>{});  // a repeated event is ignored
    EXPECT_EQ(t.fire(1), (std::vector<int>{1, 2}));
    EXPECT_EQ(t.finish(), std::vector<int>{3});  // event 3 never fired
    t.reset();
    EXPECT_EQ(t.launched(), 0);
    EXPECT_EQ(t.fire(0), std::vector<int>{0});
    expect_error([&] { t.fire(4); }, "event 4");
    expect_error(
        [] {
            BucketTracker(std::vector<GradBucket>(1, GradBucket{{}, {5}, 0}), 2);
        },
        "names event 5");
}

// ---- ZeRO-1 training over W threads ------------------------------------------------------------------

// Full (unsharded) training state.
struct FullState {
    std::vector<float> params, m, v;
    int64_t step = 0;
    bool operator==(const FullState&) const = default;
};

constexpr int kRows = 4;    // global batch rows
constexpr int kEvents = 5;  // backward events

// Row b's gradient at step t: multiples of 2^-10 with small numerators, so every sum and every mean over
// 1, 2 or 4 rows or ranks is exact in fp32 and the squares' sums are exact in fp64: any W must then give
// bit-identical results, and a wrong bucket, shard or gather changes them.
float row_grad(int64_t i, int b, int64_t t) {
    return float(int((i * 7 + b * 13 + t * 5) % 17) - 8) / 1024.0f;
}

// One rank's run of `steps` ZeRO-1 steps from `start` (the full state, as a checkpoint holds it): the
// backward writes each event's gradients (the mean over this rank's rows) and fires the event, GradientSync
// averages the buckets, the global norm is the all-reduced sum of the shards' squares, AdamW updates this
// rank's shard only, the parameters are all-gathered; at the end m and v are gathered to rank 0.
FullState zero_run(ThreadCollective& c, const FullState& start, int64_t steps, double clip, int64_t cap) {
    int64_t n = 0;
    const std::vector<ParamSpan> spans = test_spans(n);
    const int W = c.world_size(), r = c.rank();
    const std::vector<ElemRange> shards = shard_ranges(n, W, 16, spans);
    const std::vector<ParamSpan> mine = clip_spans(spans, shards[size_t(r)]);
    const std::vector<GradItem> items = items_of(spans, n, kEvents);
    GradientSync sync(c, assign_buckets(items, cap, 16), kEvents);
    AdamWConfig ac;
    ac.lr = 0.01f;
    AdamW opt(ac, n);
    // re-sharding on load: this rank keeps only its range of the full m, v (the rest stays zero)
    std::vector<float> m(size_t(n), 0.f), v(size_t(n), 0.f);
    const ElemRange s = shards[size_t(r)];
    std::copy(start.m.begin() + s.begin, start.m.begin() + s.end, m.begin() + s.begin);
    std::copy(start.v.begin() + s.begin, start.v.begin() + s.end, v.begin() + s.begin);
    opt.load_state(m.data(), v.data(), n, start.step);
    std::vector<float> params = start.params, grads(static_cast<size_t>(n));
    const int rows = int(kRows / W);
    for (int64_t t = 0; t < steps; ++t) {
        std::fill(grads.begin(), grads.end(), 0.f);
        sync.begin(grads.data());
        for (int e = 0; e < kEvents; ++e) {
            for (const GradItem& it : items)
                if (it.event == e)
                    for (int64_t i = it.begin; i < it.end; ++i) {
                        float g = 0;
                        for (int k = 0; k < rows; ++k) g += row_grad(i, r + k * W, opt.step_count());
                        grads[size_t(i)] = g / float(rows);
                    }
            sync.event(e);
        }
        sync.finish();
        c.synchronise();
        double sumsq = 0;
        for (const ParamSpan& sp : mine)
            if (sp.trainable)
                for (int64_t i = sp.offset; i < sp.offset + sp.size; ++i)
                    sumsq += double(grads[size_t(i)]) * grads[size_t(i)];
        c.all_reduce(&sumsq, CollType::F64, {{0, 1}}, false);
        clip_grads(grads.data(), mine, clip, std::sqrt(sumsq));
        opt.step(params.data(), grads.data(), n, mine);
        c.all_gather(params.data(), CollType::F32, shards);
    }
    std::copy(opt.m(), opt.m() + n, m.begin());
    std::copy(opt.v(), opt.v() + n, v.begin());
    c.gather_to_root(m.data(), CollType::F32, shards, 0);
    c.gather_to_root(v.data(), CollType::F32, shards, 0);
    return FullState{params, m, v, opt.step_count()};
}

FullState run_world(int W, const FullState& start, int64_t steps, double clip = 0.01, int64_t cap = 100) {
    std::vector<FullState> out(static_cast<size_t>(W));
    run_ranks(W, [&](ThreadCollective& c) { out[size_t(c.rank())] = zero_run(c, start, steps, clip, cap); });
    // every rank holds the full parameters; rank 0 the full state
    for (int r = 1; r < W; ++r) EXPECT_EQ(out[size_t(r)].params, out[0].params) << "rank " << r;
    return out[0];
}

FullState initial_state() {
    int64_t n = 0;
    test_spans(n);
    FullState s;
    s.params.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) s.params[size_t(i)] = float(int(i % 29) - 14) / 64.0f;
    s.m.assign(size_t(n), 0.f);
    s.v.assign(size_t(n), 0.f);
    return s;
}

TEST(ZeroTraining, AnyWorldSizeIsBitIdentical) {
    const FullState start = initial_state();
    const FullState one = run_world(1, start, 4);
    EXPECT_NE(one.params, start.params);
    EXPECT_EQ(one.step, 4);
    for (int W : {2, 4}) {
        for (int64_t cap : {16, 100, 100000}) {
            const FullState w = run_world(W, start, 4, 0.01, cap);
            EXPECT_TRUE(w == one) << "W " << W << " cap " << cap;
        }
    }
    // clipping active and inactive both agree (0.01 clips these gradients, whose norm is about 0.045; 1e9
    // does not)
    EXPECT_TRUE(run_world(2, start, 3, 1e9) == run_world(1, start, 3, 1e9));
    EXPECT_FALSE(run_world(1, start, 3, 1e9) == run_world(1, start, 3, 0.01));
}

TEST(ZeroTraining, ResumesOnAnotherWorldSize) {
    const FullState start = initial_state();
    const FullState continuous = run_world(1, start, 4);
    const FullState saved = run_world(2, start, 2);  // the checkpoint of a 2-rank run
    EXPECT_EQ(saved.step, 2);
    // re-sharding alone: load on W ranks, gather again -> the saved full state, for every W
    for (int W : {1, 2, 3, 4}) EXPECT_TRUE(run_world(W, saved, 0) == saved) << "W " << W;
    // and training on from it: the continuous run's state
    for (int W : {1, 2, 4}) EXPECT_TRUE(run_world(W, saved, 2) == continuous) << "W " << W;
}

TEST(ZeroTraining, FrozenAndPaddingUntouched) {
    const FullState start = initial_state();
    const FullState w = run_world(4, start, 3);
    int64_t n = 0;
    const auto spans = test_spans(n);
    std::vector<char> trainable(size_t(n), 0);
    for (const ParamSpan& s : spans)
        for (int64_t i = s.offset; i < s.offset + s.size; ++i) trainable[size_t(i)] = s.trainable;
    for (int64_t i = 0; i < n; ++i)
        if (!trainable[size_t(i)]) {
            EXPECT_EQ(w.params[size_t(i)], start.params[size_t(i)]) << i;
            EXPECT_EQ(w.m[size_t(i)], 0.f) << i;
        }
}

TEST(ThreadCollective, GatherToRootLeavesOthers) {
    run_ranks(3, [](ThreadCollective& c) {
        std::vector<float> buf(9, float(c.rank() + 1));
        const std::vector<ElemRange> owned = {{0, 2}, {2, 2}, {2, 9}};
        c.gather_to_root(buf.data(), CollType::F32, owned, 0);
        if (c.rank() == 0) {
            EXPECT_EQ(buf, (std::vector<float>{1, 1, 3, 3, 3, 3, 3, 3, 3}));
        } else {
            EXPECT_EQ(buf, std::vector<float>(9, float(c.rank() + 1)));
        }
        EXPECT_TRUE(c.any(c.rank() == 2));
        EXPECT_FALSE(c.any(false));
    });
}

// ---- rendezvous and launcher -------------------------------------------------------------------------

TEST(Rendezvous, BroadcastsTheBlobOverTcp) {
    const int port = pick_free_port();
    const int W = 4;
    std::vector<std::string> got(W);
    std::string blob(128, '\0');
    for (size_t i = 0; i < blob.size(); ++i) blob[i] = char(i * 7 + 1);
    std::vector<std::thread> ts;
    for (int r = W - 1; r >= 0; --r)  // peers first: they retry until rank 0 listens
        ts.emplace_back([&, r] {
            DistEnv e;
            e.rank = r, e.world_size = W, e.local_rank = r, e.master_addr = "127.0.0.1", e.master_port = port;
            got[size_t(r)] = rendezvous_broadcast(e, r == 0 ? blob : std::string(), 20.0);
        });
    for (auto& t : ts) t.join();
    for (int r = 0; r < W; ++r) EXPECT_EQ(got[size_t(r)], blob) << "rank " << r;
}

TEST(Rendezvous, MissingRankTimesOut) {
    DistEnv e;
    e.rank = 0, e.world_size = 3, e.master_addr = "127.0.0.1", e.master_port = pick_free_port();
    const auto t0 = std::chrono::steady_clock::now();
    expect_error([&] { rendezvous_broadcast(e, "x", 0.5); }, "only 1 of 3 ranks reached rank 0");
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
    DistEnv p = e;
    p.rank = 1;
    expect_error([&] { rendezvous_broadcast(p, "", 0.5); }, "could not reach rank 0");
    DistEnv one;
    EXPECT_EQ(rendezvous_broadcast(one, "abc", 1.0), "abc");
}

TEST(Rendezvous, RejectsWrongWorldSize) {
    const int port = pick_free_port();
    std::string root_error, peer_error;
    std::thread root([&] {
        DistEnv e;
        e.rank = 0, e.world_size = 2, e.master_addr = "127.0.0.1", e.master_port = port;
        try {
            rendezvous_broadcast(e, "id", 5.0);
        } catch (const Error& x) {
            root_error = x.what();
        }
    });
    DistEnv p;
    p.rank = 1, p.world_size = 3, p.master_addr = "127.0.0.1", p.master_port = port;
    try {
        rendezvous_broadcast(p, "", 5.0);
    } catch (const Error& x) {
        peer_error = x.what();
    }
    root.join();
    EXPECT_NE(root_error.find("says WORLD_SIZE=3, rank 0 has 2"), std::string::npos) << root_error;
    EXPECT_FALSE(peer_error.empty());
}

TEST(WorkerLauncher, OneFailureStopsTheOthers) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<pid_t> pids;
    pids.push_back(spawn_worker("/bin/sh", {"sh", "-c", "sleep 60"}, {}));
    pids.push_back(spawn_worker("/bin/sh", {"sh", "-c", "sleep 0.2; exit 3"}, {}));
    // ignores SIGTERM: the grace period ends in SIGKILL
    pids.push_back(spawn_worker("/bin/sh", {"sh", "-c", "trap '' TERM; sleep 60"}, {}));
    const SupervisionResult r = supervise_workers(pids, 1.0);
    EXPECT_EQ(r.exit_code, 3);
    EXPECT_EQ(r.failed_rank, 1);
    EXPECT_NE(r.message.find("worker rank 1"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("exited with status 3"), std::string::npos) << r.message;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
    for (pid_t p : pids) EXPECT_NE(::kill(p, 0), 0) << "worker " << p << " still alive";
}

TEST(WorkerLauncher, SuccessAndEnvironment) {
    // the worker sees the variables it is given (and exits 0 only if so)
    const pid_t ok = spawn_worker("/bin/sh", {"sh", "-c", "test \"$RANK:$WORLD_SIZE\" = 1:2"},
                                  {{"RANK", "1"}, {"WORLD_SIZE", "2"}});
    const SupervisionResult r = supervise_workers({ok}, 1.0);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_TRUE(r.message.empty());
    const pid_t killed = spawn_worker("/bin/sh", {"sh", "-c", "kill -9 $$"}, {});
    const SupervisionResult k = supervise_workers({killed}, 1.0);
    EXPECT_EQ(k.exit_code, 128 + 9);
    EXPECT_NE(k.message.find("killed by signal 9"), std::string::npos) << k.message;
    const pid_t missing = spawn_worker("/nonexistent/hydra", {"hydra"}, {});
    EXPECT_EQ(supervise_workers({missing}, 1.0).exit_code, 127);
}

}  // namespace
}  // namespace hydra
