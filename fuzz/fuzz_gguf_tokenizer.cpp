// libFuzzer target for the GGUF tokenizer path: GgufFile::parse -> vocab_from_gguf -> Tokenizer ->
// encode/decode. Input layout: [GGUF image][text][n], where the last byte n (0..255) is the length
// of the text before it (clamped to what is there). The text need not be valid UTF-8: encode must
// then throw hydra::Error; for valid UTF-8 it must succeed with ids in range that decode.
// Build and run: tools/fuzz.sh fuzz_gguf_tokenizer 300   (seeds: fuzz/seeds/gguf_tokenizer)
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/vocab_from_gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const size_t text_len = std::min<size_t>(data[size - 1], size - 1);
    const size_t image_len = size - 1 - text_len;
    // Exact-size copy of the image so AddressSanitizer catches a read one byte past its end.
    const std::vector<uint8_t> image(data, data + image_len);
    const std::string text(reinterpret_cast<const char*>(data) + image_len, text_len);

    hydra::TokenizerVocab vocab;
    try {
        const hydra::GgufFile g = hydra::GgufFile::parse(image.data(), image.size(), "fuzz.gguf");
        vocab = hydra::vocab_from_gguf(g);
    } catch (const hydra::Error&) {
        return 0;
    }
    // vocab_from_gguf validated the vocabulary: the Tokenizer must accept it.
    const hydra::Tokenizer tok(std::move(vocab), "fuzz.gguf");
    for (bool special : {true, false}) {
        std::vector<int32_t> ids;
        if (hydra::is_valid_utf8(text)) {
            ids = tok.encode(text, special);
        } else {
            try {
                (void)tok.encode(text, special);
            } catch (const hydra::Error&) {
                continue;
            }
            __builtin_trap();  // invalid UTF-8 was accepted
        }
        for (int32_t id : ids)
            if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
        (void)tok.decode(ids, false);
        (void)tok.decode(ids, true);
        for (int32_t id : ids) (void)tok.token_bytes(id);
    }
    (void)tok.encode_with_bos("a");
    return 0;
}
