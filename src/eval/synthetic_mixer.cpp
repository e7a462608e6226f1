// Synthetic task rows for training (see synthetic_mixer.h).
#include "eval/synthetic_mixer.h"

#include "core/error.h"
#include "core/rng.h"
#include "eval/task_registry.h"
#include "eval/text_sources.h"
#include "train/byte_tokenizer.h"

namespace hydra {

TaskOptions training_task_options(const ModelText& text) {
    TaskOptions o;
    if (text.name() == "byte-v1") {
        o.style = PromptStyle::kCompact;
        o.format = PromptFormat::kRaw;
        o.number_digits = 5;
        o.passkey_digits = 5;
        o.mqar_value_digits = 2;
        o.mqar_queries = 2;
    }
    return o;
}

namespace {

// The `repeat` row: a passage of prose words with random numbers mixed in, a newline, and the same
// passage again, cut to the row. Every token of the second copy is predictable only by looking back
// at the first (an induction head's job), so a tiny teacher gets a dense copying signal: the task
// prompts alone supervise a handful of answer tokens per row.
bool repeat_row(const ModelText& text, Rng& rng, int64_t width, std::vector<int32_t>& row) {
    const std::vector<std::string>& words = prose_words();
    const int64_t half = (width - 1) / 2;
    std::string passage;
    size_t w = size_t(rng.next_u64() % words.size());
    std::vector<int32_t> ids;
    while (true) {
        if (rng.next_u64() % 5 == 0) {
            passage += std::to_string(10000 + rng.next_u64() % 90000);
        } else {
            passage += words[w];
            w = (w + 1) % words.size();
        }
        ids = text.encoder->encode(passage);
        if (int64_t(ids.size()) >= half) break;
        passage += ' ';
    }
    row.clear();
    if (text.bos_id >= 0) row.push_back(text.bos_id);
    row.insert(row.end(), ids.begin(), ids.end());
    const std::vector<int32_t> nl = text.encoder->encode("\n");
    row.insert(row.end(), nl.begin(), nl.end());
    row.insert(row.end(), ids.begin(), ids.end());
    row.resize(size_t(width), text.encoder->eos_id());
    return true;
}

}  // namespace

DataLoader::Generator synthetic_task_mixer(const ModelText& text, const TaskOptions& options,
                                           const std::vector<std::string>& tasks, int64_t seq_len) {
    HYDRA_CHECK(!tasks.empty(), "data.synthetic_tasks is empty");
    auto ctx = std::make_shared<TaskContext>();
    ctx->text = text;
    ctx->options = options;
    auto gens = std::make_shared<std::vector<std::shared_ptr<TaskGenerator>>>();
    for (const std::string& t : tasks) gens->push_back(t == "repeat" ? nullptr : make_task(t, ctx));
    const int32_t eos = text.encoder->eos_id();
    return [gens, ctx, seq_len, eos](Rng& rng, std::vector<int32_t>& row) {
        const TaskGenerator* pick = (*gens)[size_t(rng.next_u64() % gens->size())].get();
        const uint64_t seed = rng.next_u64();
        if (!pick) {  // "repeat": the copying curriculum (not an evaluation task)
            Rng r(seed);
            return repeat_row(ctx->text, r, seq_len + 1, row);
        }
        const TaskGenerator& g = *pick;
        // Leave room for the answer: a prompt a little shorter than the row, answer tokens after it.
        const int64_t width = seq_len + 1;
        const int64_t prompt_len = std::max<int64_t>(width * 3 / 4, width - 48);
        TaskSample s;
        try {
            s = g.sample(prompt_len, seed, 0);
        } catch (const Error&) {
            return false;  // too short for this task at this length: the row falls back to prose
        }
        std::string answer;
        for (size_t i = 0; i < s.answers.size(); ++i) answer += (i ? ", " : " ") + s.answers[i];
        row = s.prompt;
        const std::vector<int32_t> a = ctx->text.encoder->encode(answer);
        row.insert(row.end(), a.begin(), a.end());
        row.push_back(eos);
        if (int64_t(row.size()) > width) return false;
        row.resize(size_t(width), eos);
        return true;
    };
}

}  // namespace hydra
