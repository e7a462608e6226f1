// Synthetic task rows for training (see synthetic_mixer.h).
#include "eval/synthetic_mixer.h"

#include "core/error.h"
#include "core/rng.h"
#include "eval/task_registry.h"
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

DataLoader::Generator synthetic_task_mixer(const ModelText& text, const TaskOptions& options,
                                           const std::vector<std::string>& tasks, int64_t seq_len) {
    HYDRA_CHECK(!tasks.empty(), "data.synthetic_tasks is empty");
    auto ctx = std::make_shared<TaskContext>();
    ctx->text = text;
    ctx->options = options;
    auto gens = std::make_shared<std::vector<std::shared_ptr<TaskGenerator>>>();
    for (const std::string& t : tasks) gens->push_back(make_task(t, ctx));
    const int32_t eos = text.encoder->eos_id();
    return [gens, ctx, seq_len, eos](Rng& rng, std::vector<int32_t>& row) {
        const TaskGenerator& g = *(*gens)[size_t(rng.next_u64() % gens->size())];
        const uint64_t seed = rng.next_u64();
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
