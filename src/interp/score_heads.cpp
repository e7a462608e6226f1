// The head-scoring driver (see score_heads.h).
#include "interp/score_heads.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <ctime>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "interp/activation_patching.h"
#include "interp/fa_forward.h"
#include "interp/parallel_jobs.h"
#include "interp/path_patching.h"
#include "interp/retrieval_score.h"

namespace hydra {

namespace {

const std::vector<std::string> kMethods = {"activation", "attribution", "path", "retrieval"};

// Wall time and process CPU time of a stage: on a machine shared with other work the wall time
// overstates the cost, the CPU time (all threads) does not.
struct Stopwatch {
    std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
    std::clock_t cpu = std::clock();
    double seconds() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
    }
    double cpu_seconds() const { return double(std::clock() - cpu) / CLOCKS_PER_SEC; }
};

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        const size_t end = std::min(s.find(sep, start), s.size());
        out.push_back(s.substr(start, end - start));
        start = end + 1;
    }
    return out;
}

std::string lower(std::string s) {
    for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}

// Everything one pair keeps until its task's path patching.
struct KeptPair {
    FaRun<float> clean, corrupted;
    std::unique_ptr<LogitDiff<float>> ld;
};

}  // namespace

std::vector<std::string> parse_methods(const std::string& text) {
    std::vector<std::string> asked;
    for (const std::string& m : split(text, ',')) {
        if (m == "all") {
            asked.insert(asked.end(), kMethods.begin(), kMethods.end());
            continue;
        }
        HYDRA_CHECK(std::find(kMethods.begin(), kMethods.end(), m) != kMethods.end(),
                    "--method: unknown method '{}' (known: activation, attribution, path, retrieval, all)",
                    m);
        asked.push_back(m);
    }
    std::vector<std::string> out;
    for (const std::string& m : kMethods)
        if (std::find(asked.begin(), asked.end(), m) != asked.end()) out.push_back(m);
    return out;
}

std::vector<TaskSpec> parse_task_specs(const std::string& list) {
    std::vector<TaskSpec> out;
    for (const std::string& item : split(list, ',')) {
        HYDRA_CHECK(!item.empty(), "--tasks: empty entry in '{}'", list);
        const size_t colon = item.find(':');
        TaskSpec t{item.substr(0, colon), colon == std::string::npos ? "" : item.substr(colon + 1)};
        HYDRA_CHECK(!t.task.empty() && (colon == std::string::npos || !t.corruption.empty()),
                    "--tasks: '{}' is not TASK or TASK:CORRUPTION", item);
        out.push_back(t);
    }
    return out;
}

void check_score_options(const ModelConfig& config, const ScoreHeadsOptions& o) {
    HYDRA_CHECK(!o.methods.empty(), "--method: no method given");
    for (const std::string& m : o.methods)
        HYDRA_CHECK(std::find(kMethods.begin(), kMethods.end(), m) != kMethods.end(),
                    "--method: unknown method '{}' (known: activation, attribution, path, retrieval, all)",
                    m);
    HYDRA_CHECK(!o.lengths.empty(), "--lengths: no length given");
    // Patching reads the answer position only (a prompt may fill the context); retrieval also decodes.
    const int64_t ctx = config.max_position_embeddings;
    const bool decodes = std::find(o.methods.begin(), o.methods.end(), "retrieval") != o.methods.end();
    for (int64_t len : o.lengths) {
        HYDRA_CHECK(len >= 16, "--lengths: {} tokens is too short for a task prompt (at least 16)", len);
        HYDRA_CHECK(ctx <= 0 || len <= ctx, "--lengths: {} tokens is beyond the model's context of {}", len,
                    ctx);
        HYDRA_CHECK(ctx <= 0 || !decodes || len < ctx,
                    "--lengths: a {}-token prompt fills the model's context of {}, leaving no position for "
                    "the answer "
                    "that --method retrieval decodes",
                    len, ctx);
    }
    HYDRA_CHECK(o.retrieval_max_new_tokens >= 1, "retrieval: max new tokens must be at least 1 (got {})",
                o.retrieval_max_new_tokens);
    HYDRA_CHECK(o.samples >= 1, "--samples must be at least 1 (got {})", o.samples);
    HYDRA_CHECK(o.receivers >= 1, "--receivers must be at least 1 (got {})", o.receivers);
    HYDRA_CHECK(o.max_batch >= 1, "--batch must be at least 1 (got {})", o.max_batch);
    HYDRA_CHECK(o.config.lambda >= 0 && o.config.lambda <= 1, "--lambda must be in [0, 1] (got {})",
                o.config.lambda);
    HYDRA_CHECK(o.config.clip_lo < o.config.clip_hi, "clip range [{}, {}] is empty", o.config.clip_lo,
                o.config.clip_hi);
}

std::string ScoreTask::key() const {
    const std::vector<std::string> c = generator->corruptions();
    if (corruption.empty() || (!c.empty() && c[0] == corruption)) return generator->name();
    return generator->name() + ":" + corruption;
}

ScoreReport score_heads(const LlamaModel& model, const ModelText& text, const std::vector<ScoreTask>& tasks,
                        const ScoreHeadsOptions& o, const ScoreProgress& progress) {
    check_score_options(model.config(), o);
    HYDRA_CHECK(!tasks.empty(), "--tasks: no task given");
    CpuScoringBackend backend(model);
    return score_heads(backend, text, tasks, o, progress);
}

ScoreReport score_heads(ScoringBackend& backend, const ModelText& text, const std::vector<ScoreTask>& tasks,
                        const ScoreHeadsOptions& o, const ScoreProgress& progress) {
    const LlamaModel& model = backend.model();
    const ModelConfig& cfg = model.config();
    check_score_options(cfg, o);
    HYDRA_CHECK(!tasks.empty(), "--tasks: no task given");
    const int64_t L = cfg.num_layers, H = cfg.num_heads, C = cfg.hidden_size;
    auto wants = [&](const char* m) {
        return std::find(o.methods.begin(), o.methods.end(), m) != o.methods.end();
    };
    const bool act = wants("activation"), atp = wants("attribution"), path = wants("path"),
               ret = wants("retrieval");
    const bool pairs_needed = act || atp || path;
    for (const ScoreTask& t : tasks) {
        HYDRA_CHECK(t.generator != nullptr, "score_heads: null task generator");
        if (pairs_needed)
            HYDRA_CHECK(
                t.generator->has_pairs() && !t.corruption.empty(),
                "task '{}' has no clean/corrupted pairs, so it cannot be scored by patching (use --method "
                "retrieval, or a niah_single_*, niah_multikey_*, passkey or mqar task)",
                t.generator->name());
    }

    const FaWeights<float>& w = backend.weights();
    ScoreReport report;
    ScoreSet& set = report.scores;
    set.layers = L, set.heads = H, set.kv_heads = cfg.num_kv_heads, set.config = o.config;
    const int64_t per_task = int64_t(o.lengths.size()) * o.samples;
    const int64_t total = int64_t(tasks.size()) * per_task * ((pairs_needed ? 1 : 0) + (ret ? 1 : 0));
    int64_t done = 0;
    auto tick = [&](const std::string& status) {
        ++done;
        if (progress) progress(done, total, status);
    };
    auto add_time = [&](const std::string& stage, const Stopwatch& sw) {
        const double s = sw.seconds();
        report.seconds[stage] += s;
        report.cpu_seconds[stage] += sw.cpu_seconds();
        return s;
    };

    for (const ScoreTask& task : tasks) {
        const std::string key = task.key();
        TaskScoreAccumulator acc_act(L * H), acc_atp(L * H), acc_path(L * H), acc_direct(L * H),
            acc_ret(L * H);
        std::vector<KeptPair> kept;
        std::vector<size_t> kept_record;  // index into report.pairs of each kept pair
        if (pairs_needed) {
            for (int64_t length : o.lengths)
                for (int64_t i = 0; i < o.samples; ++i) {
                    Stopwatch sw;
                    const PatchingPair pp = task.generator->pair(length, o.seed, i, task.corruption);
                    HYDRA_CHECK(pp.clean.size() == pp.corrupted.size() && !pp.clean.empty(),
                                "task '{}': pair {} at length {} has prompts of {} and {} tokens", key, i,
                                length, pp.clean.size(), pp.corrupted.size());
                    PairRecord rec;
                    rec.task = key, rec.corruption = task.corruption, rec.length = length, rec.index = i;
                    rec.answer_token = pp.answer_token, rec.distractor_token = pp.distractor_token;
                    rec.seconds["generate"] = add_time("generate", sw);
                    sw = Stopwatch();
                    const bool all_pos = atp && o.attribution_positions == AttributionPositions::All;
                    KeptPair k;
                    k.ld = std::make_unique<LogitDiff<float>>(w, pp.answer_token, pp.distractor_token);
                    // The corrupted prompt shares the clean one's prefix up to the first changed token
                    // (the needle for value swaps, the question for key swaps): only the rest is run.
                    k.clean = backend.forward(pp.clean, all_pos);
                    k.corrupted = backend.forward(pp.corrupted, all_pos, &k.clean, pp.clean);
                    rec.shared_prefix = k.corrupted.shared_prefix;
                    rec.seconds["forward"] = add_time("forward", sw);
                    rec.ld_clean = (*k.ld)(k.clean.x_final_last(C));
                    rec.ld_corrupted = (*k.ld)(k.corrupted.x_final_last(C));
                    rec.used = rec.ld_clean - rec.ld_corrupted >= o.config.min_gap;
                    if (!rec.used) {
                        for (TaskScoreAccumulator* a : {&acc_act, &acc_atp, &acc_path, &acc_direct}) {
                            HeadPatchResult flat;
                            flat.ld_clean = rec.ld_clean, flat.ld_corrupted = rec.ld_corrupted;
                            a->add_pair(flat, o.config);  // counted as skipped
                        }
                    } else {
                        if (act || path) {
                            sw = Stopwatch();
                            acc_act.add_pair(
                                activation_patching(backend, k.clean, k.corrupted, *k.ld, o.max_batch),
                                o.config);
                            rec.seconds["activation"] = add_time("activation", sw);
                        }
                        if (atp) {
                            sw = Stopwatch();
                            acc_atp.add_pair(attribution_patching(backend, k.clean, k.corrupted, *k.ld,
                                                                  o.attribution_positions),
                                             o.config);
                            rec.seconds["attribution"] = add_time("attribution", sw);
                        }
                    }
                    if (path && rec.used) {
                        kept.push_back(std::move(k));
                        kept_record.push_back(report.pairs.size());
                    }
                    tick(fmt::format("{} len {} #{}: LD clean {:.2f} corrupted {:.2f}{}", key, length, i,
                                     rec.ld_clean, rec.ld_corrupted,
                                     rec.used ? "" : " (skipped: gap below min_gap)"));
                    report.pairs.push_back(std::move(rec));
                }
            if (act) set.methods["activation"].tasks[key] = acc_act.mean();
            if (atp) set.methods["attribution"].tasks[key] = acc_atp.mean();
        }
        if (path) {
            const TaskHeadScores a = acc_act.mean();
            const auto receivers = top_heads(a.score, H, o.receivers);
            report.receivers[key] = receivers;
            for (size_t p = 0; p < kept.size(); ++p) {
                const Stopwatch sw;
                const PathPatchResult r = path_patching(backend, kept[p].clean, kept[p].corrupted,
                                                        *kept[p].ld, receivers, o.max_batch);
                acc_path.add_pair(r.via_receivers, o.config);
                acc_direct.add_pair(r.direct, o.config);
                report.pairs[kept_record[p]].seconds["path"] = add_time("path", sw);
            }
            kept.clear();
            set.methods["path"].tasks[key] = acc_path.mean();
            set.methods["path_direct"].tasks[key] = acc_direct.mean();
        }
        if (ret) {
            const std::unique_ptr<RetrievalDecoder> decoder = backend.decoder();
            for (int64_t length : o.lengths)
                for (int64_t i = 0; i < o.samples; ++i) {
                    const Stopwatch sw;
                    const TaskSample s = task.generator->sample(length, o.seed, i);
                    // The needles that hold an answer are the ones a correct copy comes from.
                    std::vector<std::pair<int64_t, int64_t>> spans;
                    for (const auto& [b, e] : s.needle_spans) {
                        const std::string needle = lower(
                            text.decode(std::vector<int32_t>(s.prompt.begin() + b, s.prompt.begin() + e)));
                        for (const std::string& ans : s.answers)
                            if (needle.find(lower(ans)) != std::string::npos) {
                                spans.emplace_back(b, e);
                                break;
                            }
                    }
                    if (spans.empty()) spans = s.needle_spans;
                    const RetrievalTrial trial =
                        retrieval_trial(*decoder, model, s.prompt, spans,
                                        std::min(s.max_new_tokens, o.retrieval_max_new_tokens), text.stop_ids,
                                        [&](const std::vector<int32_t>& g) {
                                            return score_output(s, text.decode(g)) >= 1.0;
                                        });
                    TrialRecord tr;
                    tr.task = key, tr.length = length, tr.index = i;
                    tr.output = text.decode(trial.generated);
                    // Wu et al. count a trial when the answer's recall is above 50%.
                    tr.correct = score_output(s, tr.output) > 0.5;
                    tr.seconds = add_time("retrieval", sw);
                    acc_ret.add_trial(trial.scores, tr.correct);
                    tick(fmt::format("{} len {} #{}: retrieval {}", key, length, i,
                                     tr.correct ? "correct" : "wrong"));
                    report.trials.push_back(std::move(tr));
                }
            set.methods["retrieval"].tasks[key] = acc_ret.mean();
        }
    }
    aggregate_scores(set);
    nlohmann::json settings;
    settings["methods"] = o.methods;
    std::vector<std::string> task_keys;
    for (const ScoreTask& t : tasks) task_keys.push_back(t.key());
    settings["tasks"] = task_keys;
    settings["lengths"] = o.lengths;
    settings["samples"] = o.samples;
    settings["seed"] = o.seed;
    settings["receivers"] = o.receivers;
    settings["retrieval_max_new_tokens"] = o.retrieval_max_new_tokens;
    settings["attribution_positions"] =
        o.attribution_positions == AttributionPositions::All ? "all" : "answer";
    settings["patch_position"] = "answer (last prompt token)";
    settings["device"] = backend.device();
    settings["metric"] = "logit difference logit(answer) - logit(distractor)";
    report.settings = settings;
    return report;
}

}  // namespace hydra
