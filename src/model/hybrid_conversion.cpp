// FA -> HydraHead conversion (see hybrid_conversion.h for the initialisation choices and why).
#include "model/hybrid_conversion.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/parse_number.h"
#include "core/rng.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/rope_scaling.h"
#include "model/taps.h"

namespace hydra {

namespace {

// Copies row block `src_block` (rows of `block` rows each) of `src` into row block `dst_block` of `dst`.
void copy_row_block(Tensor& dst, int64_t dst_block, const Tensor& src, int64_t src_block, int64_t block) {
    const int64_t cols = dst.numel() / dst.dim(0);
    HYDRA_ASSERT(cols == src.numel() / src.dim(0), "row widths differ: {} vs {}", cols, src.numel() / src.dim(0));
    std::memcpy(dst.f32() + dst_block * block * cols, src.f32() + src_block * block * cols,
                size_t(block * cols) * sizeof(float));
}

void copy_all(Tensor dst, const Tensor& src) {
    HYDRA_ASSERT(dst.numel() == src.numel(), "sizes differ: {} vs {}", dst.numel(), src.numel());
    std::memcpy(dst.f32(), src.f32(), src.nbytes());
}

void fill(Tensor& t, float value) { std::fill(t.f32(), t.f32() + t.numel(), value); }

// softplus^-1(y) = log(expm1(y)) for y > 0.
double inverse_softplus(double y) { return y > 20 ? y : std::log(std::expm1(y)); }

}  // namespace

void set_rope_option(ConversionOptions& options, const std::string& spec, const ModelConfig& teacher,
                     const std::string& where) {
    if (spec.empty()) return;
    if (spec.rfind("ntk:", 0) == 0) {
        const std::string alpha = spec.substr(4);
        const std::optional<double> a = parse_finite_double(alpha);
        HYDRA_CHECK(a && *a >= 1.0, "{} {}: \"{}\" is not a number >= 1", where, spec, alpha);
        options.rope_theta = static_ntk_theta(double(teacher.rope_theta), *a, teacher.rope_dim);
        return;
    }
    try {
        options.rope_scaling = parse_rope_scaling_spec(spec);
    } catch (const Error& e) {
        fail("{}: {}", where, e.what());
    }
}

ConversionStats measure_teacher(const LlamaModel& teacher, const std::vector<int32_t>& tokens) {
    const ModelConfig& cfg = teacher.config();
    const int64_t L = cfg.num_layers, H = cfg.num_heads, Dh = cfg.head_dim, T = int64_t(tokens.size());
    ConversionStats stats;
    stats.calibration_tokens = T;
    stats.head_rms.assign(size_t(L), std::vector<double>(size_t(H), 1.0));
    stats.head_span.assign(size_t(L), std::vector<double>(size_t(H), 64.0));
    stats.head_mean.assign(size_t(L),
                           std::vector<std::vector<double>>(size_t(H), std::vector<double>(size_t(Dh), 0.0)));
    stats.head_dev_rms = stats.head_rms;
    if (T == 0) return stats;
    Taps taps;
    taps.on("blk.*.head_out", [&](std::string_view, int layer, Tensor& value) {  // (T, H, Dh)
        const int64_t first = T > 1 ? 1 : 0;  // the mean and deviation leave the first position out
        for (int64_t h = 0; h < H; ++h) {
            double ss = 0;
            std::vector<double>& mean = stats.head_mean[size_t(layer)][size_t(h)];
            for (int64_t t = 0; t < T; ++t)
                for (int64_t d = 0; d < Dh; ++d) {
                    const double x = value.f32()[(t * H + h) * Dh + d];
                    ss += x * x;
                    if (t >= first) mean[size_t(d)] += x;
                }
            for (double& m : mean) m /= double(T - first);
            double dev = 0;
            for (int64_t t = first; t < T; ++t)
                for (int64_t d = 0; d < Dh; ++d) {
                    const double x = value.f32()[(t * H + h) * Dh + d] - mean[size_t(d)];
                    dev += x * x;
                }
            stats.head_rms[size_t(layer)][size_t(h)] = std::sqrt(ss / double(T * Dh));
            stats.head_dev_rms[size_t(layer)][size_t(h)] = std::sqrt(dev / double((T - first) * Dh));
        }
    });
    taps.on("blk.*.attn_probs", [&](std::string_view, int layer, Tensor& value) {  // (T, H, T)
        for (int64_t h = 0; h < H; ++h) {
            double sum = 0;
            for (int64_t t = 0; t < T; ++t) {
                const float* p = value.f32() + (t * H + h) * T;
                for (int64_t s = 0; s <= t; ++s) sum += double(p[s]) * double(t - s);
            }
            stats.head_span[size_t(layer)][size_t(h)] = sum / double(T);
        }
    });
    KVCache cache(teacher, T);
    ForwardOptions options;
    options.taps = &taps;
    options.quantized_decode = false;
    forward_hidden(teacher, tokens, cache, options);
    return stats;
}

std::unique_ptr<LlamaModel> convert_to_hybrid(const LlamaModel& teacher, const HybridPlan& plan,
                                              const ConversionOptions& options, ConversionStats* stats_out) {
    const ModelConfig& cfg = teacher.config();
    HYDRA_CHECK(teacher.plan().is_all_fa(),
                "convert: the source model is already a hybrid ({}); convert from the full-attention teacher",
                teacher.plan().ratio_summary());
    plan.validate(cfg, "convert plan");
    const int64_t L = cfg.num_layers, H = cfg.num_heads, Dh = cfg.head_dim, G = cfg.group_size();
    const int64_t W = plan.gdn.conv_size;

    ConversionStats stats = measure_teacher(teacher, options.calibration_tokens);
    ModelConfig student_cfg = cfg;
    if (options.rope_theta) {
        HYDRA_CHECK(std::isfinite(*options.rope_theta) && *options.rope_theta > 1,
                    "convert: rope_theta {} out of range", *options.rope_theta);
        student_cfg.rope_theta = float(*options.rope_theta);
    }
    if (options.rope_scaling) apply_rope_scaling(student_cfg, *options.rope_scaling);
    if (options.fa_nope) {
        HYDRA_CHECK(
            plan.total_la_heads() > 0,
            "convert: NoPE needs a hybrid (an all-FA model without RoPE would lose every position); choose "
            "a plan with LA heads");
        student_cfg.fa_nope = true;
    }
    student_cfg.validate("convert");
    auto student = std::make_unique<LlamaModel>(student_cfg, &plan);
    ParamArena& dst = student->params();
    const ParamArena& src = teacher.params();

    // Everything outside the attention mixers is copied by name.
    for (const ArenaEntry& e : dst.entries())
        if (e.name.find(".self_attn.") == std::string::npos && e.name.find(".linear_attn.") == std::string::npos &&
            e.name.find(".fusion.") == std::string::npos)
            copy_all(dst.get(e.name), src.get(e.name));

    Rng rng(options.seed);
    for (int64_t l = 0; l < L; ++l) {
        const LayerPlan& lp = plan.layers[size_t(l)];
        const LayerWeights& t = teacher.layer(l);
        const LayerWeights& s = student->layer(l);
        std::vector<int32_t> order = lp.fa_heads;  // the student's head order, in teacher indices
        order.insert(order.end(), lp.la_heads.begin(), lp.la_heads.end());

        // o_proj (C, H*Dh): student column block j <- teacher column block order[j].
        const int64_t C = cfg.hidden_size, Dq = cfg.q_dim();
        for (int64_t c = 0; c < C; ++c)
            for (int64_t j = 0; j < H; ++j)
                std::memcpy(s.wo.f32() + c * Dq + j * Dh, t.wo.f32() + c * Dq + int64_t(order[size_t(j)]) * Dh,
                            size_t(Dh) * sizeof(float));

        // FA heads: the teacher's rows for the kept heads and their KV groups.
        const std::vector<int32_t> groups = plan.fa_kv_groups(cfg, l);
        Tensor sw = s.wq, sbq = s.bq;
        for (int64_t i = 0; i < lp.num_fa(); ++i) {
            copy_row_block(sw, i, t.wq, lp.fa_heads[size_t(i)], Dh);
            if (!sbq.empty()) copy_row_block(sbq, i, t.bq, lp.fa_heads[size_t(i)], Dh);
        }
        for (size_t g = 0; g < groups.size(); ++g) {
            Tensor k = s.wk, v = s.wv, bk = s.bk, bv = s.bv;
            copy_row_block(k, int64_t(g), t.wk, groups[g], Dh);
            copy_row_block(v, int64_t(g), t.wv, groups[g], Dh);
            if (!bk.empty()) copy_row_block(bk, int64_t(g), t.bk, groups[g], Dh);
            if (!bv.empty()) copy_row_block(bv, int64_t(g), t.bv, groups[g], Dh);
        }
        if (!s.q_norm.empty()) copy_all(s.q_norm, t.q_norm);
        if (!s.k_norm.empty()) copy_all(s.k_norm, t.k_norm);

        // LA heads: GDN initialised from the teacher head (see the header for why).
        if (lp.num_la() > 0) {
            GdnWeights g = s.la;
            for (int64_t i = 0; i < lp.num_la(); ++i) {
                const int32_t h = lp.la_heads[size_t(i)];
                copy_row_block(g.wq, i, t.wq, h, Dh);
                copy_row_block(g.wk, i, t.wk, h / G, Dh);
                copy_row_block(g.wv, i, t.wv, h / G, Dh);
                if (!g.bq.empty()) {
                    copy_row_block(g.bq, i, t.bq, h, Dh);
                    copy_row_block(g.bk, i, t.bk, h / G, Dh);
                    copy_row_block(g.bv, i, t.bv, h / G, Dh);
                }
                const double span = std::clamp(stats.head_span[size_t(l)][size_t(h)], 0.0, 1e6);
                g.A_log.f32()[i] = 0.0f;
                g.dt_bias.f32()[i] = float(inverse_softplus(1.0 / (span + 1.0)));
            }
            fill(g.wa, 0.0f);
            fill(g.wb, 0.0f);
            fill(g.o_norm, 1.0f);
            for (int64_t i = 0; i < g.wg.numel(); ++i) g.wg.f32()[i] = 0.02f * rng.normal();
            for (Tensor* conv : {&g.conv_q, &g.conv_k, &g.conv_v}) {
                fill(*conv, 0.0f);
                for (int64_t d = 0; d < conv->dim(0); ++d) conv->f32()[d * W + (W - 1)] = 1.0f;
            }
            // Fusion scales from the teacher's head output RMS. With LA offsets an LA head's offset starts
            // at the teacher head's mean output and its GDN output is scaled to the deviation about it.
            const std::vector<int32_t>& la = lp.la_heads;
            auto rms = [&](int32_t head) {
                const bool offset = plan.la_bias && std::find(la.begin(), la.end(), head) != la.end();
                return float((offset ? stats.head_dev_rms : stats.head_rms)[size_t(l)][size_t(head)]);
            };
            auto group_rms = [&](const std::vector<int32_t>& heads) {
                double ss = 0;
                for (int32_t h : heads) ss += double(rms(h)) * double(rms(h));
                return float(std::sqrt(ss / double(std::max<size_t>(heads.size(), 1))));
            };
            switch (plan.fusion) {
                case FusionKind::ScaleNorm: {
                    Tensor sc = s.fusion_head_scale;
                    for (int64_t j = 0; j < H; ++j)
                        std::fill_n(sc.f32() + j * Dh, Dh, rms(order[size_t(j)]));
                    break;
                }
                case FusionKind::LaOnly: {
                    Tensor sc = s.fusion_head_scale;
                    for (int64_t i = 0; i < lp.num_la(); ++i) std::fill_n(sc.f32() + i * Dh, Dh, rms(lp.la_heads[size_t(i)]));
                    break;
                }
                case FusionKind::Hymba: {
                    const float f = lp.num_fa() > 0 ? 2.0f : 1.0f;  // undo the 1/2 of the average
                    if (lp.num_fa() > 0) {
                        Tensor fs = s.fusion_fa_scale;
                        fill(fs, f * group_rms(lp.fa_heads));
                    }
                    Tensor ls = s.fusion_la_scale;
                    fill(ls, f * group_rms(lp.la_heads));
                    break;
                }
                case FusionKind::None: break;
            }
            if (Tensor bias = s.fusion_la_bias; !bias.empty())
                for (int64_t i = 0; i < lp.num_la(); ++i)
                    for (int64_t d = 0; d < Dh; ++d)
                        bias.f32()[i * Dh + d] =
                            float(stats.head_mean[size_t(l)][size_t(la[size_t(i)])][size_t(d)]);
        }
    }
    if (stats_out) *stats_out = std::move(stats);
    return student;
}

}  // namespace hydra
