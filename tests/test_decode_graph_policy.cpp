// Host-side rules of GPU decode with CUDA graphs (src/gpu/decode_graph_policy.h): the HYDRA_CUDA_GRAPHS
// switch and the decode-attention grid a step's graph is captured with. No GPU needed.
#include <gtest/gtest.h>

#include <set>

#include "gpu/decode_graph_policy.h"

using namespace hydra::gpu;

TEST(DecodeGraphPolicy, EnvSwitch) {
    EXPECT_TRUE(cuda_graphs_from_env(nullptr));
    EXPECT_TRUE(cuda_graphs_from_env(""));
    EXPECT_TRUE(cuda_graphs_from_env("1"));
    EXPECT_TRUE(cuda_graphs_from_env("on"));
    for (const char* off : {"0", "off", "OFF", "false", "False", "no"}) EXPECT_FALSE(cuda_graphs_from_env(off)) << off;
}

TEST(DecodeGraphPolicy, SplitsCoverEveryKeyOnce) {
    for (int64_t L = 1; L <= 300000; L += (L < 20000 ? 1 : 97)) {
        const int64_t kps = decode_keys_per_split(L), s = decode_attention_splits(L);
        ASSERT_EQ(kps % kMinKeysPerSplit, 0) << "L " << L;
        ASSERT_GE(s * kps, L) << "L " << L;        // the splits cover every key
        ASSERT_LT((s - 1) * kps, L) << "L " << L;  // and none is empty
        ASSERT_LE(s, kMaxDecodeSplits) << "L " << L;
        ASSERT_LE(s, decode_max_splits(L)) << "L " << L;
        // the shortest splits that stay under the cap
        if (kps > kMinKeysPerSplit) {
            ASSERT_GT((L + kps - kMinKeysPerSplit - 1) / (kps - kMinKeysPerSplit), kMaxDecodeSplits);
        }
    }
    EXPECT_EQ(decode_attention_splits(512), 8);
    EXPECT_EQ(decode_attention_splits(4096), 64);
    EXPECT_EQ(decode_keys_per_split(4097), 128);
    EXPECT_EQ(decode_attention_splits(4097), 33);  // not monotone: the cap below covers it
    EXPECT_EQ(decode_attention_splits(32768), 64);
    EXPECT_EQ(decode_keys_per_split(32768), 512);
}

TEST(DecodeGraphPolicy, SplitsCoverEveryLengthWithFewGraphs) {
    for (int64_t capacity : {1, 63, 64, 65, 300, 1024, 4096, 4097, 8193, 32768 + 211, 131072}) {
        std::set<int64_t> graphs;
        int64_t prev = 0;
        const int64_t most = decode_max_splits(capacity);
        for (int64_t L = 1; L <= capacity; ++L) {
            const int64_t s = decode_graph_splits(L, capacity);
            const int64_t need = decode_attention_splits(L);
            ASSERT_GE(s, need) << "L " << L << " capacity " << capacity;  // the grid covers every key
            ASSERT_LE(s, most);                                            // never beyond the cache's partials
            ASSERT_LT(s, 2 * need) << "L " << L;                           // under half of the blocks spare
            ASSERT_GE(s, prev);                                            // graphs change only upwards
            prev = s;
            graphs.insert(s);
        }
        int64_t log2_most = 0;
        while ((int64_t(1) << (log2_most + 1)) <= most) ++log2_most;
        EXPECT_LE(int64_t(graphs.size()), log2_most + 2) << "capacity " << capacity;
    }
}
