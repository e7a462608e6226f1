// HF tokenizer.json (+ tokenizer_config.json) -> TokenizerVocab (see vocab_from_tokenizer_json.h).
#include "tokenizer/vocab_from_tokenizer_json.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "core/error.h"

namespace hydra {
namespace {

using json = nlohmann::json;

// Pre-tokenizer regexes as HF writes them in tokenizer.json (Split.pattern.Regex).
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    HYDRA_CHECK(in.good(), "{}: cannot open file", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

json parse_json(const std::string& text, const std::string& path) {
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON: {}", path, e.what());
    }
}

const json& member(const json& j, const char* key, const std::string& path, const std::string& where) {
    HYDRA_CHECK(j.is_object() && j.contains(key), "{}: missing {}{}", path, where.empty() ? "" : where + ".",
                key);
    return j.at(key);
}

bool bool_or(const json& j, const char* key, bool fallback, const std::string& path,
             const std::string& where) {
    if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
    HYDRA_CHECK(j.at(key).is_boolean(), "{}: {}.{} must be true or false", path, where, key);
    return j.at(key).get<bool>();
}

// True when `j` nests arrays/objects more than `limit` levels deep; recurses at most `limit` levels.
bool nested_deeper_than(const json& j, int limit) {
    if (!j.is_structured()) return false;
    if (limit == 0) return true;
    for (const json& e : j)
        if (nested_deeper_than(e, limit - 1)) return true;
    return false;
}

// The first `max` characters of `j` as JSON, for an error message. dump() recurses once per level,
// so a hostile, deeply nested value (a stack overflow) is described instead of dumped.
std::string excerpt(const json& j, size_t max) {
    if (nested_deeper_than(j, 64)) return "(a value nested more than 64 levels deep)";
    return j.dump().substr(0, max);
}

// A string member, `fallback` when absent or null; any other type is an error (nlohmann's value()
// would throw its own exception type instead).
std::string string_or(const json& j, const char* key, const std::string& fallback, const std::string& path,
                      const std::string& where) {
    if (!j.is_object() || !j.contains(key) || j.at(key).is_null()) return fallback;
    HYDRA_CHECK(j.at(key).is_string(), "{}: {}.{} must be a string", path, where, key);
    return j.at(key).get<std::string>();
}

std::string type_of(const json& j) {
    if (j.is_object() && j.contains("type") && j.at("type").is_string())
        return j.at("type").get<std::string>();
    return "";
}

bool is_byte_level_regex(const json& j, const std::string& path, const std::string& where, bool want_regex) {
    if (type_of(j) != "ByteLevel") return false;
    HYDRA_CHECK(!bool_or(j, "add_prefix_space", false, path, where),
                "{}: {}.add_prefix_space = true is not supported", path, where);
    return bool_or(j, "use_regex", true, path, where) == want_regex;
}

// Maps the pre_tokenizer JSON to one of our pre-tokenizer names.
std::string recognise_pre_tokenizer(const json& pre, const std::string& path) {
    const std::string unsupported = fmt::format(
        "{}: pre_tokenizer {} is not supported (supported: ByteLevel; Sequence[Digits(individual_digits), "
        "ByteLevel]; Sequence[Split(Llama-3 or Qwen2 regex), ByteLevel])",
        path, excerpt(pre, 300));
    if (is_byte_level_regex(pre, path, "pre_tokenizer", true)) return "gpt2";
    HYDRA_CHECK(type_of(pre) == "Sequence" && pre.contains("pretokenizers") &&
                    pre.at("pretokenizers").is_array() && pre.at("pretokenizers").size() == 2,
                "{}", unsupported);
    const json& first = pre.at("pretokenizers")[0];
    const json& second = pre.at("pretokenizers")[1];
    if (type_of(first) == "Digits" &&
        bool_or(first, "individual_digits", false, path, "pre_tokenizer.pretokenizers[0]") &&
        is_byte_level_regex(second, path, "pre_tokenizer.pretokenizers[1]", true))
        return "smollm";
    if (type_of(first) == "Split" &&
        is_byte_level_regex(second, path, "pre_tokenizer.pretokenizers[1]", false)) {
        const json* regex = nullptr;
        if (first.contains("pattern") && first.at("pattern").is_object() &&
            first.at("pattern").contains("Regex"))
            regex = &first.at("pattern").at("Regex");
        const std::string where = "pre_tokenizer.pretokenizers[0]";
        const bool isolated = string_or(first, "behavior", "", path, where) == "Isolated" &&
                              !bool_or(first, "invert", false, path, where);
        if (regex && regex->is_string() && isolated) {
            if (regex->get<std::string>() == kLlama3Regex) return "llama-bpe";
            if (regex->get<std::string>() == kQwen2Regex) return "qwen2";
        }
    }
    fail("{}", unsupported);
}

// Token strings in tokenizer_config.json are either "text" or {"content": "text", ...}.
std::optional<std::string> config_token(const json& cfg, const char* key, const std::string& path) {
    if (!cfg.contains(key) || cfg.at(key).is_null()) return std::nullopt;
    const json& t = cfg.at(key);
    if (t.is_string()) return t.get<std::string>();
    HYDRA_CHECK(t.is_object() && t.contains("content") && t.at("content").is_string(),
                "{}: {} must be a string or an object with a string 'content'", path, key);
    return t.at("content").get<std::string>();
}

// The whole import. `path` names tokenizer.json in errors; `read_config` gives the text of the
// sibling tokenizer_config.json, or nothing when there is none. It is called only once
// tokenizer.json itself has been read, so its errors come in file order.
TokenizerVocab from_text(const std::string& json_text, const std::string& path,
                         const std::function<std::optional<std::string>()>& read_config) {
    const json root = parse_json(json_text, path);
    HYDRA_CHECK(root.is_object(), "{}: top level must be a JSON object", path);
    const json& model = member(root, "model", path, "");
    HYDRA_CHECK(model.is_object(), "{}: model must be an object", path);
    // Old files have no model.type; BPE is then recognised by its merges.
    const std::string mtype =
        model.contains("type") ? type_of(model) : (model.contains("merges") ? "BPE" : "");
    HYDRA_CHECK(mtype == "BPE", "{}: model.type is '{}'; only 'BPE' (byte-level) is supported", path, mtype);
    HYDRA_CHECK(!bool_or(model, "byte_fallback", false, path, "model"),
                "{}: model.byte_fallback = true (SentencePiece-style BPE) is not supported", path);
    HYDRA_CHECK(
        !model.contains("unk_token") || model.at("unk_token").is_null(),
        "{}: model.unk_token is set; byte-level BPE without an unknown token is the only kind supported",
        path);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
        HYDRA_CHECK(!model.contains(key) || model.at(key).is_null() ||
                        (model.at(key).is_string() && model.at(key).get<std::string>().empty()),
                    "{}: model.{} is not supported", path, key);
    HYDRA_CHECK(!root.contains("normalizer") || root.at("normalizer").is_null(),
                "{}: normalizer {} is not supported (only none)", path,
                root.contains("normalizer") ? excerpt(root.at("normalizer"), 200) : "");

    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = recognise_pre_tokenizer(member(root, "pre_tokenizer", path, ""), path);

    // Vocabulary: token -> id, ids dense 0..n-1 once the added tokens are merged in.
    const json& vocab = member(model, "vocab", path, "model");
    HYDRA_CHECK(vocab.is_object(), "{}: model.vocab must be an object mapping token -> id", path);
    std::vector<std::optional<std::string>> slots;
    std::vector<int32_t> types;
    auto place = [&](int64_t id, const std::string& text, int32_t type, const std::string& where) {
        HYDRA_CHECK(id >= 0 && id < (int64_t(1) << 24), "{}: {}: id {} is out of range", path, where, id);
        // Ids must end up dense and each needs its own entry in the text, so an id beyond the text's
        // length can never be valid: reject it before allocating slots up to it.
        HYDRA_CHECK(size_t(id) < json_text.size(), "{}: {}: id {} is out of range (the file has {} bytes)",
                    path, where, id, json_text.size());
        if (size_t(id) >= slots.size()) {
            slots.resize(size_t(id) + 1);
            types.resize(size_t(id) + 1, kTokenNormal);
        }
        HYDRA_CHECK(!slots[id] || *slots[id] == text || type != kTokenNormal,
                    "{}: {}: id {} is used by both '{}' and '{}'", path, where, id, *slots[id], text);
        slots[id] = text;
        types[id] = type;
    };
    for (const auto& [text, id] : vocab.items()) {
        HYDRA_CHECK(id.is_number_integer(), "{}: model.vocab[\"{}\"] must be an integer id", path, text);
        place(id.get<int64_t>(), text, kTokenNormal, fmt::format("model.vocab[\"{}\"]", text));
    }
    std::unordered_map<std::string, int32_t> added;
    if (root.contains("added_tokens") && !root.at("added_tokens").is_null()) {
        const json& arr = root.at("added_tokens");
        HYDRA_CHECK(arr.is_array(), "{}: added_tokens must be an array", path);
        for (size_t i = 0; i < arr.size(); ++i) {
            const std::string where = fmt::format("added_tokens[{}]", i);
            const json& t = arr[i];
            HYDRA_CHECK(t.is_object() && t.contains("id") && t.at("id").is_number_integer() &&
                            t.contains("content") && t.at("content").is_string(),
                        "{}: {} must have an integer 'id' and a string 'content'", path, where);
            const std::string content = t.at("content").get<std::string>();
            const bool special = bool_or(t, "special", false, path, where);
            const int64_t id = t.at("id").get<int64_t>();
            HYDRA_CHECK(id < 0 || size_t(id) >= slots.size() || !slots[id] || *slots[id] == content,
                        "{}: {}: id {} is '{}' in model.vocab but '{}' here", path, where, id,
                        id >= 0 && size_t(id) < slots.size() && slots[id] ? *slots[id] : "", content);
            place(id, content, special ? kTokenControl : kTokenUserDefined, where);
            added[content] = int32_t(id);
        }
    }
    v.tokens.reserve(slots.size());
    for (size_t i = 0; i < slots.size(); ++i) {
        HYDRA_CHECK(slots[i].has_value(),
                    "{}: model.vocab: ids are not dense, id {} is missing (vocabulary has {} slots)", path, i,
                    slots.size());
        v.tokens.push_back(std::move(*slots[i]));
    }
    v.token_types = std::move(types);

    // Merges: "A B" strings (older files) or [A, B] pairs (tokenizers >= 0.20).
    if (model.contains("merges") && !model.at("merges").is_null()) {
        const json& merges = model.at("merges");
        HYDRA_CHECK(merges.is_array(), "{}: model.merges must be an array", path);
        v.merges.reserve(merges.size());
        for (size_t i = 0; i < merges.size(); ++i) {
            const json& m = merges[i];
            if (m.is_string()) {
                const std::string s = m.get<std::string>();
                const size_t sp = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
                HYDRA_CHECK(
                    sp != std::string::npos && sp + 1 < s.size() && s.find(' ', sp + 1) == std::string::npos,
                    "{}: model.merges[{}] = '{}' is malformed (expected 'A B')", path, i, s.substr(0, 60));
                v.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
            } else {
                HYDRA_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                            "{}: model.merges[{}] must be \"A B\" or [\"A\", \"B\"]", path, i);
                v.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
            }
        }
    }

    // BOS added by the post-processor (e.g. Llama-3's TemplateProcessing with <|begin_of_text|>).
    if (root.contains("post_processor") && type_of(root.at("post_processor")) == "TemplateProcessing") {
        // By reference: copying a JSON value recurses once per level of nesting.
        const json& post = root.at("post_processor");
        const json* single = post.contains("single") ? &post.at("single") : nullptr;
        if (single && single->is_array() && !single->empty() && (*single)[0].contains("SpecialToken")) {
            const json& special = (*single)[0]["SpecialToken"];
            HYDRA_CHECK(special.is_object(), "{}: post_processor.single[0].SpecialToken must be an object",
                        path);
            const std::string name =
                string_or(special, "id", "", path, "post_processor.single[0].SpecialToken");
            auto it = added.find(name);
            HYDRA_CHECK(it != added.end(),
                        "{}: post_processor.single[0] names '{}', which is not an added token", path, name);
            v.bos_id = it->second;
            v.add_bos = true;
        }
    }

    // Sibling tokenizer_config.json: special tokens by name, add_bos/eos, chat template.
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    const std::string cfg_path = (dir / "tokenizer_config.json").string();
    auto id_of = [&](const std::string& text, const char* key) {
        for (size_t i = 0; i < v.tokens.size(); ++i)
            if (v.tokens[i] == text) return int32_t(i);
        fail("{}: {} '{}' is not in the vocabulary of {}", cfg_path, key, text, path);
    };
    if (const std::optional<std::string> cfg_text = read_config()) {
        const json cfg = parse_json(*cfg_text, cfg_path);
        HYDRA_CHECK(cfg.is_object(), "{}: top level must be a JSON object", cfg_path);
        if (auto t = config_token(cfg, "bos_token", cfg_path)) v.bos_id = id_of(*t, "bos_token");
        if (auto t = config_token(cfg, "eos_token", cfg_path)) v.eos_id = id_of(*t, "eos_token");
        if (auto t = config_token(cfg, "pad_token", cfg_path)) v.pad_id = id_of(*t, "pad_token");
        if (auto t = config_token(cfg, "unk_token", cfg_path)) v.unk_id = id_of(*t, "unk_token");
        v.add_bos = bool_or(cfg, "add_bos_token", v.add_bos, cfg_path, "tokenizer_config");
        v.add_eos = bool_or(cfg, "add_eos_token", v.add_eos, cfg_path, "tokenizer_config");
        if (cfg.contains("chat_template")) {
            const json& ct = cfg.at("chat_template");
            if (ct.is_string()) {
                v.chat_template = ct.get<std::string>();
            } else if (ct.is_array()) {  // [{"name": "default", "template": "..."}, ...]
                for (const json& e : ct)
                    if (e.is_object() && e.contains("name") && e.at("name") == "default" &&
                        e.contains("template") && e.at("template").is_string())
                        v.chat_template = e.at("template").get<std::string>();
            }
        }
    }
    VocabFieldNames names;
    names.tokens = "model.vocab";
    names.token_types = "added_tokens";
    names.merges = "model.merges";
    names.bos = "bos_token";
    names.eos = "eos_token";
    names.unk = "unk_token";
    names.pad = "pad_token";
    names.eot = "eot_token";
    names.pre = "pre_tokenizer";
    validate_vocab(v, path, names);
    return v;
}

}  // namespace

TokenizerVocab vocab_from_tokenizer_json_text(const std::string& json_text, const std::string& source,
                                              const std::string* tokenizer_config_text) {
    return from_text(json_text, source, [&]() -> std::optional<std::string> {
        if (tokenizer_config_text == nullptr) return std::nullopt;
        return *tokenizer_config_text;
    });
}

TokenizerVocab vocab_from_tokenizer_json(const std::string& path) {
    const std::filesystem::path dir = std::filesystem::path(path).parent_path();
    const std::string cfg_path = (dir / "tokenizer_config.json").string();
    TokenizerVocab v = from_text(read_file(path), path, [&]() -> std::optional<std::string> {
        if (!std::filesystem::exists(cfg_path)) return std::nullopt;
        return read_file(cfg_path);
    });
    // chat_template.jinja only when tokenizer_config.json has no template (newer HF layout).
    const std::string jinja_path = (dir / "chat_template.jinja").string();
    if (v.chat_template.empty() && std::filesystem::exists(jinja_path))
        v.chat_template = read_file(jinja_path);
    return v;
}

}  // namespace hydra
