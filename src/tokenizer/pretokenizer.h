// Pre-tokenisation for byte-level BPE: splits text into pieces that BPE then encodes one by one.
// Supported (names as in GGUF `tokenizer.ggml.pre`):
//   gpt2       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   smollm     every \p{N} char on its own first, then the gpt2 regex on the rest (HF:
//              Sequence[Digits(individual_digits=true), ByteLevel(use_regex=true)])
//   llama-bpe  the Llama-3 regex (\p{N}{1,3}, case-insensitive contractions, newline runs)
//   qwen2      the Llama-3 regex with single digits
// Implemented with PCRE2 (UTF + UCP, JIT when available). `\s` is spelled out as the Unicode
// White_Space set, because PCRE2's \s also matches U+180E (Mongolian vowel separator, \h in PCRE2)
// while HF's (Oniguruma) \s does not (tested: "\u180e!" is one piece in HF).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hydra {

enum class PreTokenizerKind { Gpt2, SmolLM, Llama3, Qwen2 };

// Maps a GGUF pre-tokenizer name ("gpt2", "gpt-2", "smollm", "llama-bpe", "llama3", "qwen2") to a kind;
// nullopt-like failure is reported by throwing hydra::Error that names `source` and lists the choices.
PreTokenizerKind pre_tokenizer_from_name(std::string_view name, const std::string& source);
// Canonical name of a kind ("gpt2", "smollm", "llama-bpe", "qwen2").
const char* pre_tokenizer_name(PreTokenizerKind kind);

class PreTokenizer {
  public:
    explicit PreTokenizer(PreTokenizerKind kind);
    ~PreTokenizer();
    PreTokenizer(PreTokenizer&&) noexcept;
    PreTokenizer& operator=(PreTokenizer&&) noexcept;

    PreTokenizerKind kind() const { return kind_; }
    // Appends the pieces of `text` (views into it, in order, covering it exactly) to `out`.
    // `text` must be valid UTF-8 (the caller validates). Thread-safe.
    void split(std::string_view text, std::vector<std::string_view>& out) const;
    std::vector<std::string> split(std::string_view text) const;

  private:
    struct Regex;
    PreTokenizerKind kind_;
    std::unique_ptr<Regex> regex_;
};

}  // namespace hydra
