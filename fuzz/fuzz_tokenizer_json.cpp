// libFuzzer target for the tokenizer.json import (vocab_from_tokenizer_json_text). The input is the
// text of a tokenizer.json, optionally followed by kConfigSeparator and the text of a
// tokenizer_config.json. A vocabulary that loads must build a Tokenizer, and encoding a few fixed
// strings (and every added token's text) must give ids in range that decode without error. Only
// hydra::Error may escape the loader; anything else is a bug.
// Build and run: tools/fuzz.sh fuzz_tokenizer_json 300   (seeds: fuzz/seeds/tokenizer_json)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/vocab_from_tokenizer_json.h"

namespace {

constexpr std::string_view kConfigSeparator = "\n--tokenizer_config.json--\n";

void check_ids(const hydra::Tokenizer& tok, const std::vector<int32_t>& ids) {
    for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const size_t sep = input.find(kConfigSeparator);
    const std::string json_text(input.substr(0, sep));
    std::string config_text;
    if (sep != std::string_view::npos) config_text = std::string(input.substr(sep + kConfigSeparator.size()));
    hydra::TokenizerVocab vocab;
    try {
        vocab = hydra::vocab_from_tokenizer_json_text(json_text, "fuzz/tokenizer.json",
                                                      sep == std::string_view::npos ? nullptr : &config_text);
    } catch (const hydra::Error&) {
        return 0;
    }
    // The loader validated the vocabulary, so the Tokenizer must accept it and encoding valid UTF-8
    // must not fail.
    const hydra::Tokenizer tok(std::move(vocab), "fuzz/tokenizer.json");
    static const char* const kTexts[] = {
        "Hello world",      "abc ab<s>",
        "  12345 x\n\n\ty", "caf\xC3\xA9 \xF0\x9F\x98\x80!",
        "'s 're I'll",      "<|im_start|>user\nhi<|im_end|>",
    };
    for (const char* text : kTexts) {
        for (bool special : {true, false}) {
            const std::vector<int32_t> ids = tok.encode(text, special);
            check_ids(tok, ids);
            (void)tok.decode(ids, false);
            (void)tok.decode(ids, true);
        }
    }
    // Every added token's own text (bounded, a vocabulary may be large).
    const auto& v = tok.vocab();
    for (size_t i = 0, n = 0; i < v.tokens.size() && n < 64; ++i) {
        if (v.token_types.empty() || v.token_types[i] == hydra::kTokenNormal) continue;
        ++n;
        const std::vector<int32_t> ids = tok.encode(v.tokens[i], true);
        check_ids(tok, ids);
        (void)tok.decode(ids);
    }
    (void)tok.encode_with_bos("x");
    return 0;
}
