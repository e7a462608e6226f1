// Tests for the optimizer side of training: AdamW over a ParamArena against a torch.optim.AdamW
// golden (with clipping, per-group lr/decay and a warmup-cosine schedule), frozen spans, bit-exact
// state round trips, gradient norm/clip/finite helpers, LR schedules and parameter-group rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/param_arena.h"
#include "model_paths.h"
#include "train/adamw.h"
#include "train/lr_schedule.h"
#include "train/param_groups.h"

namespace hydra {
namespace {

nlohmann::json load_golden() {
    std::ifstream f(test::test_data("optim_golden.json"));
    EXPECT_TRUE(f.good()) << "missing tests/data/optim_golden.json (run tools/make_optim_golden.py)";
    return nlohmann::json::parse(f);
}

bool same_bits(const float* a, const float* b, size_t n) {
    return std::memcmp(a, b, n * sizeof(float)) == 0;
}

TEST(AdamW, ReproducesTorchAdamWWithClippingGroupsAndSchedule) {
    const nlohmann::json g = load_golden()["adamw"];
    const nlohmann::json& cfg = g["config"];
    const nlohmann::json& sj = g["schedule"];

    ParamArena params, grads;
    std::vector<ParamRule> rules;
    for (const auto& p : g["params"]) {
        const Shape shape = p["shape"].get<Shape>();
        params.declare(p["name"], shape);
        grads.declare(p["name"], shape);
        ParamRule r;
        r.pattern = p["name"];
        r.trainable = p["trainable"];
        r.lr_scale = p["lr_scale"].get<float>();
        // Leave wd unset where the default classification must already give the golden's value.
        if (!(p["wd_scale"].get<float>() == 0.0f && shape.size() == 1))
            r.wd_scale = p["wd_scale"].get<float>();
        rules.push_back(r);
    }
    params.allocate();
    grads.allocate();
    const std::vector<ParamSpan> spans = build_param_spans(params.entries(), rules);
    ASSERT_EQ(spans.size(), g["params"].size());
    for (size_t i = 0; i < spans.size(); ++i)
        EXPECT_FLOAT_EQ(spans[i].wd_scale, g["params"][i]["wd_scale"].get<float>()) << spans[i].name;

    // Initial values; padding gets a sentinel that must survive.
    const int64_t n = params.numel();
    std::fill(params.data(), params.data() + n, 777.0f);
    for (size_t i = 0; i < spans.size(); ++i) {
        const auto init = g["params"][i]["init"].get<std::vector<float>>();
        std::copy(init.begin(), init.end(), params.data() + spans[i].offset);
    }
    const std::vector<float> start(params.data(), params.data() + n);

    LrSchedule sched;
    sched.kind = parse_lr_kind(sj["kind"]);
    sched.peak_lr = sj["peak_lr"];
    sched.warmup_steps = sj["warmup_steps"];
    sched.total_steps = sj["total_steps"];
    sched.min_lr_ratio = sj["min_lr_ratio"];

    AdamW opt(AdamWConfig{cfg["lr"], cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["weight_decay"]}, n);
    const double max_norm = cfg["max_norm"];
    const size_t steps = g["after"].size();
    ASSERT_EQ(steps, 10u);
    for (size_t s = 0; s < steps; ++s) {
        SCOPED_TRACE(testing::Message() << "step " << s);
        std::fill(grads.data(), grads.data() + n,
                  std::numeric_limits<float>::quiet_NaN());  // padding: ignored
        for (size_t i = 0; i < spans.size(); ++i) {
            const auto gv = g["grads"][s][i].get<std::vector<float>>();
            std::copy(gv.begin(), gv.end(), grads.data() + spans[i].offset);
        }
        ASSERT_TRUE(all_finite(grads.data(), spans));
        const double norm = grad_norm(grads.data(), spans);
        const double want_norm = g["grad_norms"][s];
        EXPECT_NEAR(norm, want_norm, 1e-6 * want_norm);
        const double coef = clip_grads(grads.data(), spans, max_norm, norm);
        EXPECT_EQ(coef<1.0, want_norm> max_norm);
        const float lr = sched.at(int64_t(s));
        EXPECT_NEAR(lr, g["lrs"][s].get<double>(), 1e-6 * g["lrs"][s].get<double>());
        opt.set_lr(lr);
        opt.step(params.data(), grads.data(), n, spans);
        EXPECT_EQ(opt.step_count(), int64_t(s + 1));
        for (size_t i = 0; i < spans.size(); ++i) {
            const auto want = g["after"][s][i].get<std::vector<double>>();
            const float* got = params.data() + spans[i].offset;
            for (size_t k = 0; k < want.size(); ++k)
                EXPECT_NEAR(got[k], want[k], 1e-6 * std::abs(want[k]) + 1e-7)
                    << spans[i].name << "[" << k << "]";
        }
    }
    // The frozen span, its optimizer state and all padding are bit-identical to the start.
    for (const ParamSpan& s : spans) {
        if (s.trainable) continue;
        EXPECT_TRUE(same_bits(params.data() + s.offset, start.data() + s.offset, size_t(s.size)));
        for (int64_t k = 0; k < s.size; ++k) EXPECT_EQ(opt.m()[s.offset + k], 0.0f);
        for (int64_t k = 0; k < s.size; ++k) EXPECT_EQ(opt.v()[s.offset + k], 0.0f);
    }
    for (int64_t k = 0; k < n; ++k) {
        bool inside = false;
        for (const ParamSpan& s : spans) inside |= k >= s.offset && k < s.offset + s.size;
        if (!inside) {
            EXPECT_EQ(params.data()[k], 777.0f) << "padding element " << k;
        }
    }
}

TEST(AdamW, FirstStepByHand) {
    // t = 1: m_hat = g, v_hat = g^2, so the Adam move is lr * sign(g) (up to eps), after decay.
    std::vector<float> p = {1.0f, -2.0f, 3.0f}, g = {0.5f, 0.25f, -4.0f};
    std::vector<ParamSpan> spans = {{"a", "", 0, 2, 1.0f, 1.0f, true}, {"b", "", 2, 1, 2.0f, 0.0f, true}};
    AdamW opt(AdamWConfig{0.1f, 0.9f, 0.95f, 1e-8f, 0.1f}, 3);
    opt.step(p.data(), g.data(), 3, spans);
    EXPECT_NEAR(p[0], 1.0 * (1 - 0.01) - 0.1, 1e-6);
    EXPECT_NEAR(p[1], -2.0 * (1 - 0.01) - 0.1, 1e-6);
    EXPECT_NEAR(p[2], 3.0 + 0.2, 1e-6);  // lr_scale 2, no decay
    EXPECT_FLOAT_EQ(opt.m()[0], 0.05f);
    EXPECT_FLOAT_EQ(opt.v()[2], 0.05f * 16.0f);
}

TEST(AdamW, StateRoundTripIsBitExact) {
    const int64_t n = 1000;
    std::vector<ParamSpan> spans = {{"w", "", 0, 600, 1.0f, 1.0f, true},
                                    {"b", "", 608, 392, 0.5f, 0.0f, true}};
    std::mt19937 rng(7);
    std::normal_distribution<float> d;
    std::vector<float> p(n);
    for (auto& x : p) x = d(rng);
    std::vector<std::vector<float>> gs(5, std::vector<float>(n));
    for (auto& gv : gs)
        for (auto& x : gv) x = d(rng);

    AdamW a(AdamWConfig{3e-3f}, n);
    for (int s = 0; s < 3; ++s) a.step(p.data(), gs[size_t(s)].data(), n, spans);
    // "Checkpoint": plain copies of m, v, step and the params.
    const std::vector<float> m(a.m(), a.m() + n), v(a.v(), a.v() + n), p_saved = p;
    const int64_t step = a.step_count();
    for (int s = 3; s < 5; ++s) a.step(p.data(), gs[size_t(s)].data(), n, spans);

    AdamW b(AdamWConfig{3e-3f}, n);
    b.load_state(m.data(), v.data(), n, step);
    std::vector<float> q = p_saved;
    for (int s = 3; s < 5; ++s) b.step(q.data(), gs[size_t(s)].data(), n, spans);
    EXPECT_EQ(b.step_count(), 5);
    EXPECT_TRUE(same_bits(p.data(), q.data(), n));
    EXPECT_TRUE(same_bits(a.m(), b.m(), n));
    EXPECT_TRUE(same_bits(a.v(), b.v(), n));

    EXPECT_THROW(b.load_state(m.data(), v.data(), n - 1, 1), Error);
    EXPECT_THROW(b.step(q.data(), gs[0].data(), n + 1, spans), Error);
    spans.push_back({"bad", "", 990, 20, 1.0f, 1.0f, true});
    EXPECT_THROW(b.step(q.data(), gs[0].data(), n, spans), Error);
}

TEST(AdamW, GradNormClipAndFiniteCheckSkipFrozenSpans) {
    std::vector<float> g = {3.0f, 4.0f, 0.0f, 0.0f, 100.0f, 12.0f};
    std::vector<ParamSpan> spans = {
        {"a", "", 0, 2, 1, 1, true}, {"f", "", 4, 1, 1, 1, false}, {"c", "", 5, 1, 1, 1, true}};
    const double norm = grad_norm(g.data(), spans);
    EXPECT_DOUBLE_EQ(norm, 13.0);
    EXPECT_EQ(clip_grads(g.data(), spans, 20.0, norm), 1.0);  // below max: untouched
    EXPECT_EQ(g[0], 3.0f);
    const double coef = clip_grads(g.data(), spans, 6.5, norm);
    EXPECT_NEAR(coef, 6.5 / (13.0 + 1e-6), 1e-12);
    EXPECT_NEAR(g[0], 1.5f, 1e-6);
    EXPECT_NEAR(g[5], 6.0f, 1e-6);
    EXPECT_EQ(g[4], 100.0f);  // frozen: not clipped
    EXPECT_NEAR(grad_norm(g.data(), spans), 6.5, 1e-5);

    EXPECT_TRUE(all_finite(g.data(), spans));
    g[4] = std::numeric_limits<float>::quiet_NaN();  // frozen span: not inspected
    EXPECT_TRUE(all_finite(g.data(), spans));
    g[2] = std::numeric_limits<float>::infinity();  // padding: not inspected
    EXPECT_TRUE(all_finite(g.data(), spans));
    g[5] = -std::numeric_limits<float>::infinity();
    EXPECT_FALSE(all_finite(g.data(), spans));
    g[5] = 1.0f;
    g[1] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(all_finite(g.data(), spans));
    // Large span: the parallel path finds a single NaN too.
    std::vector<float> big(1 << 16, 0.5f);
    std::vector<ParamSpan> one = {{"x", "", 0, int64_t(big.size()), 1, 1, true}};
    EXPECT_TRUE(all_finite(big.data(), one));
    EXPECT_NEAR(grad_norm(big.data(), one), 0.5 * 256.0, 1e-9);
    big[40000] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(all_finite(big.data(), one));
}

// --- LR schedules ---

TEST(LrSchedule, KnownValues) {
    LrSchedule c;
    c.kind = LrSchedule::Constant;
    c.peak_lr = 2.0f;
    c.warmup_steps = 4;
    const float want_c[] = {0.5f, 1.0f, 1.5f, 2.0f, 2.0f, 2.0f};
    for (int s = 0; s < 6; ++s) EXPECT_FLOAT_EQ(c.at(s), want_c[s]) << s;
    EXPECT_FLOAT_EQ(c.at(100000), 2.0f);

    LrSchedule cos;
    cos.kind = LrSchedule::WarmupCosine;
    cos.peak_lr = 1.0f;
    cos.total_steps = 5;
    cos.min_lr_ratio = 0.0f;
    const double want_cos[] = {1.0, 0.5 * (1 + std::cos(M_PI / 4)), 0.5, 0.5 * (1 + std::cos(3 * M_PI / 4)),
                               0.0};
    for (int s = 0; s < 5; ++s) EXPECT_NEAR(cos.at(s), want_cos[s], 1e-7) << s;
    EXPECT_NEAR(cos.at(9), 0.0, 1e-7);
    cos.warmup_steps = 2;
    cos.min_lr_ratio = 0.1f;
    EXPECT_NEAR(cos.at(0), 0.5, 1e-7);
    EXPECT_NEAR(cos.at(1), 1.0, 1e-7);
    EXPECT_NEAR(cos.at(2), 1.0, 1e-7);  // first post-warmup step: x = 0
    EXPECT_NEAR(cos.at(3), 0.1 + 0.9 * 0.5, 1e-7);
    EXPECT_NEAR(cos.at(4), 0.1, 1e-7);

    LrSchedule wsd;
    wsd.kind = parse_lr_kind("wsd");
    wsd.peak_lr = 1.0f;
    wsd.warmup_steps = 2;
    wsd.total_steps = 10;
    wsd.min_lr_ratio = 0.1f;
    wsd.decay_fraction = 0.3f;  // decay over the last 3 steps: 7, 8, 9
    const double want_wsd[] = {0.5, 1, 1, 1, 1, 1, 1, 1, 0.55, 0.1, 0.1};
    for (int s = 0; s < 11; ++s) EXPECT_NEAR(wsd.at(s), want_wsd[s], 1e-7) << s;
    wsd.decay_fraction = 0.0f;
    EXPECT_FLOAT_EQ(wsd.at(9), 1.0f);
    wsd.decay_fraction = 1.0f;  // decay may not start inside warmup
    EXPECT_NEAR(wsd.at(1), 1.0, 1e-7);
    EXPECT_NEAR(wsd.at(2), 1.0, 1e-7);
    EXPECT_NEAR(wsd.at(9), 0.1, 1e-7);
}

TEST(LrSchedule, RejectsBadSettings) {
    LrSchedule s;
    s.kind = LrSchedule::WarmupCosine;  // total_steps missing
    EXPECT_THROW(s.at(0), Error);
    s.total_steps = 10;
    s.warmup_steps = 11;
    EXPECT_THROW(s.validate(), Error);
    s.warmup_steps = 1;
    s.min_lr_ratio = 1.5f;
    EXPECT_THROW(s.validate(), Error);
    s.min_lr_ratio = 0.1f;
    EXPECT_NO_THROW(s.validate());
    EXPECT_THROW(parse_lr_kind("linear"), Error);
    EXPECT_EQ(parse_lr_kind("cosine"), LrSchedule::WarmupCosine);
    EXPECT_STREQ(lr_kind_name(LrSchedule::WarmupStableDecay), "wsd");
}

// --- Parameter groups ---

TEST(ParamGroups, GlobMatching) {
    EXPECT_TRUE(glob_match("*", ""));
    EXPECT_TRUE(glob_match("*", "a.b.c"));
    EXPECT_FALSE(glob_match("?", ""));
    EXPECT_TRUE(glob_match("a?c", "abc"));
    EXPECT_FALSE(glob_match("a?c", "ac"));
    EXPECT_TRUE(glob_match("model.layers.*.self_attn.*", "model.layers.12.self_attn.q_proj.weight"));
    EXPECT_FALSE(glob_match("model.layers.*.self_attn.*", "model.layers.12.mlp.up_proj.weight"));
    EXPECT_TRUE(glob_match("*.A_log", "model.layers.3.gdn.A_log"));
    EXPECT_FALSE(glob_match("*.A_log", "model.layers.3.gdn.A_log.x"));
    EXPECT_TRUE(glob_match("a**b", "ab"));
    EXPECT_TRUE(glob_match("*b*", "abc"));
    EXPECT_FALSE(glob_match("abc", "abcd"));
    EXPECT_TRUE(glob_match("a*", "a*"));
    // Backtracking pattern on a long name stays fast (would be exponential with naive recursion).
    EXPECT_FALSE(glob_match("a*a*a*a*a*a*a*a*a*b", std::string(200, 'a')));
}

std::vector<ArenaEntry> llama_like_entries() {
    std::vector<ArenaEntry> e;
    int64_t off = 0;
    auto add = [&](const std::string& name, Shape shape) {
        e.push_back({name, shape, off, ""});
        off += (shape_numel(shape) + 15) / 16 * 16;
    };
    add("model.embed_tokens.weight", {32, 8});
    add("model.layers.0.input_layernorm.weight", {8});
    add("model.layers.0.self_attn.q_proj.weight", {8, 8});
    add("model.layers.0.self_attn.q_proj.bias", {8});
    add("model.layers.0.mlp.gate_proj.weight", {16, 8});
    add("model.layers.1.self_attn.q_proj.weight", {8, 8});
    add("model.layers.1.gdn.A_log", {4});
    add("model.layers.1.gdn.dt_bias", {4});
    add("model.layers.1.gdn.gate_param", {4, 2});
    add("model.layers.12.self_attn.q_norm.weight", {2, 4});
    add("model.norm.weight", {8});
    add("lm_head.weight", {32, 8});
    return e;
}

TEST(ParamGroups, DefaultDecayClassification) {
    const auto entries = llama_like_entries();
    const auto spans = build_param_spans(entries);
    ASSERT_EQ(spans.size(), entries.size());
    auto wd = [&](const std::string& name) {
        for (const auto& s : spans)
            if (s.name == name) {
                EXPECT_TRUE(s.trainable) << name;
                EXPECT_EQ(s.lr_scale, 1.0f) << name;
                return s.wd_scale;
            }
        ADD_FAILURE() << "no span " << name;
        return -1.0f;
    };
    EXPECT_EQ(wd("model.embed_tokens.weight"), 1.0f);
    EXPECT_EQ(wd("model.layers.0.input_layernorm.weight"), 0.0f);
    EXPECT_EQ(wd("model.layers.0.self_attn.q_proj.weight"), 1.0f);
    EXPECT_EQ(wd("model.layers.0.self_attn.q_proj.bias"), 0.0f);
    EXPECT_EQ(wd("model.layers.0.mlp.gate_proj.weight"), 1.0f);  // "gate" alone is a matrix, decayed
    EXPECT_EQ(wd("model.layers.1.gdn.A_log"), 0.0f);
    EXPECT_EQ(wd("model.layers.1.gdn.dt_bias"), 0.0f);
    EXPECT_EQ(wd("model.layers.1.gdn.gate_param"), 0.0f);            // 2-D, but a gate parameter
    EXPECT_EQ(wd("model.layers.12.self_attn.q_norm.weight"), 0.0f);  // 2-D, but a norm
    EXPECT_EQ(wd("model.norm.weight"), 0.0f);
    EXPECT_EQ(wd("lm_head.weight"), 1.0f);
    for (size_t i = 0; i < spans.size(); ++i) {
        EXPECT_EQ(spans[i].offset, entries[i].offset);
        EXPECT_EQ(spans[i].size, shape_numel(entries[i].shape));
        EXPECT_EQ(spans[i].group, spans[i].wd_scale == 0.0f ? "no_decay" : "decay");
    }
}

TEST(ParamGroups, RulesFirstMatchWins) {
    const auto entries = llama_like_entries();
    const auto rules = parse_param_rules(nlohmann::json::parse(R"([
        {"pattern": "model.embed_tokens.*", "trainable": false},
        {"pattern": "model.layers.?.self_attn.*", "lr_scale": 0.1, "group": "attn"},
        {"pattern": "model.layers.*", "wd_scale": 0.5},
        {"pattern": "nothing.matches.this"}
    ])"),
                                         "test.json:train.param_rules");
    const auto spans = build_param_spans(entries, rules);
    auto find = [&](const std::string& name) -> const ParamSpan& {
        for (const auto& s : spans)
            if (s.name == name) return s;
        throw std::runtime_error("missing " + name);
    };
    EXPECT_FALSE(find("model.embed_tokens.weight").trainable);
    EXPECT_EQ(find("model.embed_tokens.weight").group, "frozen");
    const ParamSpan& q0 = find("model.layers.0.self_attn.q_proj.weight");
    EXPECT_FLOAT_EQ(q0.lr_scale, 0.1f);
    EXPECT_EQ(q0.wd_scale, 1.0f);  // rule 2 decided; rule 3's wd does not apply
    EXPECT_EQ(q0.group, "attn");
    EXPECT_EQ(find("model.layers.0.self_attn.q_proj.bias").wd_scale, 0.0f);  // unset wd keeps the default
    // "?" is one character: layer 12 falls through to rule 3.
    const ParamSpan& n12 = find("model.layers.12.self_attn.q_norm.weight");
    EXPECT_EQ(n12.lr_scale, 1.0f);
    EXPECT_EQ(n12.wd_scale, 0.5f);
    EXPECT_EQ(find("model.layers.1.gdn.A_log").wd_scale, 0.5f);  // explicit wd overrides the default
    EXPECT_TRUE(find("lm_head.weight").trainable);
    EXPECT_EQ(find("lm_head.weight").wd_scale, 1.0f);

    const auto counts = rule_match_counts(entries, rules);
    EXPECT_EQ(counts, (std::vector<int64_t>{1, 3, 6, 0}));
    int64_t frozen = shape_numel(entries[0].shape), total = 0;
    for (const auto& e : entries) total += shape_numel(e.shape);
    EXPECT_EQ(trainable_count(spans), total - frozen);
}

TEST(ParamGroups, RejectsBadRules) {
    auto parse = [](const char* text) {
        return parse_param_rules(nlohmann::json::parse(text), "cfg.json:rules");
    };
    EXPECT_THROW(parse(R"({"pattern": "*"})"), Error);
    EXPECT_THROW(parse(R"([{"trainable": false}])"), Error);
    EXPECT_THROW(parse(R"([{"pattern": ""}])"), Error);
    EXPECT_THROW(parse(R"([{"pattern": "*", "lr": 0.1}])"), Error);
    EXPECT_THROW(parse(R"([{"pattern": "*", "lr_scale": -1}])"), Error);
    EXPECT_THROW(parse(R"([{"pattern": "*", "trainable": "no"}])"), Error);
    EXPECT_THROW(parse(R"([{"pattern": 3}])"), Error);
    EXPECT_THROW(build_param_spans(llama_like_entries(), {ParamRule{}}), Error);
    try {
        parse(R"([{"pattern": "*"}, {"pattern": "*", "wd": 1}])");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cfg.json:rules[1]"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace hydra
