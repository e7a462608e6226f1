// RoPE scaling: HF's frequency formulas, config.json fields and the convert spec (see rope_scaling.h).
#include "model/rope_scaling.h"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>

#include "core/error.h"
#include "core/parse_number.h"
#include "io/json_kind.h"
#include "io/json_member.h"
#include "model/model_config.h"

namespace hydra {

namespace {

constexpr const char* kTypes = "default, linear, dynamic, yarn, llama3";

// YaRN's attention factor when the config gives none (transformers' get_mscale).
double yarn_mscale(double scale, double mscale = 1.0) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double yarn_attention_factor(const RopeScaling& s) {
    if (s.attention_factor) return *s.attention_factor;
    // transformers tests `mscale and mscale_all_dim`: a zero counts as absent
    if (s.mscale.value_or(0) != 0 && s.mscale_all_dim.value_or(0) != 0)
        return yarn_mscale(s.factor, *s.mscale) / yarn_mscale(s.factor, *s.mscale_all_dim);
    return yarn_mscale(s.factor);
}

}  // namespace

const char* rope_type_name(RopeType t) {
    switch (t) {
        case RopeType::Default:
            return "default";
        case RopeType::Linear:
            return "linear";
        case RopeType::Dynamic:
            return "dynamic";
        case RopeType::Yarn:
            return "yarn";
        case RopeType::Llama3:
            return "llama3";
    }
    return "?";
}

std::optional<RopeType> rope_type_from_name(const std::string& name) {
    for (RopeType t :
         {RopeType::Default, RopeType::Linear, RopeType::Dynamic, RopeType::Yarn, RopeType::Llama3})
        if (name == rope_type_name(t)) return t;
    return std::nullopt;
}

int64_t rope_original_context(const RopeScaling& s, int64_t max_position_embeddings) {
    // dynamic NTK reads max_position_embeddings only (transformers' _compute_dynamic_ntk_parameters)
    if (s.type == RopeType::Dynamic) return max_position_embeddings;
    return s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings
                                                  : max_position_embeddings;
}

double dynamic_ntk_base(double theta, double factor, int64_t original, int64_t rope_dim, int64_t seq_len) {
    const double L = double(std::max(seq_len, original));
    const double R = double(rope_dim);
    return theta * std::pow(factor * L / double(original) - (factor - 1.0), R / (R - 2.0));
}

double static_ntk_theta(double theta, double alpha, int64_t rope_dim) {
    HYDRA_CHECK(std::isfinite(alpha) && alpha >= 1 && alpha <= 1e6,
                "NTK alpha {} out of range (expected 1 .. 1e6)", alpha);
    const double R = double(rope_dim);
    return theta * std::pow(alpha, R / (R - 2.0));
}

RopeFrequencies rope_frequencies(const RopeScaling& s, double theta, int64_t rope_dim, int64_t max_pos,
                                 int64_t seq_len) {
    HYDRA_ASSERT(rope_dim >= 2 && rope_dim % 2 == 0, "rope_frequencies: rope_dim {}", rope_dim);
    const int64_t half = rope_dim / 2;
    const double R = double(rope_dim);
    RopeFrequencies f;
    f.inv_freq.resize(size_t(half));
    // The plain frequencies theta^(-2i/R): the same expression as ever, so default RoPE is bit-identical.
    auto plain = [&](double base) {
        for (int64_t i = 0; i < half; ++i) f.inv_freq[size_t(i)] = std::pow(base, -2.0 * double(i) / R);
    };
    switch (s.type) {
        case RopeType::Default:
            plain(theta);
            break;
        case RopeType::Linear:
            plain(theta);
            for (double& v : f.inv_freq) v /= s.factor;
            break;
        case RopeType::Dynamic: {
            const int64_t orig = rope_original_context(s, max_pos);
            plain(seq_len > orig ? dynamic_ntk_base(theta, s.factor, orig, rope_dim, seq_len) : theta);
            break;
        }
        case RopeType::Yarn: {
            const double orig = double(rope_original_context(s, max_pos));
            const double beta_fast = s.beta_fast.value_or(0) != 0 ? *s.beta_fast : 32.0;  // HF: `or 32`
            const double beta_slow = s.beta_slow.value_or(0) != 0 ? *s.beta_slow : 1.0;
            // the dimension at which a wavelength makes num_rotations turns over the original context
            auto correction_dim = [&](double num_rotations) {
                return R * std::log(orig / (num_rotations * 2.0 * std::numbers::pi)) /
                       (2.0 * std::log(theta));
            };
            double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
            if (s.truncate.value_or(true)) low = std::floor(low), high = std::ceil(high);
            low = std::max(low, 0.0), high = std::min(high, R - 1.0);
            if (low == high) high += 0.001;  // HF: prevent the singularity
            for (int64_t i = 0; i < half; ++i) {
                const double extrap = std::pow(theta, -2.0 * double(i) / R);
                const double interp = extrap / s.factor;
                const double ramp = std::clamp((double(i) - low) / (high - low), 0.0, 1.0);
                const double extrap_weight = 1.0 - ramp;
                f.inv_freq[size_t(i)] = interp * (1.0 - extrap_weight) + extrap * extrap_weight;
            }
            f.attention_scale = yarn_attention_factor(s);
            break;
        }
        case RopeType::Llama3: {
            plain(theta);
            const double orig = double(rope_original_context(s, max_pos));
            const double low_wavelen = orig / s.low_freq_factor, high_wavelen = orig / s.high_freq_factor;
            for (double& v : f.inv_freq) {
                const double wavelen = 2.0 * std::numbers::pi / v;
                if (wavelen > low_wavelen) {  // long wavelengths: interpolated
                    v /= s.factor;
                } else if (!(wavelen < high_wavelen)) {  // between: smooth blend
                    const double smooth =
                        (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                    v = (1.0 - smooth) * v / s.factor + smooth * v;
                }  // short wavelengths: unchanged
            }
            break;
        }
    }
    return f;
}

RopeFrequencies rope_frequencies(const ModelConfig& c, int64_t seq_len) {
    return rope_frequencies(c.rope_scaling, double(c.rope_theta), c.rope_dim, c.max_position_embeddings,
                            seq_len);
}

void validate_rope_scaling(const RopeScaling& s, int64_t max_pos, const std::string& source) {
    if (s.type == RopeType::Default) return;
    const char* name = rope_type_name(s.type);
    HYDRA_CHECK(std::isfinite(s.factor) && s.factor >= 1.0 && s.factor <= 1e6,
                "{}: rope_scaling {} factor {} out of range (expected 1 .. 1e6)", source, name, s.factor);
    HYDRA_CHECK(s.original_max_position_embeddings >= 0,
                "{}: rope_scaling original_max_position_embeddings {} is negative", source,
                s.original_max_position_embeddings);
    if (s.type != RopeType::Linear)
        HYDRA_CHECK(rope_original_context(s, max_pos) > 0,
                    "{}: rope_scaling {} needs original_max_position_embeddings or max_position_embeddings",
                    source, name);
    if (s.type == RopeType::Yarn) {
        for (const auto& [v, key] : {std::pair{s.attention_factor, "attention_factor"},
                                     {s.beta_fast, "beta_fast"},
                                     {s.beta_slow, "beta_slow"},
                                     {s.mscale, "mscale"},
                                     {s.mscale_all_dim, "mscale_all_dim"}})
            HYDRA_CHECK(!v || (std::isfinite(*v) && *v >= 0), "{}: rope_scaling yarn {} {} must be >= 0",
                        source, key, *v);
        HYDRA_CHECK(s.beta_fast.value_or(32) > 0 && s.beta_slow.value_or(1) > 0,
                    "{}: rope_scaling yarn beta_fast and beta_slow must be positive", source);
    }
    if (s.type == RopeType::Llama3) {
        HYDRA_CHECK(
            rope_original_context(s, max_pos) > 0,
            "{}: rope_scaling llama3 needs original_max_position_embeddings or max_position_embeddings",
            source);
        HYDRA_CHECK(std::isfinite(s.low_freq_factor) && std::isfinite(s.high_freq_factor) &&
                        s.low_freq_factor > 0 && s.high_freq_factor > s.low_freq_factor,
                    "{}: rope_scaling llama3 needs 0 < low_freq_factor ({}) < high_freq_factor ({})", source,
                    s.low_freq_factor, s.high_freq_factor);
    }
}

RopeScaling rope_scaling_from_json(const nlohmann::json& obj, const std::string& source,
                                   const std::string& where) {
    HYDRA_CHECK(obj.is_object(), "{}: \"{}\" is {}, expected an object", source, where, json_kind(obj));
    auto get = [&](const char* key) { return json_member(obj, key); };
    auto number = [&](const char* key) -> std::optional<double> {
        const nlohmann::json* v = get(key);
        if (!v) return std::nullopt;
        HYDRA_CHECK(v->is_number(), "{}: \"{}.{}\" is {}, expected a number", source, where, key,
                    json_kind(*v));
        const double d = v->get<double>();
        HYDRA_CHECK(std::isfinite(d), "{}: \"{}.{}\" is not finite", source, where, key);
        return d;
    };
    std::string type = "default";
    for (const char* key : {"rope_type", "type"}) {
        if (const nlohmann::json* v = get(key)) {
            HYDRA_CHECK(v->is_string(), "{}: \"{}.{}\" is {}, expected a string", source, where, key,
                        json_kind(*v));
            type = v->get<std::string>();
            break;
        }
    }
    const std::optional<RopeType> t = rope_type_from_name(type);
    HYDRA_CHECK(t.has_value(), "{}: {} type \"{}\" is not supported yet (supported: {})", source, where, type,
                kTypes);
    RopeScaling s;
    s.type = *t;
    if (s.type == RopeType::Default) return s;
    const std::optional<double> factor = number("factor");
    HYDRA_CHECK(factor.has_value(), "{}: {}.factor is missing ({} needs it)", source, where, type);
    s.factor = *factor;
    if (const nlohmann::json* v = get("original_max_position_embeddings")) {
        HYDRA_CHECK(
            v->is_number_integer() || (v->is_number() && std::floor(v->get<double>()) == v->get<double>()),
            "{}: \"{}.original_max_position_embeddings\" is {}, expected an integer", source, where,
            v->dump());
        const double d = v->get<double>();
        HYDRA_CHECK(d > 0 && d < 1e12, "{}: \"{}.original_max_position_embeddings\" = {} out of range",
                    source, where, d);
        s.original_max_position_embeddings = int64_t(d);
    }
    // transformers' dynamic NTK scales from max_position_embeddings and never reads this field
    if (s.type == RopeType::Dynamic) s.original_max_position_embeddings = 0;
    if (s.type == RopeType::Yarn) {
        s.attention_factor = number("attention_factor");
        s.beta_fast = number("beta_fast");
        s.beta_slow = number("beta_slow");
        s.mscale = number("mscale");
        s.mscale_all_dim = number("mscale_all_dim");
        if (const nlohmann::json* v = get("truncate")) {
            HYDRA_CHECK(v->is_boolean(), "{}: \"{}.truncate\" is {}, expected true or false", source, where,
                        json_kind(*v));
            s.truncate = v->get<bool>();
        }
    }
    if (s.type == RopeType::Llama3) {
        // original_max_position_embeddings may be absent: transformers then takes max_position_embeddings
        const auto low = number("low_freq_factor"), high = number("high_freq_factor");
        HYDRA_CHECK(low && high, "{}: {} of type llama3 needs factor, low_freq_factor and high_freq_factor",
                    source, where);
        s.low_freq_factor = *low, s.high_freq_factor = *high;
    }
    return s;
}

nlohmann::json rope_scaling_to_json(const RopeScaling& s) {
    if (s.type == RopeType::Default) return nullptr;
    nlohmann::json j;
    j["rope_type"] = rope_type_name(s.type);
    j["factor"] = s.factor;
    if (s.type != RopeType::Dynamic && s.original_max_position_embeddings > 0)
        j["original_max_position_embeddings"] = s.original_max_position_embeddings;
    if (s.type == RopeType::Yarn) {
        if (s.attention_factor) j["attention_factor"] = *s.attention_factor;
        if (s.beta_fast) j["beta_fast"] = *s.beta_fast;
        if (s.beta_slow) j["beta_slow"] = *s.beta_slow;
        if (s.mscale) j["mscale"] = *s.mscale;
        if (s.mscale_all_dim) j["mscale_all_dim"] = *s.mscale_all_dim;
        if (s.truncate) j["truncate"] = *s.truncate;
    }
    if (s.type == RopeType::Llama3) {
        j["low_freq_factor"] = s.low_freq_factor;
        j["high_freq_factor"] = s.high_freq_factor;
    }
    return j;
}

RopeScaling parse_rope_scaling_spec(const std::string& spec) {
    const std::string usage =
        "expected TYPE:FACTOR[,key=value...] with TYPE linear, dynamic, yarn or llama3 (or \"none\"), e.g. "
        "yarn:4,original_max_position_embeddings=8192";
    if (spec == "none" || spec == "default") return {};
    const size_t colon = spec.find(':');
    HYDRA_CHECK(colon != std::string::npos, "--rope-scaling \"{}\": {}", spec, usage);
    nlohmann::json obj;
    obj["rope_type"] = spec.substr(0, colon);
    std::stringstream rest(spec.substr(colon + 1));
    std::string item;
    bool first = true;
    auto number = [&](const std::string& text, const std::string& what) {
        const std::optional<double> v = parse_finite_double(text);
        HYDRA_CHECK(v.has_value(), "--rope-scaling \"{}\": {} \"{}\" is not a number", spec, what, text);
        return *v;
    };
    while (std::getline(rest, item, ',')) {
        if (first) {
            obj["factor"] = number(item, "factor");
            first = false;
            continue;
        }
        const size_t eq = item.find('=');
        HYDRA_CHECK(eq != std::string::npos, "--rope-scaling \"{}\": \"{}\" is not key=value; {}", spec, item,
                    usage);
        const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
        static const char* kKeys[] = {"original_max_position_embeddings",
                                      "attention_factor",
                                      "beta_fast",
                                      "beta_slow",
                                      "mscale",
                                      "mscale_all_dim",
                                      "low_freq_factor",
                                      "high_freq_factor",
                                      "truncate"};
        HYDRA_CHECK(std::find_if(std::begin(kKeys), std::end(kKeys),
                                 [&](const char* k) { return key == k; }) != std::end(kKeys),
                    "--rope-scaling \"{}\": unknown key \"{}\" (keys: original_max_position_embeddings, "
                    "attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim, low_freq_factor, "
                    "high_freq_factor, truncate)",
                    spec, key);
        if (key == "truncate") {
            HYDRA_CHECK(value == "true" || value == "false",
                        "--rope-scaling \"{}\": truncate must be true or false", spec);
            obj[key] = value == "true";
        } else if (key == "original_max_position_embeddings") {
            const double v = number(value, key);
            HYDRA_CHECK(v > 0 && v < 1e12 && std::floor(v) == v,
                        "--rope-scaling \"{}\": {} must be a positive integer", spec, key);
            obj[key] = int64_t(v);
        } else {
            obj[key] = number(value, key);
        }
    }
    HYDRA_CHECK(!first, "--rope-scaling \"{}\": the factor is missing; {}", spec, usage);
    if (obj["rope_type"] == "llama3") {  // Llama 3.1's values unless given
        if (!obj.contains("low_freq_factor")) obj["low_freq_factor"] = 1.0;
        if (!obj.contains("high_freq_factor")) obj["high_freq_factor"] = 4.0;
    }
    const RopeScaling s = rope_scaling_from_json(obj, "--rope-scaling " + spec, "rope_scaling");
    // the rest is checked against the model (apply_rope_scaling); a factor below 1 is wrong for any
    HYDRA_CHECK(s.factor >= 1 && s.factor <= 1e6,
                "--rope-scaling \"{}\": factor {} out of range (expected 1 .. 1e6)", spec, s.factor);
    return s;
}

void apply_rope_scaling(ModelConfig& c, const RopeScaling& s) {
    RopeScaling r = s;
    if (r.type != RopeType::Default && r.type != RopeType::Dynamic) {
        // The model's trained window becomes the original context; the scaled window is factor times it
        // (Llama 3.1: 8192 -> 131072), as transformers expects of yarn and llama3 configs.
        if (r.original_max_position_embeddings == 0)
            r.original_max_position_embeddings = c.max_position_embeddings;
        HYDRA_CHECK(
            r.original_max_position_embeddings > 0,
            "--rope-scaling: the model declares no context length; give original_max_position_embeddings=N");
        c.max_position_embeddings =
            int64_t(std::llround(r.factor * double(r.original_max_position_embeddings)));
    }
    validate_rope_scaling(r, c.max_position_embeddings, "--rope-scaling");
    c.rope_scaling = r;
}

std::string describe_rope_scaling(const RopeScaling& s, int64_t max_pos) {
    if (s.type == RopeType::Default) return "none";
    std::string out = fmt::format("{} factor {:g}", rope_type_name(s.type), s.factor);
    out += fmt::format(", original context {}", rope_original_context(s, max_pos));
    if (s.type == RopeType::Yarn) {
        out += fmt::format(", attention factor {:.4g}", yarn_attention_factor(s));
        out += fmt::format(", beta fast {:g} slow {:g}", s.beta_fast.value_or(32), s.beta_slow.value_or(1));
    }
    if (s.type == RopeType::Llama3)
        out += fmt::format(", low/high freq factor {:g}/{:g}", s.low_freq_factor, s.high_freq_factor);
    return out;
}

}  // namespace hydra
