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

TEST(DecodeGraphPolicy, SplitsCoverEveryLengthWithFewGraphs) {
    const int64_t kps = 128;
    for (int64_t capacity : {1, 127, 128, 129, 300, 1024, 8192, 32768 + 211}) {
        std::set<int64_t> graphs;
        int64_t prev = 0;
        for (int64_t L = 1; L <= capacity; ++L) {
            const int64_t s = decode_graph_splits(L, capacity, kps);
            const int64_t need = (L + kps - 1) / kps, most = (capacity + kps - 1) / kps;
            ASSERT_GE(s, need) << "L " << L << " capacity " << capacity;  // the grid covers every key
            ASSERT_LE(s, most);                                            // never beyond the cache's partials
            ASSERT_LT(s, 2 * need) << "L " << L;                           // under half of the blocks spare
            ASSERT_GE(s, prev);                                            // graphs change only upwards
            prev = s;
            graphs.insert(s);
        }
        int64_t log2_most = 0;
        while ((int64_t(1) << (log2_most + 1)) <= (capacity + kps - 1) / kps) ++log2_most;
        EXPECT_LE(int64_t(graphs.size()), log2_most + 2) << "capacity " << capacity;
    }
}
