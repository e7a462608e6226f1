// TokenizerVocab -> HF tokenizer.json + tokenizer_config.json (see vocab_to_tokenizer_json.h).
#include "tokenizer/vocab_to_tokenizer_json.h"

#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/pretokenizer.h"

namespace hydra {
namespace {

// Key order matters to people reading the file and to diffs against HF's own output, so
// tokenizer.json is built in insertion order.
using ojson = nlohmann::ordered_json;
using json = nlohmann::json;

constexpr const char* kSource = "tokenizer writer";

// The Split regexes exactly as `tokenizers` serialises them for Llama-3 and Qwen2; the reader
// recognises the pre-tokenizer by comparing these strings, so a one-character difference would
// make the written file unreadable (the round-trip tests catch that).
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

int32_t type_of(const TokenizerVocab& v, size_t id) {
    return v.token_types.empty() ? kTokenNormal : v.token_types[id];
}

// Control and user-defined tokens are literal text split out before BPE: HF's added tokens.
bool is_added(const TokenizerVocab& v, size_t id) {
    const int32_t t = type_of(v, id);
    return t == kTokenControl || t == kTokenUserDefined;
}

// Everything the two writers need to hold, checked once. validate_vocab covers what the Tokenizer
// relies on; the extra checks are what only the file format cannot express.
void check_writable(const TokenizerVocab& v) {
    VocabFieldNames names;  // the struct's own field names: the vocabulary came from memory
    names.tokens = "tokens";
    names.token_types = "token_types";
    names.merges = "merges";
    names.bos = "bos_id";
    names.eos = "eos_id";
    names.unk = "unk_id";
    names.pad = "pad_id";
    names.eot = "eot_id";
    names.pre = "pre";
    validate_vocab(v, kSource, names);
    // HF resolves every added token's id through model.vocab (a map from spelling to id), so a
    // spelling used twice would silently lose one of its ids.
    std::unordered_map<std::string_view, size_t> seen;
    seen.reserve(v.tokens.size() * 2);
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        const auto [it, inserted] = seen.emplace(v.tokens[i], i);
        HYDRA_CHECK(inserted,
                    "{}: tokens {} and {} are both spelled '{}'; tokenizer.json can map a spelling to only "
                    "one id",
                    kSource, it->second, i, v.tokens[i].substr(0, 60));
    }
    HYDRA_CHECK(is_valid_utf8(v.chat_template), "{}: chat_template is not valid UTF-8 (byte {})", kSource,
                utf8_invalid_offset(v.chat_template));
}

ojson byte_level(bool use_regex) {
    return ojson{
        {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

ojson split_then_byte_level(const char* regex) {
    const ojson split = {
        {"type", "Split"}, {"pattern", ojson{{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
    // The regex already splits; ByteLevel only maps bytes to the byte alphabet.
    return ojson{{"type", "Sequence"}, {"pretokenizers", ojson::array({split, byte_level(false)})}};
}

ojson pre_tokenizer_json(const std::string& pre) {
    switch (pre_tokenizer_from_name(pre, std::string(kSource) + ": pre")) {
        case PreTokenizerKind::Gpt2:
            return byte_level(true);
        case PreTokenizerKind::SmolLM: {
            const ojson digits = {{"type", "Digits"}, {"individual_digits", true}};
            return ojson{{"type", "Sequence"}, {"pretokenizers", ojson::array({digits, byte_level(true)})}};
        }
        case PreTokenizerKind::Llama3:
            return split_then_byte_level(kLlama3Regex);
        case PreTokenizerKind::Qwen2:
            return split_then_byte_level(kQwen2Regex);
    }
    fail("{}: unknown pre-tokenizer kind", kSource);
}

// TemplateProcessing as transformers' update_post_processor builds it: [BOS] $A [EOS] for one
// sequence, the same again with type id 1 for the second of a pair. BOS goes into the template only
// when it is an added token: our reader takes the template's leading special token to be BOS and
// looks it up among the added tokens (a normal-token BOS still reaches transformers through
// add_bos_token in tokenizer_config.json).
ojson post_processor_json(const TokenizerVocab& v) {
    const bool bos = v.add_bos && is_added(v, size_t(v.bos_id));
    ojson special = ojson::object();
    auto sequence = [&](ojson& seq, const char* name, int type_id) {
        auto add_special = [&](int32_t id) {
            const std::string& text = v.tokens[size_t(id)];
            seq.push_back(ojson{{"SpecialToken", ojson{{"id", text}, {"type_id", type_id}}}});
            special[text] =
                ojson{{"id", text}, {"ids", ojson::array({id})}, {"tokens", ojson::array({text})}};
        };
        if (bos) add_special(v.bos_id);
        seq.push_back(ojson{{"Sequence", ojson{{"id", name}, {"type_id", type_id}}}});
        if (v.add_eos) add_special(v.eos_id);
    };
    ojson single = ojson::array(), pair = ojson::array();
    sequence(single, "A", 0);
    sequence(pair, "A", 0);
    sequence(pair, "B", 1);
    return ojson{
        {"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", special}};
}

// Content of token `id` for tokenizer_config.json, or null when there is no such token.
json token_or_null(const TokenizerVocab& v, int32_t id) {
    return id >= 0 ? json(v.tokens[size_t(id)]) : json(nullptr);
}

}  // namespace

std::string vocab_to_tokenizer_json(const TokenizerVocab& v) {
    check_writable(v);

    ojson added = ojson::array();
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        if (!is_added(v, i)) continue;
        // normalized = false: there is no normalizer, and the token must match its literal text.
        added.push_back(ojson{{"id", int32_t(i)},
                              {"content", v.tokens[i]},
                              {"single_word", false},
                              {"lstrip", false},
                              {"rstrip", false},
                              {"normalized", false},
                              {"special", type_of(v, i) == kTokenControl}});
    }

    // Every token, added ones too, goes into model.vocab at its own id: HF gives an added token the
    // id its spelling has in model.vocab, and numbers the ones missing from it after the end of the
    // vocabulary, which would move any that sit in the middle (SmolLM2's are ids 0..16).
    ojson vocab = ojson::object();
    auto& entries = vocab.get_ref<ojson::object_t&>();
    entries.reserve(v.tokens.size());
    // ordered_map's own emplace searches the whole map for the key first (quadratic over 150k
    // tokens); check_writable has already proven the spellings distinct, so append directly.
    for (size_t i = 0; i < v.tokens.size(); ++i) entries.Container::emplace_back(v.tokens[i], int32_t(i));

    ojson merges = ojson::array();
    merges.get_ref<ojson::array_t&>().reserve(v.merges.size());
    // [left, right] pairs (tokenizers >= 0.20) rather than "left right": exact for any spelling.
    for (const auto& [a, b] : v.merges) merges.push_back(ojson::array({a, b}));

    ojson model = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},  // bytes without a token are dropped, as our Tokenizer does
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   // Llama-3's own file says true, but our Tokenizer always applies merges; false keeps
                   // HF's ids equal to ours.
                   {"ignore_merges", false}};
    model["vocab"] = std::move(vocab);
    model["merges"] = std::move(merges);

    ojson root = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}};
    root["added_tokens"] = std::move(added);
    root["normalizer"] = nullptr;
    root["pre_tokenizer"] = pre_tokenizer_json(v.pre);
    root["post_processor"] = post_processor_json(v);
    root["decoder"] =
        ojson{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
    root["model"] = std::move(model);
    return root.dump(2) + "\n";
}

std::string vocab_to_tokenizer_config_json(const TokenizerVocab& v) {
    check_writable(v);
    // Sorted keys and 2-space indent, as transformers' save_pretrained writes this file.
    json cfg;
    json decoder = json::object();
    for (size_t i = 0; i < v.tokens.size(); ++i) {
        if (!is_added(v, i)) continue;
        decoder[std::to_string(i)] = json{
            {"content", v.tokens[i]}, {"lstrip", false},      {"normalized", false},
            {"rstrip", false},        {"single_word", false}, {"special", type_of(v, i) == kTokenControl}};
    }
    cfg["added_tokens_decoder"] = std::move(decoder);
    cfg["add_bos_token"] = v.add_bos;
    cfg["add_eos_token"] = v.add_eos;
    cfg["bos_token"] = token_or_null(v, v.bos_id);
    cfg["eos_token"] = token_or_null(v, v.eos_id);
    cfg["pad_token"] = token_or_null(v, v.pad_id);
    cfg["unk_token"] = token_or_null(v, v.unk_id);
    if (!v.chat_template.empty()) cfg["chat_template"] = v.chat_template;
    // transformers' default would re-space punctuation when decoding (" ." -> "."); byte-level BPE
    // decodes exactly.
    cfg["clean_up_tokenization_spaces"] = false;
    // The generic class takes tokenizer.json as written; model-specific ones may rebuild parts of it.
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
    return cfg.dump(2) + "\n";
}

}  // namespace hydra
