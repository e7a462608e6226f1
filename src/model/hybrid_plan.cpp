// HybridPlan validation, cache accounting and JSON form (see hybrid_plan.h).
#include "model/hybrid_plan.h"

#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"
#include "io/json_kind.h"

namespace hydra {

const char* fusion_name(FusionKind kind) {
    switch (kind) {
        case FusionKind::ScaleNorm: return "scale-norm";
        case FusionKind::None: return "none";
        case FusionKind::Hymba: return "hymba";
        case FusionKind::LaOnly: return "la-only";
    }
    return "?";
}

FusionKind parse_fusion(const std::string& text, const std::string& where) {
    if (text == "scale-norm") return FusionKind::ScaleNorm;
    if (text == "none") return FusionKind::None;
    if (text == "hymba") return FusionKind::Hymba;
    if (text == "la-only") return FusionKind::LaOnly;
    fail("{}: unknown fusion '{}' (expected scale-norm, none, hymba or la-only)", where, text);
}

HybridPlan HybridPlan::all_fa(const ModelConfig& config) {
    HybridPlan plan;
    plan.gdn.norm_eps = config.rms_norm_eps;
    plan.layers.resize(size_t(config.num_layers));
    for (LayerPlan& lp : plan.layers)
        for (int32_t h = 0; h < int32_t(config.num_heads); ++h) lp.fa_heads.push_back(h);
    return plan;
}

bool HybridPlan::is_all_fa() const {
    for (const LayerPlan& lp : layers)
        if (!lp.la_heads.empty()) return false;
    return !has_windows();  // a sliding-window head is no full attention
}

bool HybridPlan::has_windows() const {
    for (const LayerPlan& lp : layers)
        for (int32_t w : lp.fa_window)
            if (w > 0) return true;
    return false;
}

std::vector<int32_t> HybridPlan::fa_windows(int64_t layer) const {
    const LayerPlan& lp = layers[size_t(layer)];
    if (lp.fa_window.empty()) return std::vector<int32_t>(lp.fa_heads.size(), 0);
    return lp.fa_window;
}

int64_t HybridPlan::total_fa_heads() const {
    int64_t n = 0;
    for (const LayerPlan& lp : layers) n += lp.num_fa();
    return n;
}

int64_t HybridPlan::total_la_heads() const {
    int64_t n = 0;
    for (const LayerPlan& lp : layers) n += lp.num_la();
    return n;
}

std::vector<int32_t> HybridPlan::fa_kv_groups(const ModelConfig& config, int64_t layer) const {
    std::vector<int32_t> groups;
    const int32_t g = int32_t(config.group_size());
    for (int32_t h : layers[size_t(layer)].fa_heads)
        if (groups.empty() || groups.back() != h / g) groups.push_back(h / g);
    return groups;
}

std::vector<int32_t> HybridPlan::fa_kv_index(const ModelConfig& config, int64_t layer) const {
    std::vector<int32_t> index;
    const int32_t g = int32_t(config.group_size());
    int32_t last = -1, slot = -1;
    for (int32_t h : layers[size_t(layer)].fa_heads) {
        if (h / g != last) {
            last = h / g;
            ++slot;
        }
        index.push_back(slot);
    }
    return index;
}

int64_t HybridPlan::total_fa_kv_groups(const ModelConfig& config) const {
    int64_t n = 0;
    for (int64_t l = 0; l < int64_t(layers.size()); ++l) n += int64_t(fa_kv_groups(config, l).size());
    return n;
}

int64_t HybridPlan::kv_bytes_per_token(const ModelConfig& config, int64_t bytes_per_value) const {
    return 2 * total_fa_kv_groups(config) * config.head_dim * bytes_per_value;
}

int64_t HybridPlan::state_bytes(const ModelConfig& config) const {
    const int64_t Dh = config.head_dim, la = total_la_heads();
    const int64_t recurrent = la * Dh * Dh * 4;
    const int64_t conv = la * 3 * Dh * (gdn.conv_size - 1) * 4;
    return recurrent + conv;
}

void HybridPlan::validate(const ModelConfig& config, const std::string& source) const {
    HYDRA_CHECK(int64_t(layers.size()) == config.num_layers, "{}: plan has {} layers but the model has {}", source,
                layers.size(), config.num_layers);
    HYDRA_CHECK(granularity == "kv" || granularity == "head",
                "{}: plan granularity '{}' is not kv or head", source, granularity);
    HYDRA_CHECK(window_sinks >= 0 && window_sinks <= 4096, "{}: window_sinks {} is outside 0..4096", source,
                window_sinks);
    HYDRA_CHECK(
        !la_bias || fusion != FusionKind::None,
        "{}: la_bias is part of the fusion; fusion none has no LA offsets (use scale-norm, la-only or "
        "hymba, or set la_bias false)",
        source);
    HYDRA_CHECK(gdn.conv_size >= 1 && gdn.conv_size <= 16, "{}: gdn.conv_size {} is outside 1..16", source,
                gdn.conv_size);
    HYDRA_CHECK(gdn.chunk_size >= 1 && gdn.chunk_size <= 256, "{}: gdn.chunk_size {} is outside 1..256", source,
                gdn.chunk_size);
    HYDRA_CHECK(gdn.norm_eps > 0 && gdn.norm_eps < 1, "{}: gdn.norm_eps {} is outside (0, 1)", source, gdn.norm_eps);
    const int64_t H = config.num_heads, G = config.group_size();
    for (int64_t l = 0; l < config.num_layers; ++l) {
        const LayerPlan& lp = layers[size_t(l)];
        std::vector<int> seen(size_t(H), 0);
        for (const auto* list : {&lp.fa_heads, &lp.la_heads})
            for (int32_t h : *list) {
                HYDRA_CHECK(h >= 0 && h < H, "{}: layer {} names head {}, but the model has heads 0..{}", source, l, h,
                            H - 1);
                HYDRA_CHECK(seen[size_t(h)]++ == 0, "{}: layer {} lists head {} twice", source, l, h);
            }
        for (int64_t h = 0; h < H; ++h)
            HYDRA_CHECK(seen[size_t(h)] == 1, "{}: layer {} does not place head {} (every head must be FA or LA)",
                        source, l, h);
        for (size_t i = 1; i < lp.fa_heads.size(); ++i)
            HYDRA_CHECK(lp.fa_heads[i - 1] / G < lp.fa_heads[i] / G ||
                            (lp.fa_heads[i - 1] / G == lp.fa_heads[i] / G && lp.fa_heads[i - 1] < lp.fa_heads[i]),
                        "{}: layer {} FA heads are not sorted by KV group", source, l);
        HYDRA_CHECK(std::is_sorted(lp.la_heads.begin(), lp.la_heads.end()), "{}: layer {} LA heads are not ascending",
                    source, l);
        HYDRA_CHECK(lp.fa_window.empty() || lp.fa_window.size() == lp.fa_heads.size(),
                    "{}: layer {} gives {} FA windows for {} FA heads", source, l, lp.fa_window.size(),
                    lp.fa_heads.size());
        for (int32_t w : lp.fa_window)
            HYDRA_CHECK(w >= 0 && w <= (int32_t(1) << 30), "{}: layer {} FA window {} is outside 0..2^30",
                        source, l, w);
        if (granularity == "kv") {
            for (int32_t h : lp.fa_heads)
                for (int64_t m = (h / G) * G; m < (h / G + 1) * G; ++m)
                    HYDRA_CHECK(std::count(lp.fa_heads.begin(), lp.fa_heads.end(), int32_t(m)) == 1,
                                "{}: layer {} keeps head {} FA but not head {} of the same KV group, which kv "
                                "granularity requires (use granularity head to split groups)",
                                source, l, h, m);
        }
    }
}

nlohmann::json HybridPlan::to_json() const {
    nlohmann::json j;
    j["granularity"] = granularity;
    j["fusion"] = fusion_name(fusion);
    if (la_bias) j["la_bias"] = true;
    j["selection"] = selection;
    j["gdn"] = {{"conv_size", gdn.conv_size},
                {"allow_neg_eigval", gdn.allow_neg_eigval},
                {"chunk_size", gdn.chunk_size},
                {"norm_eps", gdn.norm_eps}};
    nlohmann::json ls = nlohmann::json::array();
    for (const LayerPlan& lp : layers) {
        nlohmann::json e = {{"fa", lp.fa_heads}, {"la", lp.la_heads}};
        if (!lp.fa_window.empty()) e["fa_window"] = lp.fa_window;
        ls.push_back(std::move(e));
    }
    j["layers"] = ls;
    if (has_windows()) j["window_sinks"] = window_sinks;
    j["fa_heads"] = total_fa_heads();
    j["la_heads"] = total_la_heads();
    return j;
}

namespace {

std::vector<int32_t> head_list(const nlohmann::json& j, const std::string& where) {
    HYDRA_CHECK(j.is_array(), "{}: expected an array of head indices, got {}", where, json_kind(j));
    std::vector<int32_t> out;
    for (const auto& e : j) {
        HYDRA_CHECK(e.is_number_integer(), "{}: head index must be an integer, got {}", where, json_kind(e));
        const int64_t v = e.get<int64_t>();
        HYDRA_CHECK(v >= 0 && v < (int64_t(1) << 30), "{}: head index {} out of range", where, v);
        out.push_back(int32_t(v));
    }
    return out;
}

}  // namespace

HybridPlan HybridPlan::from_json(const nlohmann::json& j, const ModelConfig& config, const std::string& source) {
    HYDRA_CHECK(j.is_object(), "{}: plan must be an object, got {}", source, json_kind(j));
    // Checkpoints written by `hydra train` before plans existed say {"kind": "teacher"}.
    if (!j.contains("layers") && j.value("kind", std::string()) == "teacher") return all_fa(config);
    static const char* known[] = {"granularity", "fusion",   "selection", "gdn",         "layers",
                                  "fa_heads",    "la_heads", "la_bias",   "window_sinks"};
    for (const auto& [key, value] : j.items())
        HYDRA_CHECK(std::find(std::begin(known), std::end(known), key) != std::end(known),
                    "{}: unknown plan key '{}'", source, key);
    HybridPlan plan;
    plan.gdn.norm_eps = config.rms_norm_eps;
    auto get_string = [&](const char* key, std::string& out) {
        if (!j.contains(key)) return;
        HYDRA_CHECK(j[key].is_string(), "{}: plan.{} must be a string, got {}", source, key, json_kind(j[key]));
        out = j[key].get<std::string>();
    };
    if (j.contains("window_sinks")) {
        HYDRA_CHECK(j["window_sinks"].is_number_integer(), "{}: plan.window_sinks must be an integer, got {}",
                    source, json_kind(j["window_sinks"]));
        plan.window_sinks = j["window_sinks"].get<int64_t>();
    }
    get_string("granularity", plan.granularity);
    get_string("selection", plan.selection);
    std::string fusion = "scale-norm";
    get_string("fusion", fusion);
    plan.fusion = parse_fusion(fusion, source + ": plan.fusion");
    if (j.contains("la_bias")) {
        HYDRA_CHECK(j["la_bias"].is_boolean(), "{}: plan.la_bias must be true or false, got {}", source,
                    json_kind(j["la_bias"]));
        plan.la_bias = j["la_bias"].get<bool>();
    }
    if (j.contains("gdn")) {
        const auto& g = j["gdn"];
        HYDRA_CHECK(g.is_object(), "{}: plan.gdn must be an object", source);
        for (const auto& [key, value] : g.items()) {
            const std::string where = fmt::format("{}: plan.gdn.{}", source, key);
            if (key == "conv_size" || key == "chunk_size") {
                HYDRA_CHECK(value.is_number_integer(), "{} must be an integer, got {}", where, json_kind(value));
                (key == "conv_size" ? plan.gdn.conv_size : plan.gdn.chunk_size) = value.get<int64_t>();
            } else if (key == "allow_neg_eigval") {
                HYDRA_CHECK(value.is_boolean(), "{} must be true or false, got {}", where, json_kind(value));
                plan.gdn.allow_neg_eigval = value.get<bool>();
            } else if (key == "norm_eps") {
                HYDRA_CHECK(value.is_number(), "{} must be a number, got {}", where, json_kind(value));
                plan.gdn.norm_eps = value.get<float>();
            } else {
                fail("{}: unknown key", where);
            }
        }
    }
    HYDRA_CHECK(j.contains("layers") && j["layers"].is_array(), "{}: plan.layers must be an array", source);
    for (size_t l = 0; l < j["layers"].size(); ++l) {
        const auto& e = j["layers"][l];
        const std::string where = fmt::format("{}: plan.layers[{}]", source, l);
        HYDRA_CHECK(e.is_object() && e.contains("fa") && e.contains("la"), "{} must be an object with fa and la", where);
        LayerPlan lp;
        lp.fa_heads = head_list(e["fa"], where + ".fa");
        lp.la_heads = head_list(e["la"], where + ".la");
        if (e.contains("fa_window")) lp.fa_window = head_list(e["fa_window"], where + ".fa_window");
        plan.layers.push_back(std::move(lp));
    }
    plan.validate(config, source);
    return plan;
}

std::string HybridPlan::ratio_summary() const {
    const int64_t fa = total_fa_heads(), la = total_la_heads();
    if (has_windows()) {
        int64_t windowed = 0, width = 0;
        for (const LayerPlan& lp : layers)
            for (int32_t w : lp.fa_window)
                if (w > 0) ++windowed, width = std::max<int64_t>(width, w);
        return fmt::format("{} full + {} sliding-window heads (window {}, {} sinks){}", fa - windowed,
                           windowed, width, window_sinks, la ? fmt::format(" + {} LA", la) : std::string());
    }
    if (la == 0) return fmt::format("all {} heads full attention", fa);
    if (fa == 0) return fmt::format("all {} heads Gated DeltaNet", la);
    return fmt::format("{:.2f}:1 LA:FA heads ({} FA / {} LA)", double(la) / double(fa), fa, la);
}

}  // namespace hydra
