// HF config.json -> ModelConfig (see hf_config.h).
#include "model/hf_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "io/bounded_parse.h"
#include "io/json_kind.h"
#include "io/json_member.h"

namespace hydra {

namespace {

using json = nlohmann::json;


// Typed access to one JSON object, with errors naming the file and the key.
class Fields {
  public:
    Fields(const json& obj, const std::string& source, std::string prefix = "")
        : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

    // The value of `key`, or nullptr when absent or null (both mean "use the default" in HF configs).
    const json* get(const char* key) const { return json_member(obj_, key); }

    int64_t integer(const char* key) const {
        const json* v = get(key);
        HYDRA_CHECK(v != nullptr, "{}: missing required key \"{}{}\" (an integer)", source_, prefix_, key);
        return as_integer(*v, key);
    }
    std::optional<int64_t> integer_opt(const char* key) const {
        const json* v = get(key);
        if (!v) return std::nullopt;
        return as_integer(*v, key);
    }
    std::optional<double> number_opt(const char* key) const {
        const json* v = get(key);
        if (!v) return std::nullopt;
        HYDRA_CHECK(v->is_number(), "{}: \"{}{}\" is {}, expected a number", source_, prefix_, key,
                    json_kind(*v));
        const double d = v->get<double>();
        HYDRA_CHECK(std::isfinite(d), "{}: \"{}{}\" is not finite", source_, prefix_, key);
        return d;
    }
    std::optional<bool> boolean_opt(const char* key) const {
        const json* v = get(key);
        if (!v) return std::nullopt;
        HYDRA_CHECK(v->is_boolean(), "{}: \"{}{}\" is {}, expected true or false", source_, prefix_, key,
                    json_kind(*v));
        return v->get<bool>();
    }
    std::optional<std::string> string_opt(const char* key) const {
        const json* v = get(key);
        if (!v) return std::nullopt;
        HYDRA_CHECK(v->is_string(), "{}: \"{}{}\" is {}, expected a string", source_, prefix_, key,
                    json_kind(*v));
        return v->get<std::string>();
    }
    // A token id or a list of them (eos_token_id is either); absent or null gives an empty list.
    std::vector<int32_t> token_ids(const char* key) const {
        const json* v = get(key);
        std::vector<int32_t> out;
        if (!v) return out;
        auto one = [&](const json& x) {
            HYDRA_CHECK(x.is_number_integer(), "{}: \"{}{}\" holds {}, expected a token id or a list of them",
                        source_, prefix_, key, json_kind(x));
            HYDRA_CHECK(x.is_number_unsigned() && x.get<uint64_t>() <= uint64_t(INT32_MAX),
                        "{}: \"{}{}\" holds token id {}, out of range (0..{})", source_, prefix_, key,
                        x.dump(), INT32_MAX);
            out.push_back(int32_t(x.get<uint64_t>()));
        };
        if (v->is_array()) {
            for (const json& x : *v) one(x);
        } else {
            one(*v);
        }
        return out;
    }

  private:
    int64_t as_integer(const json& v, const char* key) const {
        HYDRA_CHECK(v.is_number_integer(), "{}: \"{}{}\" is {}, expected an integer", source_, prefix_, key,
                    json_kind(v));
        if (v.is_number_unsigned()) {
            HYDRA_CHECK(v.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()),
                        "{}: \"{}{}\" = {} is out of range", source_, prefix_, key, v.dump());
            return int64_t(v.get<uint64_t>());
        }
        return v.get<int64_t>();
    }

    const json& obj_;
    const std::string& source_;
    std::string prefix_;
};

}  // namespace

ModelConfig parse_hf_config(const std::string& json_text, const std::string& source) {
    const json root = parse_json_bounded(json_text, source);
    HYDRA_CHECK(root.is_object(), "{}: expected a JSON object, found {}", source, json_kind(root));
    const Fields f(root, source);

    // Architecture: model_type, else the first known entry of "architectures".
    static const char* kSupported =
        "llama, qwen2, qwen3 (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)";
    std::string arch;
    if (auto model_type = f.string_opt("model_type")) {
        arch = *model_type;
        HYDRA_CHECK(arch == "llama" || arch == "qwen2" || arch == "qwen3",
                    "{}: model_type \"{}\" is not supported (supported: {})", source, arch, kSupported);
    } else {
        const json* archs = f.get("architectures");
        HYDRA_CHECK(archs != nullptr, "{}: has neither \"model_type\" nor \"architectures\" (supported: {})",
                    source, kSupported);
        HYDRA_CHECK(archs->is_array(), "{}: \"architectures\" is {}, expected a list of strings", source,
                    json_kind(*archs));
        for (const json& a : *archs) {
            HYDRA_CHECK(a.is_string(), "{}: \"architectures\" holds {}, expected strings", source,
                        json_kind(a));
            const std::string& name = a.get_ref<const std::string&>();
            if (name == "LlamaForCausalLM") arch = "llama";
            if (name == "Qwen2ForCausalLM") arch = "qwen2";
            if (name == "Qwen3ForCausalLM") arch = "qwen3";
            if (!arch.empty()) break;
        }
        HYDRA_CHECK(!arch.empty(), "{}: architectures {} are not supported (supported: {})", source,
                    archs->dump(), kSupported);
    }

    ModelConfig c;
    c.architecture = arch;
    {
        // The model directory names the model (config.json itself is always called that).
        const std::filesystem::path dir = std::filesystem::path(source).parent_path();
        c.name = dir.filename().string();
        if (c.name.empty() || c.name == ".") c.name = arch;
    }

    c.vocab_size = f.integer("vocab_size");
    c.hidden_size = f.integer("hidden_size");
    c.intermediate_size = f.integer("intermediate_size");
    c.num_layers = f.integer("num_hidden_layers");
    c.num_heads = f.integer("num_attention_heads");
    HYDRA_CHECK(c.num_heads > 0, "{}: num_attention_heads = {} must be positive", source, c.num_heads);
    c.num_kv_heads = f.integer_opt("num_key_value_heads").value_or(c.num_heads);
    if (auto head_dim = f.integer_opt("head_dim")) {
        c.head_dim = *head_dim;
    } else {
        HYDRA_CHECK(
            c.hidden_size % c.num_heads == 0,
            "{}: hidden_size {} is not a multiple of num_attention_heads {} and \"head_dim\" is not given",
            source, c.hidden_size, c.num_heads);
        c.head_dim = c.hidden_size / c.num_heads;
    }
    c.rope_dim = c.head_dim;
    c.max_position_embeddings = f.integer_opt("max_position_embeddings").value_or(0);
    HYDRA_CHECK(c.max_position_embeddings >= 0, "{}: max_position_embeddings = {} is negative", source,
                c.max_position_embeddings);
    // transformers' default for all three architectures.
    c.rms_norm_eps = float(f.number_opt("rms_norm_eps").value_or(1e-6));

    const std::string act = f.string_opt("hidden_act").value_or("silu");
    HYDRA_CHECK(act == "silu", "{}: hidden_act \"{}\" is not supported (only \"silu\")", source, act);

    // RoPE: rope_theta at the top level (older transformers) or inside rope_parameters (newer), the scaling
    // in rope_scaling (older) or rope_parameters (newer); rope_scaling wins when both scale, as in
    // transformers (`rope_scaling or rope_parameters`).
    std::optional<double> theta = f.number_opt("rope_theta");
    if (const json* params = f.get("rope_parameters")) {
        HYDRA_CHECK(params->is_object(), "{}: \"rope_parameters\" is {}, expected an object", source,
                    json_kind(*params));
        c.rope_scaling = rope_scaling_from_json(*params, source, "rope_parameters");
        if (auto t = Fields(*params, source, "rope_parameters.").number_opt("rope_theta")) theta = *t;
    }
    c.rope_theta = float(theta.value_or(10000.0));
    HYDRA_CHECK(std::isfinite(c.rope_theta), "{}: rope_theta {} does not fit a float", source, *theta);
    if (const json* scaling = f.get("rope_scaling")) {
        HYDRA_CHECK(scaling->is_object(), "{}: \"rope_scaling\" is {}, expected null or an object", source,
                    json_kind(*scaling));
        const RopeScaling s = rope_scaling_from_json(*scaling, source, "rope_scaling");
        if (!s.is_default()) c.rope_scaling = s;
    }
    // hydra's own key (transformers ignores it): the FA heads of a NoPE hybrid rotate nothing
    c.fa_nope = f.boolean_opt("hydra_fa_nope").value_or(false);

    c.tie_word_embeddings = f.boolean_opt("tie_word_embeddings").value_or(false);
    c.bos_token_ids = f.token_ids("bos_token_id");
    c.eos_token_ids = f.token_ids("eos_token_id");

    if (arch == "llama") {
        c.attention_bias = f.boolean_opt("attention_bias").value_or(false);
        HYDRA_CHECK(!f.boolean_opt("mlp_bias").value_or(false), "{}: mlp_bias = true is not supported",
                    source);
    } else if (arch == "qwen2") {
        c.attention_bias = true;  // Qwen2 always has q/k/v biases; there is no flag
    } else {                      // qwen3
        c.attention_bias = f.boolean_opt("attention_bias").value_or(false);
        c.qk_norm = true;
    }
    if (arch != "llama") {
        HYDRA_CHECK(!f.boolean_opt("use_sliding_window").value_or(false),
                    "{}: use_sliding_window = true is not supported (full attention only)", source);
    }

    c.validate(source);
    return c;
}

ModelConfig load_hf_config(const std::string& config_json_path) {
    std::error_code ec;
    HYDRA_CHECK(std::filesystem::is_regular_file(config_json_path, ec), "{}: missing or not a regular file",
                config_json_path);
    return parse_hf_config(read_file_limited(config_json_path, kMaxConfigBytes, "the model config"),
                           config_json_path);
}

nlohmann::json hf_config_to_json(const ModelConfig& c) {
    nlohmann::json j;
    const std::string type = c.architecture;
    j["model_type"] = type;
    j["architectures"] = {type == "qwen2" ? "Qwen2ForCausalLM" : type == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"};
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["num_key_value_heads"] = c.num_kv_heads;
    j["head_dim"] = c.head_dim;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = c.rms_norm_eps;
    j["rope_theta"] = c.rope_theta;
    if (!c.rope_scaling.is_default()) j["rope_scaling"] = rope_scaling_to_json(c.rope_scaling);
    if (c.fa_nope) j["hydra_fa_nope"] = true;
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (type == "llama" || type == "qwen3") j["attention_bias"] = c.attention_bias;
    if (c.bos_token_ids.size() == 1) j["bos_token_id"] = c.bos_token_ids[0];
    if (!c.eos_token_ids.empty()) {
        if (c.eos_token_ids.size() == 1)
            j["eos_token_id"] = c.eos_token_ids[0];
        else
            j["eos_token_id"] = c.eos_token_ids;
    }
    j["torch_dtype"] = "float32";
    return j;
}

}  // namespace hydra
