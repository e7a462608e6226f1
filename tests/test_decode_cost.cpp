// eval/decode_cost: one sequence's prefill and decode on the CPU. The cache it reports is the KV rows of
// every position (context + steps) plus the GDN state, as the model's plan lays it out; the context ids are
// seeded and inside the vocabulary; bad requests are refused.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "eval/decode_cost.h"
#include "model/hybrid_conversion.h"
#include "model/kv_cache.h"
#include "model/plan_builders.h"
#include "tiny_model.h"

namespace hydra {
namespace {

// 3 layers, 6 query heads on 2 KV heads of 8, a vocabulary of 61
ModelConfig config() {
    return test::tiny_llama_config({});
}

TEST(DecodeCost, CacheOfEveryPositionAndTheState) {
    LlamaModel teacher(config());
    test::randomize_params(teacher, 5, 0.2f);
    PlanRequest r;
    r.select = "random";
    r.granularity = "kv";
    r.ratio = parse_ratio("1:1", "test");
    r.fusion = FusionKind::ScaleNorm;
    r.seed = 3;
    const auto hybrid = convert_to_hybrid(teacher, build_plan(teacher.config(), r), ConversionOptions{});
    const std::vector<int32_t> ids = random_token_ids(40, 61, 7);
    ASSERT_EQ(ids.size(), 40u);
    EXPECT_EQ(random_token_ids(40, 61, 7), ids);  // seeded
    for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && id < 61);

    const DecodeCost t = measure_decode_cost(teacher, ids, 5), h = measure_decode_cost(*hybrid, ids, 5);
    for (const DecodeCost* c : {&t, &h}) {
        EXPECT_EQ(c->context, 40);
        EXPECT_EQ(c->decode_tokens, 5);
        EXPECT_GT(c->prefill_seconds, 0.0);
        EXPECT_GT(c->decode_tokens_per_second, 0.0);
    }
    // teacher: 3 layers x 2 KV heads x 8 x (K, V) x fp32 per position, no state
    EXPECT_EQ(t.kv_bytes_per_token, size_t(3 * 2 * 8 * 2 * 4));
    EXPECT_EQ(t.cache_bytes, t.kv_bytes_per_token * 45);
    // the 1:1 hybrid keeps one KV head of two a layer, and carries its LA heads' state besides
    KVCache layout(*hybrid, 1);
    EXPECT_EQ(h.kv_bytes_per_token * 2, t.kv_bytes_per_token);
    EXPECT_EQ(h.cache_bytes, h.kv_bytes_per_token * 45 + layout.state_bytes());
    EXPECT_GT(layout.state_bytes(), 0u);
}

TEST(DecodeCost, RefusesAnEmptyContextNoStepsAndIdsOutsideTheVocabulary) {
    LlamaModel m(config());
    test::randomize_params(m, 5, 0.2f);
    const std::vector<int32_t> ok = {1, 2, 3}, bad = {1, 61, 3};
    EXPECT_THROW(measure_decode_cost(m, std::vector<int32_t>{}, 3), Error);
    EXPECT_THROW(measure_decode_cost(m, ok, 0), Error);
    EXPECT_THROW(measure_decode_cost(m, bad, 3), Error);
    EXPECT_THROW(random_token_ids(3, 0, 1), Error);
}

}  // namespace
}  // namespace hydra
