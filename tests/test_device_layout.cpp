// The device arena's layout (model/device_layout.h), host logic of the one GPU weight layout: a bijection
// of the host arena's tensors, the proj block / gate|up groups contiguous in the promised order, aligned
// groups, the bf16 / fp32 regions, and exact host -> device -> host round trips, for teacher, hybrid
// (each fusion kind), q/k-norm, bias, untied and head-granularity models.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/device_layout.h"
#include "model/llama_model.h"
#include "model/plan_builders.h"
#include "tiny_model.h"

using namespace hydra;

namespace {

struct Case {
    std::string name;
    bool bias = false, qk_norm = false, tied = true;
    std::string ratio;  // empty: the teacher
    std::string granularity = "kv";
    FusionKind fusion = FusionKind::ScaleNorm;
    int64_t hidden = 32, intermediate = 48;
};

ModelConfig config_of(const Case& k) {
    ModelConfig c = test::tiny_llama_config({.vocab = 61,
                                             .hidden = k.hidden,
                                             .intermediate = k.intermediate,
                                             .layers = 3,
                                             .heads = 6,
                                             .kv_heads = 2,
                                             .head_dim = 8});
    c.attention_bias = k.bias;
    c.qk_norm = k.qk_norm;
    c.tie_word_embeddings = k.tied;
    return c;
}

LlamaModel model_of(const Case& k) {
    const ModelConfig c = config_of(k);
    if (k.ratio.empty()) return LlamaModel(c);
    PlanRequest r;
    r.select = k.ratio == "1:0" ? "all-la" : "random";
    if (k.ratio != "1:0") r.ratio = parse_ratio(k.ratio, "test");
    r.granularity = k.granularity;
    r.fusion = k.fusion;
    r.seed = 3;
    const HybridPlan p = build_plan(c, r);
    return LlamaModel(c, &p);
}

Case make(const char* name, bool bias, bool qk_norm, bool tied, const char* ratio,
          const char* granularity = "kv", FusionKind fusion = FusionKind::ScaleNorm, int64_t hidden = 32,
          int64_t intermediate = 48) {
    Case k;
    k.name = name, k.bias = bias, k.qk_norm = qk_norm, k.tied = tied, k.ratio = ratio;
    k.granularity = granularity, k.fusion = fusion, k.hidden = hidden, k.intermediate = intermediate;
    return k;
}

std::vector<Case> cases() {
    //           name                             bias   qk_norm tied   ratio (LA:FA; "" = teacher)
    return {
        make("teacher", false, false, true, ""),
        make("teacher_untied_bias", true, false, false, ""),
        make("teacher_qk_norm", false, true, true, ""),
        make("hybrid_scale_norm", false, false, true, "1:1"),
        make("hybrid_bias_qk_norm", true, true, true, "2:1"),
        make("hybrid_hymba_untied", false, false, false, "1:1", "kv", FusionKind::Hymba),
        make("hybrid_la_only_bias", true, false, true, "1:2", "kv", FusionKind::LaOnly),
        make("hybrid_no_fusion", false, false, true, "1:1", "kv", FusionKind::None),
        make("all_la_bias", true, false, true, "1:0"),
        make("head_granularity", false, false, true, "1:1", "head"),
        make("head_granularity_bias_qk_norm", true, true, true, "2:1", "head"),
        make("odd_hidden", true, false, true, "1:1", "kv", FusionKind::ScaleNorm,
             40),  // n_la * C not a multiple of 16
        // no matrix size a multiple of the alignment: every group start must be placed, none falls there
        make("odd_sizes", true, false, false, "1:1", "kv", FusionKind::ScaleNorm, 40, 44),
    };
}

const ArenaEntry* entry_or_null(const LlamaModel& m, const std::string& name) {
    return m.params().has(name) ? &m.params().entry(name) : nullptr;
}

bool is_matrix(const std::string& name) {
    for (const char* s : {"_proj.weight", "lm_head.weight"})
        if (name.size() >= std::strlen(s) &&
            name.compare(name.size() - std::strlen(s), std::string::npos, s) == 0)
            return true;
    return false;
}

class DeviceLayoutTest : public ::testing::TestWithParam<Case> {};

TEST_P(DeviceLayoutTest, BijectionGroupsAlignmentAndRoundTrip) {
    const Case& k = GetParam();
    LlamaModel m = model_of(k);
    const ModelConfig& c = m.config();
    const int64_t C = c.hidden_size, A = DeviceLayout::kAlign;
    const DeviceLayout lay(m);
    const std::vector<ArenaEntry>& entries = m.params().entries();
    ASSERT_EQ(lay.tensors().size(), entries.size());
    ASSERT_EQ(lay.host_numel(), m.params().numel());
    EXPECT_EQ(lay.numel() % A, 0);

    // bijection: every entry keeps its size, lies inside the device arena, no two overlap
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (size_t i = 0; i < entries.size(); ++i) {
        const DeviceTensor& t = lay.tensors()[i];
        EXPECT_EQ(t.host, entries[i].offset) << entries[i].name;
        EXPECT_EQ(t.size, shape_numel(entries[i].shape)) << entries[i].name;
        EXPECT_GE(t.device, 0) << entries[i].name;
        EXPECT_LE(t.device + t.size, lay.numel()) << entries[i].name;
        EXPECT_EQ(lay.device_offset(t.host), t.device) << entries[i].name;
        ranges.emplace_back(t.device, t.device + t.size);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
    EXPECT_EQ(lay.device_offset(-1), -1);
    EXPECT_THROW(lay.device_offset(1), Error);  // inside the embedding, not an entry's start

    // regions: matrices in the bf16 prefix, vectors in the fp32 suffix, the embedding in both when tied
    for (size_t i = 0; i < entries.size(); ++i) {
        const DeviceTensor& t = lay.tensors()[i];
        const std::string& n = entries[i].name;
        if (n == "model.embed_tokens.weight") {
            EXPECT_EQ(t.device, lay.f32_begin());
            EXPECT_EQ(lay.bf16_end(), c.tie_word_embeddings ? t.device + t.size : t.device);
        } else if (is_matrix(n)) {
            EXPECT_LE(t.device + t.size, lay.bf16_end()) << n;
        } else {
            EXPECT_GE(t.device, lay.f32_begin()) << n;
        }
    }
    EXPECT_LE(lay.bf16_end(), lay.numel());
    EXPECT_EQ(lay.f32_begin() % A, 0);

    // groups: the proj block's parts back to back in the promised order; gate | up; aligned starts
    int64_t max_cols = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const DeviceProjBlock& pb = lay.proj(l);
        EXPECT_EQ(pb.offset % A, 0);
        EXPECT_EQ(pb.proj_cols % DeviceLayout::kProjRowMultiple, 0);
        EXPECT_GE(pb.proj_cols, pb.used_rows);
        EXPECT_LT(pb.proj_cols - pb.used_rows, DeviceLayout::kProjRowMultiple);
        max_cols = std::max(max_cols, pb.proj_cols);
        const std::pair<const char*, int64_t> parts[] = {
            {"self_attn.q_proj.weight", pb.q},      {"self_attn.k_proj.weight", pb.k},
            {"self_attn.v_proj.weight", pb.v},      {"linear_attn.q_proj.weight", pb.la_q},
            {"linear_attn.k_proj.weight", pb.la_k}, {"linear_attn.v_proj.weight", pb.la_v},
            {"linear_attn.g_proj.weight", pb.la_g}, {"linear_attn.a_proj.weight", pb.la_a},
            {"linear_attn.b_proj.weight", pb.la_b}};
        int64_t row = 0;
        for (const auto& [suffix, first] : parts) {
            EXPECT_EQ(first, row) << "layer " << l << " " << suffix;
            const ArenaEntry* e = entry_or_null(m, LlamaModel::layer_name(l, suffix));
            if (!e) continue;
            EXPECT_EQ(lay.device_offset(e->offset), pb.offset + row * C) << e->name;
            row += e->shape[0];
        }
        EXPECT_EQ(row, pb.used_rows);
        const LayerWeights& w = m.layer(l);
        EXPECT_EQ(pb.used_rows, (w.n_fa + 2 * w.n_fa_kv + 4 * w.n_la) * c.head_dim + 2 * w.n_la);
        // biases: one block at the same row offsets, iff the layer has biases
        const ArenaEntry* bq = entry_or_null(m, LlamaModel::layer_name(l, "self_attn.q_proj.bias"));
        const ArenaEntry* lbq = entry_or_null(m, LlamaModel::layer_name(l, "linear_attn.q_proj.bias"));
        EXPECT_EQ(pb.bias >= 0, bq != nullptr || lbq != nullptr);
        if (pb.bias >= 0) {
            EXPECT_EQ(pb.bias % A, 0);
            EXPECT_GE(pb.bias, lay.f32_begin());
            const std::pair<const char*, int64_t> bparts[] = {
                {"self_attn.q_proj.bias", pb.q},      {"self_attn.k_proj.bias", pb.k},
                {"self_attn.v_proj.bias", pb.v},      {"linear_attn.q_proj.bias", pb.la_q},
                {"linear_attn.k_proj.bias", pb.la_k}, {"linear_attn.v_proj.bias", pb.la_v}};
            for (const auto& [suffix, first] : bparts) {
                if (const ArenaEntry* e = entry_or_null(m, LlamaModel::layer_name(l, suffix))) {
                    EXPECT_EQ(lay.device_offset(e->offset), pb.bias + first) << e->name;
                }
            }
        }
        const ArenaEntry* gate = entry_or_null(m, LlamaModel::layer_name(l, "mlp.gate_proj.weight"));
        const ArenaEntry* up = entry_or_null(m, LlamaModel::layer_name(l, "mlp.up_proj.weight"));
        ASSERT_TRUE(gate && up);
        EXPECT_EQ(lay.device_offset(gate->offset) % A, 0);
        EXPECT_EQ(lay.device_offset(up->offset), lay.device_offset(gate->offset) + shape_numel(gate->shape));
        for (const char* s : {"self_attn.o_proj.weight", "mlp.down_proj.weight"})
            EXPECT_EQ(lay.device_offset(m.params().entry(LlamaModel::layer_name(l, s)).offset) % A, 0) << s;
        // the next group starts after the proj block's zero rows
        EXPECT_GE(
            lay.device_offset(m.params().entry(LlamaModel::layer_name(l, "self_attn.o_proj.weight")).offset),
            pb.offset + pb.proj_cols * C);
    }
    EXPECT_EQ(lay.max_proj_cols(), max_cols);
    // every tensor outside the proj blocks, the gate|up pairs and the bias blocks starts a group
    for (size_t i = 0; i < entries.size(); ++i) {
        const std::string& n = entries[i].name;
        const bool inside =
            n.find("q_proj") != std::string::npos || n.find("k_proj") != std::string::npos ||
            n.find("v_proj") != std::string::npos || n.find("linear_attn.g_proj") != std::string::npos ||
            n.find("linear_attn.a_proj") != std::string::npos ||
            n.find("linear_attn.b_proj") != std::string::npos || n.find("up_proj") != std::string::npos;
        if (!inside) {
            EXPECT_EQ(lay.tensors()[i].device % A, 0) << n;
        }
    }

    // round trips: host -> device -> host exact, device padding zero, host padding untouched
    test::randomize_params(m, 7);
    float* host = m.params().data();
    for (const DeviceTensor& t : lay.tensors())
        for (int64_t j = 0; j < t.size; ++j)
            if (host[t.host + j] == 0.f) host[t.host + j] = 1.f;  // no zero values: padding stays tellable
    std::vector<float> dev(size_t(lay.numel()), std::numeric_limits<float>::quiet_NaN());
    lay.to_device(host, dev.data());
    int64_t nonzero = 0;
    for (const float x : dev) nonzero += x != 0.f;
    int64_t params = 0;
    for (const DeviceTensor& t : lay.tensors()) {
        params += t.size;
        EXPECT_EQ(std::memcmp(dev.data() + t.device, host + t.host, size_t(t.size) * 4), 0);
    }
    EXPECT_EQ(nonzero, params);  // everything else is zero padding (the proj blocks' rows included)
    const float sentinel = -12345.f;
    std::vector<float> back(size_t(lay.host_numel()), sentinel);
    lay.to_host(dev.data(), back.data());
    int64_t untouched = 0;
    for (const DeviceTensor& t : lay.tensors())
        EXPECT_EQ(std::memcmp(back.data() + t.host, host + t.host, size_t(t.size) * 4), 0);
    for (const float x : back) untouched += x == sentinel;
    EXPECT_EQ(untouched, lay.host_numel() - params);
    // device -> host -> device: the same device image
    std::vector<float> dev2(size_t(lay.numel()), 1.f);
    lay.to_device(back.data(), dev2.data());
    EXPECT_EQ(std::memcmp(dev.data(), dev2.data(), dev.size() * 4), 0);
}

INSTANTIATE_TEST_SUITE_P(Plans, DeviceLayoutTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

TEST(DeviceLayout, RejectsOverlappingOrOutsideEntries) {
    ModelConfig c = test::tiny_llama_config({});
    std::vector<ArenaEntry> e = {{"model.embed_tokens.weight", {61, 32}, 0, ""},
                                 {"model.norm.weight", {32}, 1952, ""}};
    EXPECT_NO_THROW(DeviceLayout(c, e, 1984));
    EXPECT_THROW(DeviceLayout(c, e, 1983), Error);  // the norm ends past the arena
    e[1].offset = 1936;                             // inside the embedding
    EXPECT_THROW(DeviceLayout(c, e, 1984), Error);
    std::vector<ArenaEntry> bad = {{"model.layers.0.self_attn.q_proj.weight", {8, 31}, 0, ""}};
    EXPECT_THROW(DeviceLayout(c, bad, 248), Error);  // not (rows, hidden)
}

}  // namespace
