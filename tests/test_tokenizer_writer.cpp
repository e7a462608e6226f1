// Tests for the tokenizer.json / tokenizer_config.json writer (src/tokenizer/vocab_to_tokenizer_json.*):
// every vocabulary written and read back with vocab_from_tokenizer_json must be field-for-field equal
// and must encode the fixture strings (tests/data/tokenizer_fixtures.json) to the same ids, for the
// default model's GGUF vocabulary, the committed HF-written SmolLM2 tokenizer, and small hand-built
// vocabularies with each pre-tokenizer. The pieces that HF reads but our reader does not check
// (pre_tokenizer, decoder, post_processor, added_tokens) are compared with what HF itself writes.
//
// With HYDRA_TOKENIZER_WRITER_OUT=DIR the written tokenizers are kept under DIR/<name>/ together
// with hydra_ids.json (our ids for every string) for tools/check_tokenizer_writer.py, which checks
// them with HF tokenizers/transformers. CI does not need Python for these tests.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "model_paths.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/tokenizer_vocab.h"
#include "tokenizer/vocab_from_gguf.h"
#include "tokenizer/vocab_from_tokenizer_json.h"
#include "tokenizer/vocab_to_tokenizer_json.h"

using namespace hydra;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kCommittedDir = test::test_data("smollm2_tokenizer");

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << path;
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    ASSERT_TRUE(out.good()) << path;
}

const json& fixtures() {
    static const json j = json::parse(read_text(test::test_data("tokenizer_fixtures.json")));
    return j;
}

std::vector<std::string> fixture_texts() {
    std::vector<std::string> out;
    for (const auto& e : fixtures()["strings"]) out.push_back(e["text"].get<std::string>());
    return out;
}

// Where a test writes its tokenizer: a scratch directory removed afterwards, or, when
// HYDRA_TOKENIZER_WRITER_OUT is set, DIR/<name>, kept for the Python check.
class OutDir {
  public:
    explicit OutDir(const std::string& name) {
        if (const char* env = std::getenv("HYDRA_TOKENIZER_WRITER_OUT"); env && *env) {
            path_ = fs::path(env) / name;
            keep_ = true;
        } else {
            static int counter = 0;
            path_ = fs::temp_directory_path() / fmt::format("hydra_tokw_{}_{}_{}", getpid(), counter++, name);
        }
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~OutDir() {
        if (!keep_) fs::remove_all(path_);
    }
    OutDir(const OutDir&) = delete;
    OutDir& operator=(const OutDir&) = delete;
    const fs::path& path() const { return path_; }
    bool keep() const { return keep_; }

  private:
    fs::path path_;
    bool keep_ = false;
};

// Writes both files of `v` into `dir` and reads them back with our loader.
TokenizerVocab write_and_read(const TokenizerVocab& v, const fs::path& dir) {
    write_text(dir / "tokenizer.json", vocab_to_tokenizer_json(v));
    write_text(dir / "tokenizer_config.json", vocab_to_tokenizer_config_json(v));
    return vocab_from_tokenizer_json((dir / "tokenizer.json").string());
}

// Every field of TokenizerVocab, one expectation each, so a failure names the field.
void expect_same_vocab(const TokenizerVocab& want, const TokenizerVocab& got) {
    EXPECT_EQ(got.model, want.model);
    EXPECT_EQ(got.pre, want.pre);
    EXPECT_EQ(got.tokens.size(), want.tokens.size());
    EXPECT_TRUE(got.tokens == want.tokens) << "tokens differ";
    EXPECT_TRUE(got.token_types == want.token_types) << "token_types differ";
    EXPECT_EQ(got.merges.size(), want.merges.size());
    EXPECT_TRUE(got.merges == want.merges) << "merges differ";
    EXPECT_EQ(got.bos_id, want.bos_id);
    EXPECT_EQ(got.eos_id, want.eos_id);
    EXPECT_EQ(got.unk_id, want.unk_id);
    EXPECT_EQ(got.pad_id, want.pad_id);
    EXPECT_EQ(got.eot_id, want.eot_id);
    EXPECT_EQ(got.add_bos, want.add_bos);
    EXPECT_EQ(got.add_eos, want.add_eos);
    EXPECT_EQ(got.chat_template, want.chat_template);
}

// Same ids from both tokenizers for every text, with and without BOS/EOS; reports the first few
// differing texts by index.
void expect_same_encodings(const Tokenizer& want, const Tokenizer& got,
                           const std::vector<std::string>& texts) {
    int mismatches = 0;
    for (size_t i = 0; i < texts.size() && mismatches < 5; ++i) {
        if (got.encode(texts[i]) != want.encode(texts[i])) {
            ADD_FAILURE() << "text #" << i << " encodes differently after the round trip";
            ++mismatches;
        }
        if (got.encode_with_bos(texts[i]) != want.encode_with_bos(texts[i])) {
            ADD_FAILURE() << "text #" << i << " encodes differently with BOS/EOS after the round trip";
            ++mismatches;
        }
    }
}

// Ids of every fixture string against one column of the HF-made fixtures.
void expect_fixture_column(const Tokenizer& tok, const char* column) {
    const json& strings = fixtures()["strings"];
    int mismatches = 0;
    for (size_t i = 0; i < strings.size() && mismatches < 5; ++i) {
        if (tok.encode(strings[i]["text"].get<std::string>()) !=
            strings[i][column].get<std::vector<int32_t>>()) {
            ADD_FAILURE() << column << ": fixture string #" << i << " differs from HF";
            ++mismatches;
        }
    }
}

// For the Python check: our ids for each text (plain and with BOS/EOS), and the fixture column the
// HF ids must equal (null when the vocabulary is not the fixtures').
void dump_hydra_ids(const OutDir& dir, const Tokenizer& tok, const std::vector<std::string>& texts,
                    const char* fixture_column) {
    if (!dir.keep()) return;
    json cases = json::array();
    for (const std::string& t : texts)
        cases.push_back(
            json{{"text", t}, {"ids", tok.encode(t)}, {"ids_with_special", tok.encode_with_bos(t)}});
    const json out = {{"fixture_column", fixture_column ? json(fixture_column) : json(nullptr)},
                      {"cases", cases}};
    write_text(dir.path() / "hydra_ids.json", out.dump(1) + "\n");
}

// The whole check for one vocabulary: round trip, equal fields, equal ids, and a second write that
// is byte-identical to the first (the writer is a fixed point of write -> read).
TokenizerVocab check_round_trip(const TokenizerVocab& v, const std::string& name,
                                const std::vector<std::string>& texts, const char* fixture_column) {
    OutDir dir(name);
    const TokenizerVocab back = write_and_read(v, dir.path());
    expect_same_vocab(v, back);
    EXPECT_EQ(vocab_to_tokenizer_json(back), read_text(dir.path() / "tokenizer.json"));
    EXPECT_EQ(vocab_to_tokenizer_config_json(back), read_text(dir.path() / "tokenizer_config.json"));
    const Tokenizer original(v, name);
    const Tokenizer reread(back, name + " (written)");
    expect_same_encodings(original, reread, texts);
    if (fixture_column) expect_fixture_column(reread, fixture_column);
    dump_hydra_ids(dir, reread, texts, fixture_column);
    return back;
}

// The default model's GGUF vocabulary, or null when the model file is absent.
const TokenizerVocab* gguf_vocab() {
    static const std::unique_ptr<TokenizerVocab> v = []() -> std::unique_ptr<TokenizerVocab> {
        if (!test::default_model_present()) return nullptr;
        return std::make_unique<TokenizerVocab>(vocab_from_gguf(GgufFile::open(test::default_model_path())));
    }();
    return v.get();
}

#define REQUIRE_GGUF()                                                                          \
    if (!gguf_vocab())                                                                          \
    GTEST_SKIP() << "model " << test::default_model_path() << " not found: run tools/setup.sh " \
                 << "or set HYDRA_MODEL"

// A small vocabulary with every kind of token: all 256 byte tokens, merges for a few words, digit
// runs and whitespace runs, control BOS/EOS/pad tokens, an unknown-token stand-in, a user-defined
// token, and a chat template.
TokenizerVocab hand_built_vocab(const std::string& pre) {
    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = pre;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_to_token_string(uint8_t(b)));
    v.token_types.assign(v.tokens.size(), kTokenNormal);
    auto token = [&](const std::string& text, int32_t type) {
        v.tokens.push_back(text);
        v.token_types.push_back(type);
        return int32_t(v.tokens.size() - 1);
    };
    auto merge = [&](const std::string& a, const std::string& b) {
        token(a + b, kTokenNormal);
        v.merges.emplace_back(a, b);
    };
    const std::string sp = byte_to_token_string(' '), nl = byte_to_token_string('\n');
    merge(sp, "t");
    merge("h", "e");
    merge(sp + "t", "he");
    merge("i", "n");
    merge("in", "g");
    merge("a", "n");
    merge("an", "d");
    merge("e", "r");
    merge(sp, "and");
    merge("1", "2");
    merge("12", "3");
    merge(sp, sp);
    merge(sp + sp, sp + sp);
    merge(nl, nl);
    merge("'", "s");
    v.bos_id = token("<|bos|>", kTokenControl);
    v.eos_id = token("<|eos|>", kTokenControl);
    v.pad_id = token("<|pad|>", kTokenControl);
    v.unk_id = token("<|unk|>", kTokenControl);
    token("<tool>", kTokenUserDefined);
    merge("Ġthe", "ing");  // a normal token after the added ones
    v.chat_template = "{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>{% endfor %}";
    return v;
}

std::vector<std::string> hand_built_texts() {
    std::vector<std::string> texts = fixture_texts();
    for (const char* t :
         {"the thing and 123 1234567 it's", "<|bos|>the<tool>and<|eos|>", "<|bos|><|bos|>  \n\n x",
          "<tool>12<|pad|><|unk|>", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC 42"})
        texts.push_back(t);
    return texts;
}

// The pre_tokenizer JSON that HF `tokenizers` 0.23 writes for each kind (ByteLevel with
// add_prefix_space=false; Split with the Llama-3 / Qwen2 regex, Isolated; Digits(individual_digits)).
json hf_pre_tokenizer(const std::string& pre) {
    const json byte_level_regex =
        json::parse(R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})");
    const json byte_level_plain =
        json::parse(R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false})");
    const std::string llama3 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    const std::string qwen2 =
        R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
    auto split = [&](const std::string& regex) {
        return json{{"type", "Sequence"},
                    {"pretokenizers", json::array({json{{"type", "Split"},
                                                        {"pattern", json{{"Regex", regex}}},
                                                        {"behavior", "Isolated"},
                                                        {"invert", false}},
                                                   byte_level_plain})}};
    };
    if (pre == "gpt2") return byte_level_regex;
    if (pre == "smollm")
        return json{{"type", "Sequence"},
                    {"pretokenizers",
                     json::array({json{{"type", "Digits"}, {"individual_digits", true}}, byte_level_regex})}};
    if (pre == "llama-bpe") return split(llama3);
    return split(qwen2);
}

// Asserts that `f` throws hydra::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F&& f, std::initializer_list<std::string> parts) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning '" << *parts.begin() << "'";
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const auto& p : parts)
            EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
    }
}

}  // namespace

TEST(TokenizerWriter, GgufVocabularyRoundTrips) {
    REQUIRE_GGUF();
    const TokenizerVocab& v = *gguf_vocab();
    ASSERT_EQ(v.pre, "smollm");
    ASSERT_EQ(v.tokens.size(), 49152u);
    check_round_trip(v, "smollm", fixture_texts(), "ids");

    // What HF reads beyond our fields is what HF itself wrote for this tokenizer.
    const json written = json::parse(vocab_to_tokenizer_json(v));
    const json committed = json::parse(read_text(fs::path(kCommittedDir) / "tokenizer.json"));
    for (const char* key : {"added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder"})
        EXPECT_EQ(written[key], committed[key]) << key;
    EXPECT_EQ(written["model"]["vocab"], committed["model"]["vocab"]);
    EXPECT_EQ(written["model"]["merges"], committed["model"]["merges"]);
    const json cfg = json::parse(vocab_to_tokenizer_config_json(v));
    EXPECT_EQ(cfg["bos_token"], "<|im_start|>");
    EXPECT_EQ(cfg["eos_token"], "<|im_end|>");
    EXPECT_EQ(cfg["pad_token"], "<|im_end|>");
    EXPECT_EQ(cfg["unk_token"], "<|endoftext|>");
    EXPECT_EQ(cfg["add_bos_token"], false);
    EXPECT_EQ(cfg["chat_template"], fixtures()["chat_template"]);
}

TEST(TokenizerWriter, GgufVocabularyWithEachPreTokenizer) {
    // The real vocabulary under the other three pre-tokenizers: the Split regexes must come back as
    // the same kind, and gpt2 must still give HF's ids (the fixtures' ids_gpt2 column).
    REQUIRE_GGUF();
    for (const char* pre : {"gpt2", "llama-bpe", "qwen2"}) {
        SCOPED_TRACE(pre);
        TokenizerVocab v = *gguf_vocab();
        v.pre = pre;
        check_round_trip(v, pre, fixture_texts(), std::string(pre) == "gpt2" ? "ids_gpt2" : nullptr);
        EXPECT_EQ(json::parse(vocab_to_tokenizer_json(v))["pre_tokenizer"], hf_pre_tokenizer(pre));
    }
}

TEST(TokenizerWriter, CommittedSmolLM2TokenizerRoundTrips) {
    const std::string path = (fs::path(kCommittedDir) / "tokenizer.json").string();
    const TokenizerVocab v = vocab_from_tokenizer_json(path);
    const TokenizerVocab back = check_round_trip(v, "smollm2_committed", fixture_texts(), "ids");
    EXPECT_EQ(back.unk_id, 0);
    EXPECT_EQ(back.pad_id, 2);
    if (const TokenizerVocab* g = gguf_vocab()) {
        // The GGUF and the HF file describe one tokenizer, so they write one tokenizer.json.
        EXPECT_EQ(vocab_to_tokenizer_json(v), vocab_to_tokenizer_json(*g));
        EXPECT_EQ(vocab_to_tokenizer_config_json(v), vocab_to_tokenizer_config_json(*g));
    }
}

TEST(TokenizerWriter, HandBuiltVocabularyPerPreTokenizer) {
    const std::vector<std::string> texts = hand_built_texts();
    for (const char* pre : {"gpt2", "smollm", "llama-bpe", "qwen2"}) {
        SCOPED_TRACE(pre);
        TokenizerVocab v = hand_built_vocab(pre);
        // Vary the BOS/EOS handling across kinds: Llama-3 style BOS, Qwen2 style nothing, both, EOS only.
        const std::string p = pre;
        v.add_bos = p == "llama-bpe" || p == "smollm";
        v.add_eos = p == "smollm" || p == "gpt2";
        check_round_trip(v, std::string("hand_built_") + pre, texts, nullptr);

        const json j = json::parse(vocab_to_tokenizer_json(v));
        EXPECT_EQ(j["pre_tokenizer"], hf_pre_tokenizer(pre));
        EXPECT_EQ(j["decoder"], json::parse(R"({"type":"ByteLevel","add_prefix_space":true,)"
                                            R"("trim_offsets":true,"use_regex":true})"));
        // The template transformers' update_post_processor would build for these settings.
        std::string single = v.add_bos ? "<|bos|>:0 $A:0" : "$A:0";
        if (v.add_eos) single += " <|eos|>:0";
        std::string joined;
        for (const auto& e : j["post_processor"]["single"]) {
            const bool sp = e.contains("SpecialToken");
            const json& x = sp ? e["SpecialToken"] : e["Sequence"];
            joined += fmt::format("{}{}{}:{}", joined.empty() ? "" : " ", sp ? "" : "$",
                                  x["id"].get<std::string>(), x["type_id"].get<int>());
        }
        EXPECT_EQ(joined, single);
        EXPECT_EQ(j["post_processor"]["pair"].size(), 2 * j["post_processor"]["single"].size());
        // Added tokens: four control tokens and the user-defined one, in id order.
        ASSERT_EQ(j["added_tokens"].size(), 5u);
        EXPECT_EQ(j["added_tokens"][0]["content"], "<|bos|>");
        EXPECT_EQ(j["added_tokens"][0]["special"], true);
        EXPECT_EQ(j["added_tokens"][4]["content"], "<tool>");
        EXPECT_EQ(j["added_tokens"][4]["special"], false);
        EXPECT_EQ(j["added_tokens"][4]["id"], v.tokens.size() - 2);
    }
}

TEST(TokenizerWriter, FieldsTheFormatCannotHoldComeBackNormalised) {
    TokenizerVocab v = hand_built_vocab("gpt-2");  // an alias of gpt2
    // Types the Tokenizer treats as normal come back as normal; an eot id is not written.
    v.token_types[256] = kTokenUnused;
    v.token_types[257] = kTokenByte;
    v.token_types[258] = kTokenUnknown;
    v.token_types[259] = kTokenUndefined;
    v.eot_id = v.eos_id;
    OutDir dir("normalised");
    const TokenizerVocab back = write_and_read(v, dir.path());
    TokenizerVocab want = v;
    want.pre = "gpt2";
    for (int i = 256; i <= 259; ++i) want.token_types[size_t(i)] = kTokenNormal;
    want.eot_id = -1;
    expect_same_vocab(want, back);
    expect_same_encodings(Tokenizer(v), Tokenizer(back), hand_built_texts());

    // An empty token_types list means all normal; "llama3" is the canonical "llama-bpe".
    TokenizerVocab plain = hand_built_vocab("llama3");
    plain.token_types.clear();
    plain.bos_id = plain.eos_id = plain.pad_id = plain.unk_id = -1;
    const TokenizerVocab plain_back = write_and_read(plain, dir.path());
    EXPECT_EQ(plain_back.pre, "llama-bpe");
    EXPECT_EQ(plain_back.token_types, std::vector<int32_t>(plain.tokens.size(), kTokenNormal));
    EXPECT_EQ(json::parse(vocab_to_tokenizer_json(plain))["added_tokens"], json::array());
    const json cfg = json::parse(vocab_to_tokenizer_config_json(plain));
    EXPECT_TRUE(cfg["bos_token"].is_null());
    EXPECT_FALSE(cfg.contains("eot_token"));
}

TEST(TokenizerWriter, NormalTokenBosStaysOutOfTheTemplate) {
    // Our reader takes the template's leading special token as BOS and requires it to be an added
    // token; a normal-token BOS travels through tokenizer_config.json's add_bos_token instead.
    TokenizerVocab v = hand_built_vocab("qwen2");
    v.bos_id = int32_t(v.tokens.size() - 1);  // "Ġtheing", a normal token
    v.add_bos = true;
    OutDir dir("normal_bos");
    const TokenizerVocab back = write_and_read(v, dir.path());
    expect_same_vocab(v, back);
    EXPECT_EQ(Tokenizer(back).encode_with_bos("x").front(), v.bos_id);
    const json j = json::parse(vocab_to_tokenizer_json(v));
    EXPECT_EQ(j["post_processor"]["single"].size(), 1u);
}

TEST(TokenizerWriter, RejectsWhatTheFormatCannotHold) {
    TokenizerVocab dup = hand_built_vocab("gpt2");
    dup.tokens.push_back("<tool>");
    dup.token_types.push_back(kTokenNormal);
    expect_error([&] { vocab_to_tokenizer_json(dup); }, {"tokens 275 and 277", "'<tool>'", "one id"});
    expect_error([&] { vocab_to_tokenizer_config_json(dup); }, {"tokens 275 and 277"});

    TokenizerVocab bad_template = hand_built_vocab("gpt2");
    bad_template.chat_template = "ok\xC3";
    expect_error([&] { vocab_to_tokenizer_config_json(bad_template); }, {"chat_template", "UTF-8"});

    TokenizerVocab bad_merge = hand_built_vocab("gpt2");
    bad_merge.merges.emplace_back("zz", "q");
    expect_error([&] { vocab_to_tokenizer_json(bad_merge); }, {"merges[", "'zz'"});

    TokenizerVocab bad_pre = hand_built_vocab("gpt2");
    bad_pre.pre = "falcon";
    expect_error([&] { vocab_to_tokenizer_json(bad_pre); }, {"falcon"});
}
