// PCRE2-based pre-tokenizers for byte-level BPE (see pretokenizer.h).
#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace hydra {
namespace {

// Unicode White_Space (what Oniguruma's \s matches in HF tokenizers), as a class body.
constexpr const char* kWs =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// Patterns with @s (whitespace class body) to be substituted.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^@s\p{L}\p{N}]+|[@s]+(?![^@s])|[@s]+)";
// smollm in one pass: a digit is always its own piece; since the gpt2 regex then runs on the
// digit-free stretches only, a whitespace run followed by a digit ends there as if at the end of
// the text, hence the look-ahead also accepts a digit after the run.
constexpr const char* kSmolLM =
    R"(\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^@s\p{L}\p{N}]+|[@s]+(?![^@s\p{N}])|[@s]+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^@s\p{L}\p{N}]+[\r\n]*|[@s]*[\r\n]+|[@s]+(?![^@s])|[@s]+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^@s\p{L}\p{N}]+[\r\n]*|[@s]*[\r\n]+|[@s]+(?![^@s])|[@s]+)";

std::string expand(const char* pattern) {
    std::string out;
    for (const char* p = pattern; *p; ++p) {
        if (p[0] == '@' && p[1] == 's') {
            out += kWs;
            ++p;
        } else {
            out += *p;
        }
    }
    return out;
}

const char* pattern_of(PreTokenizerKind kind) {
    switch (kind) {
        case PreTokenizerKind::Gpt2:
            return kGpt2;
        case PreTokenizerKind::SmolLM:
            return kSmolLM;
        case PreTokenizerKind::Llama3:
            return kLlama3;
        case PreTokenizerKind::Qwen2:
            return kQwen2;
    }
    return kGpt2;
}

}  // namespace

PreTokenizerKind pre_tokenizer_from_name(std::string_view name, const std::string& source) {
    if (name == "gpt2" || name == "gpt-2") return PreTokenizerKind::Gpt2;
    if (name == "smollm") return PreTokenizerKind::SmolLM;
    if (name == "llama-bpe" || name == "llama3" || name == "llama-v3") return PreTokenizerKind::Llama3;
    if (name == "qwen2") return PreTokenizerKind::Qwen2;
    fail("{}: unsupported pre-tokenizer '{}' (supported: gpt2, smollm, llama-bpe, qwen2)", source, name);
}

const char* pre_tokenizer_name(PreTokenizerKind kind) {
    switch (kind) {
        case PreTokenizerKind::Gpt2:
            return "gpt2";
        case PreTokenizerKind::SmolLM:
            return "smollm";
        case PreTokenizerKind::Llama3:
            return "llama-bpe";
        case PreTokenizerKind::Qwen2:
            return "qwen2";
    }
    return "?";
}

struct PreTokenizer::Regex {
    pcre2_code* code = nullptr;
    ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(PreTokenizerKind kind) : kind_(kind), regex_(std::make_unique<Regex>()) {
    const std::string pattern = expand(pattern_of(kind));
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
    if (!regex_->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        HYDRA_ASSERT(false, "pre-tokenizer regex does not compile at {}: {}", err_offset,
                     reinterpret_cast<const char*>(msg));
    }
    // JIT is an optimisation only: without it pcre2_match interprets the same pattern.
    (void)pcre2_jit_compile(regex_->code, PCRE2_JIT_COMPLETE);
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
    if (text.empty()) return;
    // Match data per call keeps split() thread-safe; it holds only the ovector.
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(regex_->code, nullptr), &pcre2_match_data_free);
    HYDRA_ASSERT(md != nullptr, "out of memory creating PCRE2 match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
        // The caller validated the UTF-8 once, so skip PCRE2's per-call check (it would be O(n^2)).
        const int rc =
            pcre2_match(regex_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        HYDRA_ASSERT(rc > 0, "PCRE2 match failed with code {}", rc);
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t start = ov[0], end = ov[1];
        // HF's Split(behavior=isolated) keeps unmatched stretches as pieces too.
        if (start > pos) out.push_back(text.substr(pos, start - pos));
        if (end == start) {  // cannot happen with these patterns; never loop forever
            size_t next = start + 1;
            while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
            out.push_back(text.substr(start, next - start));
            pos = next;
            continue;
        }
        out.push_back(text.substr(start, end - start));
        pos = end;
    }
    if (pos < text.size()) out.push_back(text.substr(pos));
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
    std::vector<std::string_view> views;
    split(text, views);
    return {views.begin(), views.end()};
}

}  // namespace hydra
