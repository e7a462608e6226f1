// Eval loop (see eval_runner.h).
#include "eval/eval_runner.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "core/error.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "serve/sampler.h"

namespace hydra {

int64_t parse_length(const std::string& text) {
    std::string t = text;
    int64_t mult = 1;
    if (!t.empty() && (t.back() == 'k' || t.back() == 'K')) {
        mult = 1024;
        t.pop_back();
    }
    HYDRA_CHECK(!t.empty() && t.size() <= 9 &&
                    std::all_of(t.begin(), t.end(),
                                [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }),
                "bad length '{}' (expected a token count like 4096 or 4k, k = 1024)", text);
    const int64_t v = std::stoll(t) * mult;
    HYDRA_CHECK(v >= 1, "bad length '{}': must be at least 1 token", text);
    return v;
}

std::vector<int64_t> parse_lengths(const std::string& list) {
    std::vector<int64_t> out;
    size_t b = 0;
    while (b <= list.size()) {
        size_t e = list.find(',', b);
        if (e == std::string::npos) e = list.size();
        const int64_t v = parse_length(list.substr(b, e - b));
        if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
        b = e + 1;
    }
    std::sort(out.begin(), out.end());
    return out;
}

int64_t greedy_capacity(const ModelConfig& cfg, int64_t prompt_tokens, int64_t max_new, int64_t context_limit) {
    const int64_t limit = context_limit > 0
                              ? context_limit
                              : (cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 8192);
    HYDRA_CHECK(prompt_tokens < limit, "the prompt has {} tokens but the model's context holds {}", prompt_tokens,
                limit);
    return std::min<int64_t>(limit, prompt_tokens + max_new);
}

GreedyResult greedy_decode(const ModelText& text, const std::vector<int32_t>& prompt, int64_t max_new,
                           int64_t capacity, const NextTokenFn& next_token,
                           const std::function<bool(const std::string&)>& done) {
    using clock = std::chrono::steady_clock;
    GreedyResult r;
    const auto t0 = clock::now();
    int32_t next = next_token(prompt);
    int64_t pos = int64_t(prompt.size());  // positions the engine's cache holds
    const auto t1 = clock::now();
    r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    for (int64_t i = 0; i < max_new; ++i) {
        if (std::find(text.stop_ids.begin(), text.stop_ids.end(), next) != text.stop_ids.end()) break;
        r.tokens.push_back(next);
        r.text = text.encoder->decode(r.tokens);
        if (done && done(r.text)) break;
        if (i + 1 == max_new || pos >= capacity) break;
        const int32_t one[1] = {next};
        next = next_token(one);
        ++pos;
    }
    r.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    return r;
}

GreedyResult greedy_generate(const LlamaModel& model, const ModelText& text,
                             const std::vector<int32_t>& prompt, int64_t max_new, int64_t context_limit,
                             const std::function<bool(const std::string&)>& done) {
    const int64_t capacity = greedy_capacity(model.config(), int64_t(prompt.size()), max_new, context_limit);
    KVCache cache(model, capacity);  // hybrid layout: FA KV rows + GDN state
    const int64_t V = model.config().vocab_size;
    return greedy_decode(
        text, prompt, max_new, capacity,
        [&](std::span<const int32_t> tokens) {
            const Tensor logits = forward_last_logits(model, tokens, cache);
            return argmax({logits.f32(), size_t(V)});
        },
        done);
}

namespace {

// Scores x 100 of every task x length cell, in (task, length) order.
std::map<std::string, std::map<int64_t, std::vector<double>>> cells(const ModelEvalResult& r) {
    std::map<std::string, std::map<int64_t, std::vector<double>>> out;
    for (const SampleOutcome& s : r.samples) out[s.task][s.length].push_back(100.0 * s.score);
    return out;
}

// Groups (cells' scores) and weights of a mean over lengths of means over tasks (bootstrap_weighted_means).
struct Design {
    std::vector<std::vector<double>> groups;
    std::vector<double> weights;
};

}  // namespace

void aggregate(ModelEvalResult& r, const BootstrapOptions& boot) {
    const auto c = cells(r);
    r.task_scores.clear();
    r.task_ci.clear();
    std::vector<std::string> tasks;
    for (const auto& [task, m] : c) {
        tasks.push_back(task);
        for (const auto& [len, v] : m) {
            double sum = 0;
            for (double x : v) sum += x;
            r.task_scores[task][len] = sum / double(v.size());
            r.task_ci[task][len] = bootstrap_mean(v, boot);
        }
    }
    const GroupScore all = group_score(r, tasks, boot);
    r.length_scores = all.length_scores;
    r.length_ci = all.length_ci;
    r.overall = all.length_scores.empty() ? 0.0 : all.overall;
    r.overall_ci = all.overall_ci;
}

GroupScore group_score(const ModelEvalResult& r, const std::vector<std::string>& tasks,
                       const BootstrapOptions& boot) {
    GroupScore g;
    g.tasks = tasks;
    const auto c = cells(r);
    std::map<int64_t, std::vector<const std::vector<double>*>> per_len;
    for (const std::string& t : tasks)
        if (auto it = c.find(t); it != c.end())
            for (const auto& [len, v] : it->second) per_len[len].push_back(&v);
    Design all;
    double total = 0;
    for (const auto& [len, vs] : per_len) {
        Design d;
        double mean = 0;
        for (const auto* v : vs) {
            double sum = 0;
            for (double x : *v) sum += x;
            mean += sum / double(v->size()) / double(vs.size());
            d.groups.push_back(*v);
            d.weights.push_back(1.0 / double(vs.size()));
            all.groups.push_back(*v);
            all.weights.push_back(1.0 / double(vs.size() * per_len.size()));
        }
        g.length_scores[len] = mean;
        g.length_ci[len] = bootstrap_weighted_means(d.groups, d.weights, boot);
        total += mean;
    }
    if (!per_len.empty()) {
        g.overall = total / double(per_len.size());
        g.overall_ci = bootstrap_weighted_means(all.groups, all.weights, boot);
    }
    return g;
}

ModelEvalResult run_eval(const std::string& model_name, const LlamaModel& model,
                         const std::vector<const TaskGenerator*>& tasks, const ModelText& text,
                         const EvalSettings& settings,
                         const std::function<void(int64_t, int64_t, const std::string&)>& progress,
                         const GenerateFn& generate) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    ModelEvalResult r;
    r.model = model_name;
    const int64_t total = int64_t(settings.lengths.size() * tasks.size()) * settings.samples;
    int64_t done = 0;
    double score_sum = 0;
    const ModelConfig& cfg = model.config();
    const int64_t context = settings.context_limit > 0
                                ? settings.context_limit
                                : (cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 8192);
    for (int64_t len : settings.lengths)
        for (const TaskGenerator* task : tasks)
            for (int64_t i = 0; i < settings.samples; ++i) {
                const auto g0 = clock::now();
                const auto build = [&] {
                    TaskSample b = task->sample(len, settings.seed, i);
                    // RULER sizes inputs so that input + the decoding budget fits the context: a length at
                    // (or near) the context gets a shorter prompt instead of a cut-off answer.
                    if (len + b.max_new_tokens > context) {
                        const int64_t fit = context - b.max_new_tokens;
                        HYDRA_CHECK(fit >= 1, "task {}: the context of {} positions leaves no room for a prompt and "
                                    "{} new tokens", b.task, context, b.max_new_tokens);
                        b = task->sample(fit, settings.seed, i);
                    }
                    return b;
                };
                const TaskSample* cached = nullptr;
                TaskSample local;
                if (settings.sample_cache) {
                    const auto key = std::make_tuple(task->name(), len, context, settings.seed, i);
                    auto it = settings.sample_cache->find(key);
                    if (it == settings.sample_cache->end()) it = settings.sample_cache->emplace(key, build()).first;
                    cached = &it->second;
                } else {
                    local = build();
                }
                const TaskSample& s = cached ? *cached : local;
                SampleOutcome o;
                o.generate_seconds = std::chrono::duration<double>(clock::now() - g0).count();
                o.task = s.task;
                o.length = len;
                o.index = i;
                o.answers = s.answers;
                std::function<bool(const std::string&)> full;
                if (settings.stop_at_full_score)
                    full = [&s](const std::string& out) { return score_output(s, out) >= 1.0; };
                o.prompt_tokens = int64_t(s.prompt.size());
                const GreedyResult g =
                    generate ? generate(s.prompt, s.max_new_tokens, full)
                             : greedy_generate(model, text, s.prompt, s.max_new_tokens, settings.context_limit, full);
                o.output = g.text;
                o.generated = int64_t(g.tokens.size());
                o.prefill_seconds = g.prefill_seconds;
                o.decode_seconds = g.decode_seconds;
                o.score = score_output(s, g.text);
                score_sum += o.score;
                r.samples.push_back(std::move(o));
                ++done;
                if (progress)
                    progress(
                        done, total,
                        fmt::format("{} {} | mean {:.1f}", s.task, len, 100.0 * score_sum / double(done)));
            }
    aggregate(r);
    r.seconds = std::chrono::duration<double>(clock::now() - start).count();
    return r;
}

}  // namespace hydra
