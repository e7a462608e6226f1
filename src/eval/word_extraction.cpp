// CWE and FWE generators (see word_extraction.h). The haystack unit is the number of distinct words
// (CWE) or of coded-word tokens (FWE); the remainder is padded with dots after the list, which changes
// no count.
#include "eval/word_extraction.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include "core/error.h"

namespace hydra {

namespace {

TaskSample make_sample(const std::string& task, int64_t length, uint64_t seed, int64_t index,
                       const FitResult& fit, const TaskContext& ctx, std::vector<std::string> answers,
                       int64_t max_new) {
    TaskSample s;
    s.task = task;
    s.target_length = length;
    s.prompt = fit.tokens;
    s.answers = std::move(answers);
    s.metric = "all";
    s.max_new_tokens = max_new;
    s.needle_spans = needle_token_spans(ctx, fit.text, &s.query_begin);
    s.seed = seed;
    s.index = index;
    s.answer_prefix = fit.text.answer_prefix;
    return s;
}

// WordNet nouns + adjectives + verbs, deduplicated (RULER uses wonderwords' three lists).
const std::vector<std::string>& cwe_vocab(const TaskOptions& o) {
    static std::mutex m;
    static std::map<std::string, std::vector<std::string>> cache;
    std::lock_guard<std::mutex> lock(m);
    if (auto it = cache.find(o.wordnet_dir); it != cache.end()) return it->second;
    std::set<std::string> seen;
    std::vector<std::string> out;
    for (WordClass c : {WordClass::kNoun, WordClass::kAdjective, WordClass::kVerb})
        for (const std::string& w : wordnet_words(c, o.wordnet_dir))
            if (seen.insert(w).second) out.push_back(w);
    return cache.emplace(o.wordnet_dir, std::move(out)).first->second;
}

class CweTask final : public TaskGenerator {
  public:
    explicit CweTask(std::shared_ptr<const TaskContext> ctx) : ctx_(std::move(ctx)) {}
    std::string name() const override { return "cwe"; }
    TaskSample sample(int64_t length, uint64_t seed, int64_t index) const override {
        Rng rng = task_rng("cwe", length, seed, index);
        const bool compact = ctx_->options.style == PromptStyle::kCompact;
        const int num_cw = compact ? 3 : 10;
        const int freq_cw = compact ? 3 : (length < 4096 ? 6 : 30),
                  freq_ucw = compact ? 1 : (length < 4096 ? 1 : 3);
        const auto& vocab = cwe_vocab(ctx_->options);
        // Distinct words for this sample (at most one per token of the prompt is ever needed).
        const int64_t want = std::min<int64_t>(int64_t(vocab.size()), length + 64);
        std::vector<size_t> idx(vocab.size());
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
        for (int64_t i = 0; i < want; ++i)
            std::swap(idx[size_t(i)], idx[size_t(uniform_int(rng, i, int64_t(idx.size()) - 1))]);
        std::vector<std::string> words;
        for (int64_t i = 0; i < want; ++i) words.push_back(vocab[idx[size_t(i)]]);
        const uint64_t list_seed = rng.next_u64();
        std::string shot;
        if (!compact && length >= 2048) {
            // One-shot example (from 2K tokens on; below, it would not leave room for the task): a small list
            // of words not used by the task, then its answer.
            std::vector<std::string> ex(words.end() - 20, words.end());
            words.resize(words.size() - 20);
            PromptText e = render(ex, 10 < int(ex.size()) ? 5 : 3, 3, 1, "", "", list_seed ^ 1);
            std::string ans;
            for (int i = 0; i < 5; ++i) ans += " " + std::to_string(i + 1) + ". " + ex[size_t(i)];
            shot = e.user + e.answer_prefix + ans + "\n\n";
        }
        const FitResult fit = fit_prompt(
            *ctx_, "cwe", length, num_cw + 1,
            [&](int64_t n, const std::string& pad) {
                HYDRA_CHECK(n <= int64_t(words.size()), "cwe: needs {} distinct words, the vocabulary has {}",
                            n, words.size());
                std::vector<std::string> w(words.begin(), words.begin() + n);
                return render(w, num_cw, freq_cw, freq_ucw, pad, shot, list_seed);
            },
            dot_pad_atoms());
        return make_sample("cwe", length, seed, index, fit, *ctx_,
                           std::vector<std::string>(words.begin(), words.begin() + num_cw), 120);
    }

  private:
    PromptText render(const std::vector<std::string>& w, int num_cw, int freq_cw, int freq_ucw,
                      const std::string& pad, const std::string& shot, uint64_t list_seed) const {
        std::vector<const std::string*> list;
        for (size_t i = 0; i < w.size(); ++i)
            for (int r = 0; r < (int(i) < num_cw ? freq_cw : freq_ucw); ++r) list.push_back(&w[i]);
        Rng rng(list_seed);
        shuffle(list, rng);
        PromptText p;
        const bool compact = ctx_->options.style == PromptStyle::kCompact;
        p.user = shot + (compact ? "Words:"
                                 : "Below is a numbered list of words. Some of them appear more often than "
                                   "others. Memorize the ones that appear most often.\n");
        for (size_t i = 0; i < list.size(); ++i)
            p.user += (i || compact ? " " : "") + std::to_string(i + 1) + ". " + *list[i];
        p.user += pad;
        p.query_char = p.user.size();
        const std::string k = std::to_string(num_cw);
        p.user += compact ? "\nThe " + k + " most common words?"
                          : "\nQuestion: What are the " + k + " most common words in the list above?";
        p.answer_prefix =
            compact ? " Answer:" : " Answer: The top " + k + " words that appear most often in the list are:";
        return p;
    }
    std::shared_ptr<const TaskContext> ctx_;
};

class FweTask final : public TaskGenerator {
  public:
    explicit FweTask(std::shared_ptr<const TaskContext> ctx) : ctx_(std::move(ctx)) {}
    std::string name() const override { return "fwe"; }
    TaskSample sample(int64_t length, uint64_t seed, int64_t index) const override {
        Rng rng = task_rng("fwe", length, seed, index);
        const bool compact = ctx_->options.style == PromptStyle::kCompact;
        const int64_t vocab_size = std::max<int64_t>(8, (length - 50) / 50);
        std::vector<std::string> vocab;
        while (int64_t(vocab.size()) < vocab_size) {
            std::string w = random_letters(rng, compact ? 4 : 6, false);
            if (std::find(vocab.begin(), vocab.end(), w) == vocab.end()) vocab.push_back(w);
        }
        vocab[0] = "...";  // rank 1 is noise the prompt says to ignore
        const uint64_t list_seed = rng.next_u64();
        const FitResult fit = fit_prompt(
            *ctx_, "fwe", length, 30,
            [&](int64_t n, const std::string& pad) { return render(vocab, n, pad, list_seed); },
            dot_pad_atoms());
        return make_sample("fwe", length, seed, index, fit, *ctx_, {vocab[1], vocab[2], vocab[3]}, 50);
    }

  private:
    PromptText render(const std::vector<std::string>& vocab, int64_t n, const std::string& pad,
                      uint64_t list_seed) const {
        // Zipf counts, alpha = 2: floor(n k^-2 / zeta(2)) for rank k.
        const double zeta2 = M_PI * M_PI / 6.0;
        std::vector<const std::string*> list;
        for (size_t k = 0; k < vocab.size(); ++k) {
            const int64_t c = int64_t(std::floor(double(n) / double((k + 1) * (k + 1)) / zeta2));
            for (int64_t r = 0; r < c; ++r) list.push_back(&vocab[k]);
        }
        Rng rng(list_seed);
        shuffle(list, rng);
        PromptText p;
        const bool compact = ctx_->options.style == PromptStyle::kCompact;
        p.user = compact ? "Coded text:"
                         : "Read the coded text below and track how often each coded word appears. Find the "
                           "three most "
                           "frequent coded words.";
        for (const std::string* w : list) p.user += " " + *w;
        p.user += pad;
        p.query_char = p.user.size();
        p.user +=
            compact
                ? "\nThe three most frequent words, ignoring the dots?"
                : "\nQuestion: Do not give any explanation, and ignore the dots '....'. What are the three "
                  "most frequently appearing words in the coded text above?";
        p.answer_prefix = compact ? " Answer:"
                                  : " Answer: According to the coded text above, the three most frequently "
                                    "appearing words are:";
        return p;
    }
    std::shared_ptr<const TaskContext> ctx_;
};

}  // namespace

std::unique_ptr<TaskGenerator> make_cwe_task(std::shared_ptr<const TaskContext> ctx) {
    return std::make_unique<CweTask>(std::move(ctx));
}
std::unique_ptr<TaskGenerator> make_fwe_task(std::shared_ptr<const TaskContext> ctx) {
    return std::make_unique<FweTask>(std::move(ctx));
}

}  // namespace hydra
