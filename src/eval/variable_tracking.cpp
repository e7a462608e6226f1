// Variable tracking generator (see variable_tracking.h). One chain, 4 hops (5 names), values of 5
// digits; chain statements keep their order at sorted random line positions of the noise haystack.
#include "eval/variable_tracking.h"

#include <algorithm>

namespace hydra {

namespace {

class VtTask final : public TaskGenerator {
  public:
    explicit VtTask(std::shared_ptr<const TaskContext> ctx) : ctx_(std::move(ctx)) {}
    std::string name() const override { return "vt"; }

    TaskSample sample(int64_t length, uint64_t seed, int64_t index) const override {
        Rng rng = task_rng("vt", length, seed, index);
        const Chain chain = draw_chain(rng, 5, 5);
        const Chain example = draw_chain(rng, 3, 5);
        std::vector<double> depths;
        for (size_t i = 0; i < chain.names.size(); ++i) depths.push_back(rng.uniform());
        std::sort(depths.begin(), depths.end());
        const bool compact = ctx_->options.style == PromptStyle::kCompact;
        std::string shot;
        if (!compact) {
            // The worked example: the same task on a short noise haystack, with its answer.
            const PromptText ex = render(example, {0.1, 0.3, 0.5, 0.7, 0.9}, 3 * 15, "", "");
            shot = ex.user + ex.answer_prefix + " " + join_and(example.names) + ".\n\n";
        }
        const FitResult fit = fit_prompt(
            *ctx_, "vt", length, 0,
            [&](int64_t n, const std::string& pad) { return render(chain, depths, n, pad, shot); },
            noise_pad_atoms());
        TaskSample s;
        s.task = "vt";
        s.target_length = length;
        s.prompt = fit.tokens;
        s.answers = chain.names;
        s.metric = "all";
        s.max_new_tokens = 30;
        s.needle_spans = needle_token_spans(*ctx_, fit.text, &s.query_begin);
        s.seed = seed;
        s.index = index;
        s.answer_prefix = fit.text.answer_prefix;
        return s;
    }

  private:
    struct Chain {
        std::vector<std::string> names;
        std::string value;
    };
    static Chain draw_chain(Rng& rng, int name_len, int count) {
        Chain c;
        while (int(c.names.size()) < count) {
            std::string n = random_letters(rng, name_len, true);
            if (std::find(c.names.begin(), c.names.end(), n) == c.names.end()) c.names.push_back(n);
        }
        c.value = random_number(rng, 5);
        return c;
    }
    PromptText render(const Chain& c, const std::vector<double>& depths, int64_t n, const std::string& pad,
                      const std::string& shot) const {
        const bool compact = ctx_->options.style == PromptStyle::kCompact;
        PromptText p;
        p.user =
            shot + (compact
                        ? "Track the variables.\n"
                        : "Memorize and track the chain of variable assignments hidden in the text below.\n");
        std::vector<std::pair<int64_t, std::string>> inserts;
        const WordFiller f = noise_filler();
        for (size_t i = 0; i < c.names.size(); ++i)
            inserts.emplace_back(f.boundary(n, depths[i]),
                                 "VAR " + c.names[i] + " = " + (i == 0 ? c.value : "VAR " + c.names[i - 1]));
        std::stable_sort(inserts.begin(), inserts.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        p.user += render_filler(f, n, inserts, pad, p.user.size(), &p.needle_chars);
        p.query_char = p.user.size();
        if (compact) {
            p.user += "\nWhich variables equal " + c.value + "?";
            p.answer_prefix = " Answer:";
        } else {
            p.user += "\nQuestion: Find all variables that are assigned the value " + c.value +
                      " in the text above.";
            p.answer_prefix = " Answer: According to the chain of variable assignments in the text above, " +
                              std::to_string(c.names.size()) + " variables are assigned the value " +
                              c.value + ", they are:";
        }
        return p;
    }
    std::shared_ptr<const TaskContext> ctx_;
};

}  // namespace

std::unique_ptr<TaskGenerator> make_vt_task(std::shared_ptr<const TaskContext> ctx) {
    return std::make_unique<VtTask>(std::move(ctx));
}

}  // namespace hydra
