// TrainConfig parsing and validation (see train_config.h).
#include "train/train_config.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "core/closest_name.h"
#include "core/error.h"
#include "io/bounded_parse.h"
#include "io/json_kind.h"

namespace hydra {

namespace {

using json = nlohmann::json;

// One settable key: how to read it from JSON and how to write it back.
struct KeyDef {
    std::function<void(TrainConfig&, const json&, const std::string&)> set;
    std::function<json(const TrainConfig&)> get;
};

template <typename V>
KeyDef field(V TrainConfig::*member) {
    KeyDef d;
    d.set = [member](TrainConfig& c, const json& v, const std::string& where) {
        if constexpr (std::is_same_v<V, bool>) {
            HYDRA_CHECK(v.is_boolean(), "{}: expected true or false, found {}", where, json_kind(v));
            c.*member = v.get<bool>();
        } else if constexpr (std::is_integral_v<V>) {
            HYDRA_CHECK(v.is_number_integer(), "{}: expected an integer, found {}", where, json_kind(v));
            if constexpr (std::is_unsigned_v<V>) {
                HYDRA_CHECK(v.get<int64_t>() >= 0 || v.is_number_unsigned(),
                            "{}: expected a non-negative integer", where);
            }
            c.*member = v.get<V>();
        } else if constexpr (std::is_floating_point_v<V>) {
            HYDRA_CHECK(v.is_number(), "{}: expected a number, found {}", where, json_kind(v));
            c.*member = v.get<V>();
        } else if constexpr (std::is_same_v<V, std::string>) {
            HYDRA_CHECK(v.is_string(), "{}: expected a string, found {}", where, json_kind(v));
            c.*member = v.get<std::string>();
        } else {
            HYDRA_CHECK(v.is_array(), "{}: expected a list of strings, found {}", where, json_kind(v));
            V out;
            for (const auto& e : v) {
                HYDRA_CHECK(e.is_string(), "{}: expected a list of strings, found an element that is {}",
                            where, json_kind(e));
                out.push_back(e.get<std::string>());
            }
            c.*member = out;
        }
    };
    d.get = [member](const TrainConfig& c) { return json(c.*member); };
    return d;
}

const std::map<std::string, KeyDef>& key_table() {
    static const std::map<std::string, KeyDef> table = {
        {"model.hidden_size", field(&TrainConfig::hidden_size)},
        {"model.num_layers", field(&TrainConfig::num_layers)},
        {"model.num_heads", field(&TrainConfig::num_heads)},
        {"model.num_kv_heads", field(&TrainConfig::num_kv_heads)},
        {"model.intermediate_size", field(&TrainConfig::intermediate_size)},
        {"model.rope_theta", field(&TrainConfig::rope_theta)},
        {"model.tie_word_embeddings", field(&TrainConfig::tie_word_embeddings)},
        {"model.init_std", field(&TrainConfig::init_std)},
        {"data.tokenizer", field(&TrainConfig::tokenizer)},
        {"data.sources", field(&TrainConfig::sources)},
        {"data.prose_dir", field(&TrainConfig::prose_dir)},
        {"data.shard_dir", field(&TrainConfig::shard_dir)},
        {"data.corpus", field(&TrainConfig::corpus)},
        {"data.mix", field(&TrainConfig::mix)},
        {"data.heldout_fraction", field(&TrainConfig::heldout_fraction)},
        {"data.seq_len", field(&TrainConfig::seq_len)},
        {"data.batch_size", field(&TrainConfig::batch_size)},
        {"data.seed", field(&TrainConfig::data_seed)},
        {"optim.lr", field(&TrainConfig::lr)},
        {"optim.min_lr_ratio", field(&TrainConfig::min_lr_ratio)},
        {"optim.warmup_steps", field(&TrainConfig::warmup_steps)},
        {"optim.schedule", field(&TrainConfig::schedule)},
        {"optim.schedule_steps", field(&TrainConfig::schedule_steps)},
        {"optim.decay_fraction", field(&TrainConfig::decay_fraction)},
        {"optim.beta1", field(&TrainConfig::beta1)},
        {"optim.beta2", field(&TrainConfig::beta2)},
        {"optim.eps", field(&TrainConfig::eps)},
        {"optim.weight_decay", field(&TrainConfig::weight_decay)},
        {"optim.grad_clip", field(&TrainConfig::grad_clip)},
        {"stage.kind", field(&TrainConfig::stage)},
        {"stage.init", field(&TrainConfig::init)},
        {"stage.teacher", field(&TrainConfig::teacher)},
        {"stage.trainable", field(&TrainConfig::trainable)},
        {"stage.mixer_lr_scale", field(&TrainConfig::mixer_lr_scale)},
        {"loss.ce_weight", field(&TrainConfig::ce_weight)},
        {"loss.kl_weight", field(&TrainConfig::kl_weight)},
        {"loss.temperature", field(&TrainConfig::temperature)},
        {"loss.kl_max_position", field(&TrainConfig::kl_max_position)},
        {"loss.ce_from_position", field(&TrainConfig::ce_from_position)},
        {"data.synthetic_fraction", field(&TrainConfig::synthetic_fraction)},
        {"data.synthetic_tasks", field(&TrainConfig::synthetic_tasks)},
        {"run.steps", field(&TrainConfig::steps)},
        {"run.log_every", field(&TrainConfig::log_every)},
        {"run.eval_every", field(&TrainConfig::eval_every)},
        {"run.eval_batches", field(&TrainConfig::eval_batches)},
        {"run.save_every", field(&TrainConfig::save_every)},
        {"run.seed", field(&TrainConfig::seed)},
        {"run.max_bad_steps", field(&TrainConfig::max_bad_steps)},
        {"run.recompute", field(&TrainConfig::recompute)},
        {"run.threads", field(&TrainConfig::threads)},
        {"run.device", field(&TrainConfig::device)},
    };
    return table;
}

}  // namespace

void TrainConfig::set(const std::string& key, const json& value, const std::string& origin) {
    const auto& table = key_table();
    auto it = table.find(key);
    if (it == table.end()) {
        std::string known;
        std::vector<std::string> names;
        for (const auto& [k, _] : table) known += (known.empty() ? "" : ", ") + k, names.push_back(k);
        if (const std::optional<std::string> meant = closest_name(key, names))
            fail("{}: unknown key '{}'; did you mean '{}'? (known keys: {})", origin, key, *meant, known);
        fail("{}: unknown key '{}' (known keys: {})", origin, key, known);
    }
    it->second.set(*this, value, fmt::format("{}: key '{}'", origin, key));
}

void TrainConfig::apply(const json& object, const std::string& origin) {
    HYDRA_CHECK(object.is_object(), "{}: expected an object of settings, found {}", origin,
                json_kind(object));
    // Keys are section.name, so objects nest two levels; a deeper object is an unknown key, found
    // here without recursing once per level of untrusted input.
    constexpr int kMaxKeyParts = 4;
    std::vector<std::pair<const json*, std::string>> todo = {{&object, ""}};
    while (!todo.empty()) {
        const auto [o, prefix] = todo.back();
        todo.pop_back();
        const int parts = prefix.empty() ? 0 : int(std::count(prefix.begin(), prefix.end(), '.')) + 1;
        for (const auto& [k, v] : o->items()) {
            const std::string key = prefix.empty() ? k : prefix + "." + k;
            if (!v.is_object()) {
                set(key, v, origin);
                continue;
            }
            HYDRA_CHECK(parts + 1 < kMaxKeyParts,
                        "{}: unknown key '{}...': settings nest two levels (section.key)", origin,
                        key.substr(0, 64));
            todo.emplace_back(&v, key);
        }
    }
}

void TrainConfig::apply_override(const std::string& assignment) {
    const size_t eq = assignment.find('=');
    HYDRA_CHECK(eq != std::string::npos && eq > 0, "override '{}': expected key=value", assignment);
    const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
    const json value = try_parse_json_bounded(text).value_or(json(text));  // a bare word is a string
    set(key, value, "command line");
}

void TrainConfig::validate() const {
    auto positive = [](int64_t v, const char* key) {
        HYDRA_CHECK(v > 0, "config: {} must be positive (got {})", key, v);
    };
    positive(hidden_size, "model.hidden_size");
    positive(num_layers, "model.num_layers");
    positive(num_heads, "model.num_heads");
    positive(num_kv_heads, "model.num_kv_heads");
    positive(intermediate_size, "model.intermediate_size");
    positive(seq_len, "data.seq_len");
    positive(batch_size, "data.batch_size");
    positive(steps, "run.steps");
    positive(schedule_steps, "optim.schedule_steps");
    positive(log_every, "run.log_every");
    positive(save_every, "run.save_every");
    positive(eval_every, "run.eval_every");
    positive(max_bad_steps, "run.max_bad_steps");
    // 0 held-out batches would make every held-out loss NaN.
    positive(eval_batches, "run.eval_batches");
    HYDRA_CHECK(warmup_steps >= 0, "config: optim.warmup_steps must be >= 0 (got {})", warmup_steps);
    HYDRA_CHECK(threads >= 0 && threads <= 4096,
                "config: run.threads {} out of range (0 = all cores, else 1..4096)", threads);
    HYDRA_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
                "config: optim.beta1 {} and optim.beta2 {} must be in [0, 1)", beta1, beta2);
    HYDRA_CHECK(eps > 0, "config: optim.eps must be positive (got {})", eps);
    HYDRA_CHECK(weight_decay >= 0, "config: optim.weight_decay must be >= 0 (got {})", weight_decay);
    HYDRA_CHECK(decay_fraction >= 0 && decay_fraction <= 1,
                "config: optim.decay_fraction {} out of range [0, 1]", decay_fraction);
    HYDRA_CHECK(hidden_size % num_heads == 0,
                "config: model.hidden_size {} is not a multiple of model.num_heads {}", hidden_size,
                num_heads);
    HYDRA_CHECK((hidden_size / num_heads) % 2 == 0, "config: head size {} must be even for RoPE",
                hidden_size / num_heads);
    HYDRA_CHECK(num_heads % num_kv_heads == 0,
                "config: model.num_heads {} is not a multiple of model.num_kv_heads {}", num_heads,
                num_kv_heads);
    HYDRA_CHECK(lr > 0 && lr < 1, "config: optim.lr {} out of range (0, 1)", lr);
    HYDRA_CHECK(stage == "pretrain" || stage == "align" || stage == "distill" || stage == "longctx",
                "config: stage.kind '{}' is not pretrain, align, distill or longctx", stage);
    HYDRA_CHECK(
        stage == "pretrain" || !init.empty(),
        "config: stage.kind {} needs stage.init (the converted hybrid or the previous stage's output)",
        stage);
    HYDRA_CHECK(!(stage == "align" || stage == "distill" || kl_weight > 0) || !teacher.empty(),
                "config: stage.kind {} needs stage.teacher (the full-attention model)", stage);
    HYDRA_CHECK(ce_weight >= 0 && kl_weight >= 0 && ce_weight + kl_weight > 0,
                "config: loss.ce_weight {} and loss.kl_weight {} must be >= 0 and not both 0", ce_weight,
                kl_weight);
    HYDRA_CHECK(device == "cpu" || device == "cuda", "config: run.device '{}' is not cpu or cuda", device);
    HYDRA_CHECK(temperature > 0 && temperature < 100, "config: loss.temperature {} out of range (0, 100)",
                temperature);
    HYDRA_CHECK(mixer_lr_scale > 0 && mixer_lr_scale <= 1000, "config: stage.mixer_lr_scale {} out of range",
                mixer_lr_scale);
    HYDRA_CHECK(synthetic_fraction >= 0 && synthetic_fraction < 1,
                "config: data.synthetic_fraction {} not in [0, 1)", synthetic_fraction);
    HYDRA_CHECK(kl_max_position >= 0, "config: loss.kl_max_position must be >= 0");
    HYDRA_CHECK(ce_from_position >= 0, "config: loss.ce_from_position must be >= 0");
    HYDRA_CHECK(
        ce_from_position == 0 || ce_weight == 0 || ce_from_position < seq_len,
        "config: loss.ce_from_position {} leaves no position of data.seq_len {} for the cross-entropy "
        "(loss.ce_weight {})",
        ce_from_position, seq_len, ce_weight);
    HYDRA_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1, "config: optim.min_lr_ratio {} out of range [0, 1]",
                min_lr_ratio);
    HYDRA_CHECK(schedule == "constant" || schedule == "cosine" || schedule == "wsd",
                "config: optim.schedule '{}' is not one of constant, cosine, wsd", schedule);
    HYDRA_CHECK(heldout_fraction > 0 && heldout_fraction < 0.5,
                "config: data.heldout_fraction {} out of range (0, 0.5)", heldout_fraction);
    HYDRA_CHECK(!sources.empty(), "config: data.sources is empty");
    HYDRA_CHECK(grad_clip >= 0, "config: optim.grad_clip must be >= 0 (0 disables clipping)");
    HYDRA_CHECK(init_std > 0, "config: model.init_std must be positive");
}

json TrainConfig::to_json() const {
    json out = json::object();
    for (const auto& [key, def] : key_table()) {
        const size_t dot = key.find('.');
        out[key.substr(0, dot)][key.substr(dot + 1)] = def.get(*this);
    }
    return out;
}

ModelConfig TrainConfig::model_config(int32_t vocab_size, int32_t eos_id) const {
    ModelConfig m;
    m.architecture = "llama";
    m.name = "hydra-train";
    m.vocab_size = vocab_size;
    m.hidden_size = hidden_size;
    m.intermediate_size = intermediate_size;
    m.num_layers = num_layers;
    m.num_heads = num_heads;
    m.num_kv_heads = num_kv_heads;
    m.head_dim = hidden_size / num_heads;
    m.rope_dim = m.head_dim;
    m.rope_theta = float(rope_theta);
    m.rms_norm_eps = 1e-5f;
    m.max_position_embeddings = seq_len;
    m.tie_word_embeddings = tie_word_embeddings;
    if (eos_id >= 0) m.eos_token_ids = {eos_id};
    return m;
}

TrainConfig TrainConfig::preset(const std::string& name) {
    TrainConfig c;
    if (name == "tiny-cpu") return c;  // the defaults: ~6M parameters, byte-level, trains in minutes
    if (name == "test-micro") {        // for tests: seconds on a laptop core
        c.hidden_size = 32;
        c.num_layers = 2;
        c.num_heads = 4;
        c.num_kv_heads = 2;
        c.intermediate_size = 64;
        c.seq_len = 32;
        c.batch_size = 2;
        c.steps = 20;
        c.schedule_steps = 40;
        c.warmup_steps = 2;
        c.log_every = 1;
        c.eval_every = 10;
        c.eval_batches = 2;
        c.save_every = 5;
        c.sources = {"austen_persuasion.txt"};
        return c;
    }
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown preset '{}' (presets: {})", name, names);
}

std::vector<std::string> TrainConfig::preset_names() {
    return {"tiny-cpu", "test-micro"};
}

std::vector<std::string> TrainConfig::keys() {
    std::vector<std::string> out;
    for (const auto& [k, _] : key_table()) out.push_back(k);
    return out;
}

json load_config_file(const std::string& path) {
    const std::string text = read_file_limited(path, kMaxConfigBytes, "the config file");
    if (path.size() > 5 && path.ends_with(".toml")) return parse_toml_bounded(text, path);
    try {
        return parse_json_bounded(text, path);
    } catch (const Error& e) {
        fail("{} (config files are .json or .toml)", e.what());
    }
}

}  // namespace hydra
