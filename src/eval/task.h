// Synthetic long-context tasks (RULER-style, research/ruler.md): the sample record every generator
// produces, the record of a clean/corrupted pair for head scoring, and the generator interface. A
// sample's prompt has exactly the requested length in the model's own tokens; its answers are scored
// as RULER scores them. Everything is deterministic given (task, length, seed, index).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hydra {

struct TextEncoder;  // train/byte_tokenizer.h: the model's tokenizer (BPE or bytes)

struct TaskSample {
    std::string task;                  // e.g. "niah_single_1", "vt", "cwe", "passkey", "mqar"
    int64_t target_length = 0;         // requested prompt length in tokens
    std::vector<int32_t> prompt;       // exactly target_length tokens (BOS included when the model uses one)
    std::vector<std::string> answers;  // reference outputs; RULER's metric decides how they count
    std::string metric = "all";        // "all": fraction of answers found in the output; "part": any
    int64_t max_new_tokens = 32;       // greedy decoding budget
    // Token spans [begin, end) of the needles / key facts inside the prompt (for the retrieval score
    // and for patching positions); one per inserted fact, in insertion order.
    std::vector<std::pair<int64_t, int64_t>> needle_spans;
    int64_t query_begin = 0;  // first token of the question at the end of the prompt
    // Added fields (source compatible): where the sample came from, and the text the prompt ends
    // with (the model continues it; only the continuation is scored).
    uint64_t seed = 0;
    int64_t index = 0;
    std::string answer_prefix;
};

// Scores one model output against a sample: RULER's string_match_all (fraction of answers that occur
// in the output, case-insensitive) or string_match_part (1 if any occurs). In [0, 1]. The output is
// stripped and control characters become '\n' first, as RULER does.
double score_output(const TaskSample& sample, const std::string& output);
// The same on bare fields (metric "all" | "part"; anything else throws hydra::Error).
double score_answers(const std::vector<std::string>& answers, const std::string& metric,
                     const std::string& output);

// A clean/corrupted prompt pair for head scoring (methods.md §5). Both prompts have the same
// length; at the answer position the clean prompt should produce `answer_token` and the corrupted
// one `distractor_token`; the metric is the logit difference LD = logit(answer) - logit(distractor).
// The two prompts differ only inside the needle span (value-swap, needle-removed) or the question
// (key-swap), so every other position lines up token for token.
struct PatchingPair {
    std::string task;
    std::string corruption;          // "value-swap" | "needle-removed" | "key-swap"
    std::vector<int32_t> clean;      // (T)
    std::vector<int32_t> corrupted;  // (T)
    int32_t answer_token = -1;       // first token of the clean answer
    int32_t distractor_token = -1;   // first token of the corrupted run's answer (or a competitor)
    std::vector<std::pair<int64_t, int64_t>> needle_spans;  // in the clean prompt
    // Added fields (source compatible): the answer texts the two tokens start, the query position.
    std::string clean_answer, corrupted_answer;
    int64_t query_begin = 0;
};

class TaskGenerator {
  public:
    virtual ~TaskGenerator() = default;
    virtual std::string name() const = 0;
    // Sample `index` of this task at `length` tokens for `seed`.
    virtual TaskSample sample(int64_t length, uint64_t seed, int64_t index) const = 0;
    // Whether pair() is supported, and the pair itself (same determinism). The default pair() throws
    // hydra::Error naming the task; corruptions() lists what pair() accepts (first = default).
    virtual bool has_pairs() const { return false; }
    virtual PatchingPair pair(int64_t length, uint64_t seed, int64_t index,
                              const std::string& corruption) const;
    virtual std::vector<std::string> corruptions() const { return {}; }
};

}  // namespace hydra
