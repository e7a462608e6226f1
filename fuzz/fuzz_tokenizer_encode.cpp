// libFuzzer target for Tokenizer::encode/decode with the real SmolLM2 vocabulary
// (tests/data/smollm2_tokenizer/tokenizer.json, loaded once). The input is text:
// - invalid UTF-8 must throw hydra::Error (and nothing else);
// - valid UTF-8 must encode without any error, with every id in range, and decode(encode(s)) must give
//   s back exactly, except for the bytes that have no single-byte token in this vocabulary (SmolLM2
//   lacks 21: a few control bytes, 0xC0/0xC1, 0xF1/0xF2, 0xF5-0xFF), which are dropped as HF does.
//   This holds with and without parse_special; without it no control token may come out.
// Build and run: tools/fuzz.sh fuzz_tokenizer_encode 300   (seeds: fuzz/seeds/tokenizer_encode)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/vocab_from_tokenizer_json.h"

namespace {

std::unique_ptr<hydra::Tokenizer> g_tok;
bool g_missing[256] = {};  // bytes without a single-byte token: encode drops them

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* path = HYDRA_SOURCE_DIR "/tests/data/smollm2_tokenizer/tokenizer.json";
    try {
        g_tok = std::make_unique<hydra::Tokenizer>(hydra::vocab_from_tokenizer_json(path), path);
    } catch (const hydra::Error& e) {
        std::fprintf(stderr, "fuzz_tokenizer_encode: cannot load %s: %s\n", path, e.what());
        std::abort();
    }
    int missing = 0;
    for (int b = 0; b < 256; ++b) {
        g_missing[b] = !g_tok->find_token(hydra::byte_to_token_string(uint8_t(b)));
        missing += g_missing[b];
    }
    std::fprintf(stderr, "fuzz_tokenizer_encode: %d tokens, %d bytes without a token\n", g_tok->vocab_size(),
                 missing);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const hydra::Tokenizer& tok = *g_tok;
    if (!hydra::is_valid_utf8(text)) {
        for (bool special : {true, false}) {
            try {
                (void)tok.encode(text, special);
            } catch (const hydra::Error&) {
                continue;
            }
            __builtin_trap();  // invalid UTF-8 was accepted
        }
        return 0;
    }
    std::string kept;  // what decoding must give back
    kept.reserve(text.size());
    for (char c : text)
        if (!g_missing[static_cast<unsigned char>(c)]) kept += c;
    for (bool special : {true, false}) {
        const std::vector<int32_t> ids = tok.encode(text, special);  // must not throw
        for (int32_t id : ids)
            if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
        if (tok.decode(ids) != kept) __builtin_trap();
        if (!special)  // no control token can come out of plain-text encoding
            for (int32_t id : ids)
                if (tok.is_special(id)) __builtin_trap();
    }
    return 0;
}
