// What every task generator shares: the options (prompt format and style, value sizes), the context
// (model tokenizer + options), prompt assembly (BOS, ChatML wrapper, answer prefix), the exact-length
// search over the haystack size, seeded randomness, and the word-stream haystack with needles placed
// between sentences.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "eval/model_text_encoder.h"
#include "eval/text_sources.h"

namespace hydra {

enum class PromptFormat { kAuto, kRaw, kChatML };  // auto: ChatML iff the model has a ChatML template
enum class PromptStyle { kRuler, kCompact };       // compact: short instructions, no one-shot example

struct TaskOptions {
    PromptFormat format = PromptFormat::kAuto;
    PromptStyle style = PromptStyle::kRuler;
    int number_digits = 7;      // NIAH "numbers" values (RULER: 7)
    int passkey_digits = 5;     // passkey (Mohtashami & Jaggi: up to 50000)
    int mqar_value_digits = 3;  // MQAR values
    int mqar_queries = 4;       // MQAR keys asked per sample
    std::string prose_dir = default_prose_dir();
    std::string wordnet_dir = default_wordnet_dir();
};

PromptFormat parse_prompt_format(const std::string& s);  // "auto" | "raw" | "chatml"
PromptStyle parse_prompt_style(const std::string& s);    // "ruler" | "compact"

struct TaskContext {
    ModelText text;
    TaskOptions options;
    bool chat() const;  // the resolved format
};

// A prompt as text: the task text (the user turn under ChatML) and the answer prefix the model
// continues, plus byte ranges of the needles and the question inside `user`. Ranges start at the
// separator in front of a needle, so they cut the text at pre-token boundaries.
struct PromptText {
    std::string user;
    std::string answer_prefix;
    std::vector<std::pair<size_t, size_t>> needle_chars;
    size_t query_char = 0;
};

// Token ids: [BOS] + (ChatML: system turn + "<|im_start|>user\n") + user + (ChatML: "<|im_end|>\n
// <|im_start|>assistant\n") + answer prefix. Each piece is encoded on its own, at boundaries where the
// byte-level pre-tokenizer splits anyway.
std::vector<int32_t> encode_prompt(const TaskContext& ctx, const PromptText& p);
// Token positions of p.needle_chars and p.query_char (one extra encode per range end).
std::vector<std::pair<int64_t, int64_t>> needle_token_spans(const TaskContext& ctx, const PromptText& p,
                                                            int64_t* query_begin);

// Exact-length search. build(n, pad) renders the prompt with haystack size n (units: words, lines,
// pairs) and `pad` (a string of pad atoms) at the end of the haystack. Finds the largest n with
// length <= target by bracketing + binary search on the real encoding, then fills the remaining r
// tokens with the fewest pad atoms whose measured token counts sum to r, and verifies. Throws
// hydra::Error naming the task when even n_min does not fit or no exact fill is found.
struct FitResult {
    int64_t n = 0;
    std::string pad;
    PromptText text;
    std::vector<int32_t> tokens;
};
using BuildFn = std::function<PromptText(int64_t n, const std::string& pad)>;
FitResult fit_prompt(const TaskContext& ctx, const std::string& task, int64_t target, int64_t n_min,
                     const BuildFn& build, const std::vector<std::string>& pad_atoms);

// Pad atoms: prose words, noise words, dots (for lists where words would change the answer).
std::vector<std::string> prose_pad_atoms();
std::vector<std::string> noise_pad_atoms();
std::vector<std::string> dot_pad_atoms();

// Seeded randomness: an Rng per (task, length, seed, index, stream), independent of everything else.
Rng task_rng(const std::string& task, int64_t length, uint64_t seed, int64_t index, uint64_t stream = 0);
int64_t uniform_int(Rng& rng, int64_t lo, int64_t hi);  // [lo, hi]
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(uniform_int(rng, 0, int64_t(i) - 1))]);
}
std::string random_number(Rng& rng, int digits);  // `digits` digits, no leading zero
std::string random_uuid(Rng& rng);                // UUID4 text, 36 chars
std::string random_letters(Rng& rng, int n, bool upper);
std::string random_word_key(Rng& rng, const TaskOptions& o);  // "adjective-noun" from WordNet

// Filler words with the separator before each: RULER's noise paragraph repeated (a '\n' between
// paragraphs) or the prose corpus from a word offset.
struct WordFiller {
    bool noise = true;
    const std::vector<std::string>* prose = nullptr;
    int64_t offset = 0;
    const std::string& word(int64_t i) const;
    const char* sep(int64_t i) const;    // separator in front of word i (i > 0)
    bool sentence_end(int64_t i) const;  // word i ends a sentence
    // The boundary (index of the word a needle goes in front of, 0..n) nearest to depth * n that
    // follows a sentence end.
    int64_t boundary(int64_t n, double depth) const;
};
WordFiller noise_filler();
WordFiller prose_filler(const TaskOptions& o, Rng& rng);  // random start at a sentence beginning

// Renders n filler words with `inserts` (boundary, text) placed in front of the given words (in
// order), then `pad`. Inserted texts get a separator in front ('\n' for noise, ' ' for prose); their
// [separator, end) byte ranges (offset by `base`) are appended to `ranges` in insertion order.
std::string render_filler(const WordFiller& f, int64_t n,
                          const std::vector<std::pair<int64_t, std::string>>& inserts, const std::string& pad,
                          size_t base, std::vector<std::pair<size_t, size_t>>* ranges);

// Joins items as "a, b, and c" (RULER's query list); "a" and "a and b" for one or two.
std::string join_and(const std::vector<std::string>& items);

// Tokens the model produces for `answer` right after the prompt ending in `answer_prefix`: the tail of
// encode(prefix_segment + " " + answer) after encode(prefix_segment). `with_space`: the prompt itself
// ends with the space (see needs_trailing_space).
std::vector<int32_t> continuation_tokens(const TaskContext& ctx, const std::string& answer_prefix,
                                         const std::string& answer, bool prompt_ends_with_space);
// True when the tokenizer spells " <answer>" as a lone space token followed by the answer (smollm
// digits, bytes): then pair prompts end with the space so the next token is the answer's own.
bool needs_trailing_space(const TaskContext& ctx, const std::string& answer);

}  // namespace hydra
