// RoPE scaling of the FA heads with Hugging Face transformers' semantics (modeling_rope_utils.py): the
// types default, linear, dynamic (dynamic NTK), yarn and llama3, their parameters as config.json's
// rope_scaling / rope_parameters hold them, and the one computation every backend consumes: a
// per-pair inverse-frequency table plus an attention scale, computed once on the host.
//
// The rotation of pair i at position p is by angle p * inv_freq[i]; cos and sin are both multiplied by
// attention_scale (as transformers does), so q.k carries attention_scale^2 (YaRN's temperature).
//
// Dynamic NTK depends on the sequence length L: transformers recomputes the frequencies in each forward
// from L = max(position) + 1 once L exceeds the original context, base' = base * (factor * L / orig -
// (factor - 1))^(R / (R - 2)). We apply the same rule per forward call without state: a call of T new
// tokens at positions pos0.. uses L = max(pos0 + T, orig). Keys already in a KV cache keep the rotation
// of the call that wrote them (transformers' generate does the same), so dynamic NTK is exact for
// a whole-prompt forward and follows transformers' cached decoding step by step.
//
// Static NTK-aware scaling (base' = base * alpha^(R / (R - 2)), no transformers type) is a change of
// rope_theta, so it is no type here: `hydra convert --rope-scaling ntk:ALPHA` rewrites rope_theta.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hydra {

struct ModelConfig;

enum class RopeType { Default, Linear, Dynamic, Yarn, Llama3 };

struct RopeScaling {
    RopeType type = RopeType::Default;
    double factor = 1.0;                           // linear / dynamic / yarn / llama3
    int64_t original_max_position_embeddings = 0;  // 0 = absent: yarn and dynamic use max_position_embeddings
    // yarn
    std::optional<double> attention_factor;        // absent: 0.1 ln(factor) + 1 (or the mscale ratio)
    std::optional<double> beta_fast, beta_slow;    // absent: 32 and 1
    std::optional<double> mscale, mscale_all_dim;  // DeepSeek's form of the attention factor
    std::optional<bool> truncate;                  // absent: true (round the correction range outward)
    // llama3
    double low_freq_factor = 1.0, high_freq_factor = 4.0;

    bool is_default() const { return type == RopeType::Default; }
    bool operator==(const RopeScaling&) const = default;
};

// The frequencies of one forward call: inv_freq (R / 2) per rotated pair, and the factor on cos / sin.
struct RopeFrequencies {
    std::vector<double> inv_freq;
    double attention_scale = 1.0;
};

// HF's rope type name ("default", "linear", "dynamic", "yarn", "llama3") and back (nullopt: unknown).
const char* rope_type_name(RopeType t);
std::optional<RopeType> rope_type_from_name(const std::string& name);

// The frequencies for rotated dims `rope_dim`, base `theta`, the model's max_position_embeddings, for a
// call whose sequence reaches length `seq_len` (only dynamic NTK reads it).
RopeFrequencies rope_frequencies(const RopeScaling& s, double theta, int64_t rope_dim,
                                 int64_t max_position_embeddings, int64_t seq_len);
RopeFrequencies rope_frequencies(const ModelConfig& c, int64_t seq_len);

// Dynamic NTK's base for sequence length L (theta itself while L <= the original context).
double dynamic_ntk_base(double theta, double factor, int64_t original, int64_t rope_dim, int64_t seq_len);
// The context length dynamic NTK and YaRN scale from: original_max_position_embeddings or, when absent,
// max_position_embeddings.
int64_t rope_original_context(const RopeScaling& s, int64_t max_position_embeddings);

// Refuses parameters HF would refuse or that make no sense (factor < 1, llama3 without its fields, ...);
// errors name `source`.
void validate_rope_scaling(const RopeScaling& s, int64_t max_position_embeddings, const std::string& source);

// config.json's rope_scaling / rope_parameters object (rope_type or legacy type; rope_theta is read by
// the caller) -> RopeScaling; an unknown type or a bad field is an error naming `source` and `where`.
RopeScaling rope_scaling_from_json(const nlohmann::json& obj, const std::string& source,
                                   const std::string& where);
// The rope_scaling object transformers reads (null for default).
nlohmann::json rope_scaling_to_json(const RopeScaling& s);

// `hydra convert --rope-scaling TYPE:FACTOR[,key=value...]` (keys as in config.json:
// original_max_position_embeddings, attention_factor, beta_fast, beta_slow, low_freq_factor,
// high_freq_factor, truncate). "none" gives default.
RopeScaling parse_rope_scaling_spec(const std::string& spec);

// Sets `s` on a model being converted: for every type but dynamic (which scales from
// max_position_embeddings itself), the model's context becomes original_max_position_embeddings (unless
// the spec gives it) and max_position_embeddings grows to factor times it, as Llama 3.1 and YaRN configs
// declare; validated.
void apply_rope_scaling(ModelConfig& c, const RopeScaling& s);

// Static NTK-aware scaling: the base that stretches the lowest frequency alpha-fold while keeping the
// highest, theta * alpha^(R / (R - 2)) (dynamic NTK's base at a fixed length).
double static_ntk_theta(double theta, double alpha, int64_t rope_dim);

// One line for `hydra info`, e.g. "yarn factor 4, original context 8192, attention factor 1.139".
std::string describe_rope_scaling(const RopeScaling& s, int64_t max_position_embeddings);

}  // namespace hydra
