// Head zero-ablation (model/head_ablation): the ablated model's forward equals the intact model's with
// those heads' outputs overwritten by zeros through a head_out tap (an independent route to the same
// ablation), only the ablated o_proj columns change, and head choice / spec parsing behave.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "core/error.h"
#include "model/head_ablation.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/taps.h"
#include "tiny_model.h"

using namespace hydra;

namespace {

ModelConfig ablation_config() { return test::tiny_llama_config({}); }

void randomize(LlamaModel& m, uint64_t seed) { test::randomize_params(m, seed); }

std::vector<float> hidden(const LlamaModel& m, const std::vector<int32_t>& ids, const Taps* taps) {
    KVCache cache(m.config(), int64_t(ids.size()));
    ForwardOptions o;
    o.taps = taps;
    o.quantized_decode = false;
    const Tensor h = forward_hidden(m, ids, cache, o);
    return std::vector<float>(h.f32(), h.f32() + h.numel());
}

}  // namespace

TEST(HeadAblation, EqualsZeroedHeadOutputs) {
    const ModelConfig c = ablation_config();
    LlamaModel intact(c);
    randomize(intact, 7);
    LlamaModel ablated(c);
    std::copy_n(intact.params().data(), intact.params().numel(), ablated.params().data());
    const std::vector<HeadRef> heads = {{0, 1}, {1, 4}, {2, 0}, {2, 5}};
    zero_ablate_heads(ablated, heads);

    Taps taps;
    for (int64_t l = 0; l < c.num_layers; ++l)
        taps.on("blk." + std::to_string(l) + ".head_out", [l, &heads](std::string_view, int, Tensor& t) {
            const int64_t T = t.dim(0), H = t.dim(1), Dh = t.dim(2);
            for (const auto& [hl, hh] : heads)
                if (hl == l)
                    for (int64_t p = 0; p < T; ++p) std::fill_n(t.f32() + (p * H + hh) * Dh, Dh, 0.0f);
        });
    const std::vector<int32_t> ids = {3, 17, 42, 8, 0, 49, 25, 11, 30, 7, 19, 5, 60};
    const std::vector<float> a = hidden(ablated, ids, nullptr), b = hidden(intact, ids, &taps),
                             base = hidden(intact, ids, nullptr);
    double diff = 0, moved = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        diff = std::max(diff, double(std::abs(a[i] - b[i])));
        moved = std::max(moved, double(std::abs(a[i] - base[i])));
    }
    EXPECT_LT(diff, 1e-5);
    EXPECT_GT(moved, 1e-2);  // the ablation does change the model

    // Only the ablated o_proj columns differ.
    int64_t changed = 0;
    for (int64_t i = 0; i < intact.params().numel(); ++i) changed += intact.params().data()[i] != ablated.params().data()[i];
    EXPECT_EQ(changed, int64_t(heads.size()) * c.hidden_size * c.head_dim);
}

TEST(HeadAblation, HeadChoiceAndSpecs) {
    const std::vector<std::vector<double>> scores = {{0.1, 0.9, 0.2}, {0.5, 0.0, 0.95}};
    const std::vector<HeadRef> top = top_scored_heads(scores, 3);
    EXPECT_EQ(top, (std::vector<HeadRef>{{1, 2}, {0, 1}, {1, 0}}));
    const std::vector<HeadRef> r1 = random_heads(30, 9, 34, 1), r2 = random_heads(30, 9, 34, 1),
                               r3 = random_heads(30, 9, 34, 2);
    EXPECT_EQ(r1, r2);
    EXPECT_NE(r1, r3);
    EXPECT_EQ(std::set<HeadRef>(r1.begin(), r1.end()).size(), 34u);
    EXPECT_EQ(parse_ablation("top:2", 2, 3, &scores), (std::vector<HeadRef>{{1, 2}, {0, 1}}));
    EXPECT_EQ(parse_ablation("random:34:1", 30, 9, nullptr), r1);
    EXPECT_EQ(parse_ablation("3:4,0:0", 30, 9, nullptr), (std::vector<HeadRef>{{3, 4}, {0, 0}}));
    EXPECT_THROW(parse_ablation("top:2", 2, 3, nullptr), Error);       // needs scores
    EXPECT_THROW(parse_ablation("random:2", 2, 3, nullptr), Error);    // no seed
    EXPECT_THROW(parse_ablation("3:x", 30, 9, nullptr), Error);        // not a number
    EXPECT_THROW(parse_ablation("3:41,2:0", 30, 9, nullptr), Error);   // head 41 of 9 (the fuzzer's find)
    EXPECT_THROW(parse_ablation("30:0", 30, 9, nullptr), Error);       // layer 30 of 30
    EXPECT_THROW(parse_ablation("1:99999999999999999999", 30, 9, nullptr),
                 Error);                                                // past int64 (was std::out_of_range)
    EXPECT_THROW(random_heads(2, 3, 7, 1), Error);                      // more heads than the model has
    LlamaModel m(ablation_config());
    EXPECT_THROW(zero_ablate_heads(m, {{3, 0}}), Error);                // layer out of range
}
