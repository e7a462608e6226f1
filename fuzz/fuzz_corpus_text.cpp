// libFuzzer target for what `hydra corpus build` does to every file it takes from a Debian package (bytes
// from outside): markup stripping (the first input byte picks the format), normalisation, the garbage
// test, splitting, and the dedup keys and MinHash signatures. Each must finish (no crash, no sanitizer
// report, no exception), and the normalised text must keep its documented form: valid UTF-8, no control
// character but '\n' and '\t', no trailing spaces, at most one blank line in a row; split parts at most
// max_bytes + 1 (the text and its final newline), valid UTF-8 and not whitespace only.
// Build and run: tools/fuzz.sh fuzz_corpus_text 300   (seeds: fuzz/seeds/corpus_text)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "corpus/corpus_sources.h"
#include "corpus/dedup.h"
#include "corpus/markup.h"
#include "corpus/text_normalize.h"
#include "tokenizer/byte_unicode.h"

namespace {

void check_normalised(std::string_view t) {
    if (hydra::utf8_invalid_offset(t) != std::string_view::npos) __builtin_trap();
    for (size_t i = 0; i < t.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(t[i]);
        if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) __builtin_trap();
        if (c == '\n' && i > 0 && (t[i - 1] == ' ')) __builtin_trap();  // trailing space
        if (c == '\n' && i + 2 < t.size() && t[i + 1] == '\n' && t[i + 2] == '\n') __builtin_trap();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    constexpr hydra::TextFormat kFormats[] = {
        hydra::TextFormat::kPlain, hydra::TextFormat::kRst,     hydra::TextFormat::kPod,
        hydra::TextFormat::kHtml,  hydra::TextFormat::kRoff,    hydra::TextFormat::kInfo,
        hydra::TextFormat::kCode,  hydra::TextFormat::kFortune, hydra::TextFormat::kWordnet};
    const hydra::TextFormat format = kFormats[data[0] % (sizeof kFormats / sizeof kFormats[0])];
    const std::string_view raw(reinterpret_cast<const char*>(data) + 1, size - 1);
    const std::string stripped = hydra::strip_markup(raw, format);
    const std::string text = hydra::normalize_text(stripped, format == hydra::TextFormat::kCode);
    check_normalised(text);
    (void)hydra::looks_like_garbage(raw, text);
    constexpr size_t kMaxBytes = 256;
    for (const std::string& part : hydra::split_document(text, kMaxBytes)) {
        if (part.empty() || part.size() > kMaxBytes + 1 || part.back() != '\n') __builtin_trap();
        if (hydra::utf8_invalid_offset(part) != std::string_view::npos) __builtin_trap();
        if (part.find_first_not_of(" \t\n") == std::string::npos) __builtin_trap();
    }
    (void)hydra::dedup_key(text);
    (void)hydra::exact_text_hash(text);
    (void)hydra::minhash_signature(text);
    return 0;
}
