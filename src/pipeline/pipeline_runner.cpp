// The HydraHead pipeline (see pipeline_runner.h).
#include "pipeline/pipeline_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "eval/eval_runner.h"
#include "eval/heldout_metrics.h"
#include "eval/heldout_sources.h"
#include "eval/model_text_encoder.h"
#include "eval/results_io.h"
#include "eval/synthetic_mixer.h"
#include "eval/task_registry.h"
#include "interp/score_heads.h"
#include "interp/scores_io.h"
#include "io/atomic_dir.h"
#include "model/head_ablation.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "pipeline/pipeline_report.h"
#include "pipeline/pipeline_steps.h"
#include "pipeline/run_ledger.h"
#include "pipeline/variant_conversion.h"
#include "pipeline/variant_record.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::vector<std::string>& pipeline_steps() {
    static const std::vector<std::string> steps = {"teacher", "score",   "convert", "align",
                                                   "distill", "longctx", "eval",    "report"};
    return steps;
}

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

PipelineResult run_pipeline(const PipelineConfig& cfg, const std::string& out_dir, const std::string& from,
                            const PipelineHooks& hooks) {
    const auto t_start = Clock::now();
    cfg.validate();
    const bool on_device = cfg.device == "cuda";
    HYDRA_CHECK(
        !on_device || (hooks.train_engine && hooks.generator && hooks.window_stats),
        "pipeline: device = cuda, but this hydra was built without CUDA (configure with -DHYDRA_CUDA=ON "
        "on a machine with the CUDA toolkit, or set device=cpu)");
    const auto forced = steps_forced_from(pipeline_steps(), from, "pipeline");
    // Agreement, KL and perplexity are measured on this text; every training step leaves it out.
    const std::string heldout_file =
        cfg.heldout_text.empty() ? default_prose("austen_persuasion.txt") : cfg.heldout_text;
    RunLedger ledger(out_dir, "pipeline", cfg.to_json());
    const fs::path& out = ledger.out();
    const auto say = &RunLedger::say;

    auto train_stage = [&](const std::string& label, TrainConfig tc, const fs::path& dir) {
        if (forced(tc.stage == "pretrain" ? "teacher" : tc.stage)) fs::remove_all(dir);
        if (stage_complete(dir, tc.steps)) {
            say(fmt::format("{}: done ({} steps), skipped", label, tc.steps));
            return;
        }
        say(fmt::format("{}: {} steps of {} x {} tokens{}", label, tc.steps, tc.batch_size, tc.seq_len,
                        fs::exists(dir / "state.json") ? " (resuming)" : ""));
        const auto t0 = Clock::now();
        tc.device = cfg.device;
        if (hooks.run_stage) {
            hooks.run_stage(tc, dir.string(), fs::exists(dir / "state.json"));
            HYDRA_CHECK(stage_complete(dir, tc.steps),
                        "{}: the stage's process ended without its {} steps in {}", label, tc.steps,
                        dir.string());
            ledger.record(label, seconds_since(t0), tc.steps * tc.batch_size * tc.seq_len);
            return;
        }
        DataLoader::Generator synthetic;
        if (tc.synthetic_fraction > 0 && hooks.synthetic_rows) synthetic = hooks.synthetic_rows(tc);
        train_stage_resumable(
            tc, dir,
            [&](const StepLog& s) {
                if (hooks.progress)
                    hooks.progress(label, s.step, s.total_steps,
                                   fmt::format("loss {:.4f} {:.0f} tok/s", s.loss, s.tokens_per_second));
            },
            synthetic, on_device ? hooks.train_engine : TrainEngineFactory{});
        ledger.record(label, seconds_since(t0), tc.steps * tc.batch_size * tc.seq_len);
    };

    // 1. Teacher.
    std::string teacher_path = cfg.teacher;
    if (teacher_path.empty()) {
        teacher_path = (out / "teacher").string();
        train_stage("teacher", without_heldout(cfg.teacher_train, heldout_file, "teacher_train"),
                    out / "teacher");
    }
    LoadedModel teacher = load_model(teacher_path);
    HYDRA_CHECK(teacher.model->plan().is_all_fa(),
                "{}: the pipeline's teacher must be a full-attention model", teacher_path);
    const ModelConfig& tcfg = teacher.model->config();
    const ModelText text = model_text_for(teacher_path, teacher.vocab, tcfg.eos_token_ids);
    auto ctx = std::make_shared<TaskContext>();
    ctx->text = text;
    ctx->options = training_task_options(text);
    const std::string data_tokenizer = text.name() == "byte-v1" ? "byte" : teacher_path;
    const ModelGenerator ablation_generator = on_device
                                                  ? ModelGenerator([&](const LlamaModel& m, int64_t limit) {
                                                        return hooks.generator(m, text, limit, limit);
                                                    })
                                                  : ModelGenerator{};

    // 2. Head scores.
    const bool need_scores = std::any_of(cfg.variants.begin(), cfg.variants.end(),
                                         [](const PipelineVariant& v) { return v.select == "scores"; });
    const fs::path scores_path = out / "scores.json";
    if (need_scores) {
        if (forced("score")) fs::remove(scores_path);
        if (fs::exists(scores_path)) {
            say("score: done, skipped");
        } else if (!cfg.score_file.empty()) {
            // Scores computed earlier by `hydra score-heads` (e.g. on another machine): checked against the
            // teacher's shape, copied, and put through the same causality check.
            const auto t0 = Clock::now();
            const HeadScoreTable table = load_head_scores(cfg.score_file, tcfg);
            std::vector<double> aggregate;
            for (const auto& layer : table.heads)
                aggregate.insert(aggregate.end(), layer.begin(), layer.end());
            std::vector<std::unique_ptr<TaskGenerator>> gens;
            std::vector<const TaskGenerator*> ptrs;
            for (const std::string& t : cfg.score_tasks) {
                gens.push_back(make_task(t, ctx));
                ptrs.push_back(gens.back().get());
            }
            say(fmt::format("score: from {}; ablation check on {} at {} tokens", cfg.score_file,
                            fmt::join(cfg.score_tasks, ","), cfg.score_lengths[0]));
            json ab =
                ablation_check(*teacher.model, text, ptrs, cfg.score_tasks, aggregate, cfg.score_lengths[0],
                               cfg.ablation_samples, {1, 2, 3}, ablation_generator);
            ab["scores_from"] = cfg.score_file;
            write_json(out / "ablation.json", ab);
            draw_figure((out / "heads.png").string(), [&] {
                write_scores_heatmap((out / "heads.png").string(), aggregate, tcfg.num_layers, tcfg.num_heads,
                                     "head scores (aggregate)", "combined score",
                                     (tcfg.num_layers * tcfg.num_heads + 7) / 8);
            });
            write_text_file(scores_path, read_text_file(cfg.score_file));  // last: marks the step done
            ledger.record("score/ablation", seconds_since(t0), 0);
            say(ablation_summary(ab));
        } else {
            say(fmt::format("score: {} on {} x {} lengths x {} pairs", fmt::join(cfg.score_methods, "+"),
                            fmt::join(cfg.score_tasks, ","), cfg.score_lengths.size(), cfg.score_samples));
            const auto t0 = Clock::now();
            ScoreHeadsOptions so;
            so.methods = cfg.score_methods;
            so.lengths = cfg.score_lengths;
            so.samples = cfg.score_samples;
            check_score_options(tcfg, so);
            std::vector<std::unique_ptr<TaskGenerator>> gens;
            std::vector<ScoreTask> tasks;
            for (const std::string& t : cfg.score_tasks) {
                gens.push_back(make_task(t, ctx));
                const std::vector<std::string> c = gens.back()->corruptions();
                HYDRA_CHECK(!c.empty(), "score.tasks: task '{}' has no clean/corrupted pairs", t);
                tasks.push_back({gens.back().get(), c[0]});
            }
            ScoreReport report =
                score_heads(*teacher.model, text, tasks, so, [&](int64_t d, int64_t n, const std::string& s) {
                    if (hooks.progress) hooks.progress("score", d, n, s);
                });
            report.model_source = teacher_path;
            write_scores_json(scores_path.string(), tcfg, report);
            draw_figure((out / "heads.png").string(), [&] {
                write_scores_heatmap((out / "heads.png").string(), report.scores.aggregate, tcfg.num_layers,
                                     tcfg.num_heads, "head scores (aggregate)", "combined score",
                                     (tcfg.num_layers * tcfg.num_heads + 7) / 8);
            });
            ledger.record("score", seconds_since(t0), 0);
            // Causality check of the scores by ablation (written next to them).
            const auto t1 = Clock::now();
            std::vector<const TaskGenerator*> ptrs;
            for (const auto& g : gens) ptrs.push_back(g.get());
            json ab =
                ablation_check(*teacher.model, text, ptrs, cfg.score_tasks, report.scores.aggregate,
                               cfg.score_lengths[0], cfg.ablation_samples, {1, 2, 3}, ablation_generator);
            write_json(out / "ablation.json", ab);
            ledger.record("score/ablation", seconds_since(t1), 0);
            say(ablation_summary(ab));
        }
    }

    // 3-6. Per variant: convert, align, distill, longctx.
    const std::string calib_file =
        cfg.heldout_text.empty() ? default_prose("austen_emma.txt") : cfg.heldout_text;
    std::vector<std::pair<std::string, std::string>> final_models;  // (name, path)
    std::map<std::string, TrainConfig> stage_configs;               // as every variant's stages ran them
    std::map<std::string, std::vector<std::pair<std::string, std::string>>>
        stage_dirs;  // (stage, dir) per variant
    for (const PipelineVariant& v : cfg.variants) {
        const fs::path vdir = out / v.name;
        const fs::path converted = vdir / "converted";
        if (forced("convert")) fs::remove_all(vdir);
        if (fs::exists(converted / "config.json")) {
            say(fmt::format("{}: convert: done, skipped", v.name));
        } else {
            const auto t0 = Clock::now();
            const VariantConversion vc =
                convert_variant(teacher, teacher_path, text, v, scores_path,
                                prose_tokens(text, calib_file, cfg.calib_tokens, 20000), converted);
            const HybridPlan& plan = vc.plan;
            const ConversionStats& stats = vc.stats;
            say(fmt::format("{}: convert: {}", v.name, plan.ratio_summary()));
            ledger.record(v.name + "/convert", seconds_since(t0), stats.calibration_tokens);
        }
        fs::path previous = converted;
        for (const auto& [kind, base] : {std::pair<std::string, const TrainConfig*>{"align", &cfg.align},
                                         {"distill", &cfg.distill},
                                         {"longctx", &cfg.longctx}}) {
            if (std::find(v.stages.begin(), v.stages.end(), kind) == v.stages.end()) continue;
            TrainConfig tc = *base;
            tc.stage = kind;
            tc.init = previous.string();
            tc.teacher = teacher_path;
            tc.tokenizer = data_tokenizer;
            if (kind == "longctx" && tc.kl_weight == 0) tc.teacher.clear();
            stage_configs[kind] = without_heldout(tc, heldout_file, kind);
            stage_configs[kind].device = cfg.device;
            train_stage(v.name + "/" + kind, stage_configs[kind], vdir / kind);
            previous = vdir / kind;
            stage_dirs[v.name].emplace_back(kind, previous.string());
        }
        final_models.emplace_back(v.name, previous.string());
    }

    // 7. Evaluation: the teacher and every variant, same tasks, lengths and samples; KL, agreement and
    // perplexity on held-out shard windows.
    const fs::path eval_dir = out / "eval";
    fs::create_directories(eval_dir);
    std::vector<std::pair<std::string, std::string>> all_models;
    if (cfg.eval_teacher) all_models.emplace_back("teacher", teacher_path);
    all_models.insert(all_models.end(), final_models.begin(), final_models.end());
    std::vector<ModelEvalResult> results;
    SampleCache sample_cache;  // every model runs the same samples; built once
    json agreement = read_json_or(eval_dir / "agreement.json", json::object());
    EvalRunInfo info;
    info.suite = "pipeline";
    info.settings.tasks = cfg.eval_tasks;
    info.settings.lengths = cfg.eval_lengths;
    info.settings.samples = cfg.eval_samples;
    info.settings.context_limit = *std::max_element(cfg.eval_lengths.begin(), cfg.eval_lengths.end()) + 256;
    info.device = cfg.device;
    info.bootstrap.resamples = cfg.bootstrap_resamples;
    if (const auto held = cfg.heldout_tasks(); !held.empty())
        info.groups.push_back({kHeldoutTaskGroup, held});
    // Held-out text: the held-out split of the shards the distill stage trains from (never a training
    // row of any stage), or of eval.heldout_shards. Opened lazily: a resumed run may not need it.
    const int64_t window = cfg.distill.seq_len;
    std::vector<std::vector<int32_t>> heldout_windows_cache;
    std::string heldout_source;
    std::vector<HeldoutSource> heldout_corpus_sources;  // empty for plain token shards
    std::vector<int> heldout_window_sources;
    auto windows = [&]() -> const std::vector<std::vector<int32_t>>& {
        if (!heldout_windows_cache.empty()) return heldout_windows_cache;
        TrainConfig dc = cfg.distill;
        dc.tokenizer = data_tokenizer;
        dc = without_heldout(dc, heldout_file, "distill");
        const TokenShards shards = cfg.heldout_shards.empty()
                                       ? open_training_shards(dc)
                                       : open_token_shards(cfg.heldout_shards, text.encoder.get());
        heldout_source =
            cfg.heldout_shards.empty() ? shards.dir + " (the distill stage's shards)" : shards.dir;
        HYDRA_CHECK(shards.heldout.size() >= 2,
                    "pipeline eval: the held-out split of {} is empty (build the shards with a held-out "
                    "fraction > 0, "
                    "or set eval.heldout_shards)",
                    shards.dir);
        heldout_windows_cache = heldout_windows(shards.heldout, window, cfg.heldout_tokens);
        // Weights of the mix the students trained on (the distill stage's), when these are its shards.
        const bool own = cfg.heldout_shards.empty() || fs::path(cfg.heldout_shards) == fs::path(dc.corpus);
        heldout_corpus_sources = heldout_sources(shards.dir, own ? dc.mix : std::string());
        heldout_window_sources = window_sources(heldout_corpus_sources, window, heldout_windows_cache.size());
        int64_t n = 0;
        for (const auto& w : heldout_windows_cache) n += int64_t(w.size()) - 1;
        if (n < cfg.heldout_tokens)
            fmt::print(
                stderr,
                "warning: the held-out split of {} holds {} tokens, fewer than eval.heldout_tokens = {}\n",
                shards.dir, n, cfg.heldout_tokens);
        return heldout_windows_cache;
    };
    const int64_t V = tcfg.vocab_size;
    const LogitsFn teacher_logits = on_device ? LogitsFn{} : cpu_logits_fn(*teacher.model);
    for (const auto& model_entry : all_models) {
        // plain references, not a structured binding: the progress lambda below captures the name
        const std::string &name = model_entry.first, &path = model_entry.second;
        const fs::path result_file = eval_dir / (name + ".json");
        if (forced("eval")) fs::remove(result_file);
        if (fs::exists(result_file) && agreement.contains(name)) {
            const json j = read_json_or(result_file, json::object());
            ModelEvalResult r = model_result_from_json(j, result_file.string(), info.bootstrap);
            r.model = name;
            results.push_back(std::move(r));
            say(fmt::format("eval {}: done, skipped", name));
            continue;
        }
        LoadedModel m = load_model(path);
        say(fmt::format("eval {}: {} tasks x {} lengths x {} samples", name, cfg.eval_tasks.size(),
                        cfg.eval_lengths.size(), cfg.eval_samples));
        std::vector<std::unique_ptr<TaskGenerator>> gens;
        std::vector<const TaskGenerator*> ptrs;
        for (const std::string& t : cfg.eval_tasks) {
            gens.push_back(make_task(t, ctx));
            ptrs.push_back(gens.back().get());
        }
        EvalSettings es = info.settings;
        es.sample_cache = &sample_cache;
        ModelEvalResult r;
        {
            const GenerateFn gen = on_device
                                       ? hooks.generator(*m.model, text, es.context_limit, es.context_limit)
                                       : GenerateFn{};
            r = run_eval(
                name, *m.model, ptrs, text, es,
                [&](int64_t d, int64_t n, const std::string& s) {
                    if (hooks.progress) hooks.progress("eval " + name, d, n, s);
                },
                gen);
        }  // the generator's device memory goes before the next model
        aggregate(r, info.bootstrap);
        json j = model_result_json(r, info);
        j["model"] = name;
        j["path"] = path;
        j["device"] = cfg.device;
        const auto t0 = Clock::now();
        const auto& ws = windows();
        // One model's held-out statistics: the whole (metrics + JSON, with the by-source table when the
        // shards are a corpus) of `label`'s windows.
        auto measure = [&](const LlamaModel& model, bool self, const std::string& label, HeldoutMetrics& hm) {
            const LogitsFn student = self || on_device ? LogitsFn{} : cpu_logits_fn(model);
            const WindowStatsFn stats =
                on_device ? hooks.window_stats(*teacher.model, self ? nullptr : &model, window)
                          : host_window_stats_fn(teacher_logits, self ? teacher_logits : student, V);
            const std::vector<WindowStats> per = collect_window_stats(stats, ws, [&](int64_t d, int64_t n) {
                if (hooks.progress) hooks.progress("held-out " + label, d, n, "");
            });
            hm = summarize_windows(per, info.bootstrap);
            json j = heldout_metrics_json(hm);
            if (!heldout_corpus_sources.empty())
                j["by_source"] = heldout_by_source_json(
                    summarize_by_source(per, heldout_window_sources, heldout_corpus_sources, info.bootstrap));
            return j;
        };
        HeldoutMetrics hm;
        agreement[name] = measure(*m.model, name == "teacher", name, hm);
        // The same windows after each earlier stage: where the distance to the teacher was won or lost.
        if (const auto sd = stage_dirs.find(name); sd != stage_dirs.end() && sd->second.size() > 1) {
            json after = json::object();
            for (size_t k = 0; k + 1 < sd->second.size(); ++k) {
                const auto& [kind, dir] = sd->second[k];
                const LoadedModel sm = load_model(dir);
                HeldoutMetrics shm;
                json sj = measure(*sm.model, false, name + "/" + kind, shm);
                if (sj.contains("by_source")) {  // the stage table keeps only the mixed numbers
                    sj["mix_kl"] = sj["by_source"]["kl"];
                    sj["mix_kl_ci"] = sj["by_source"]["kl_ci"];
                    sj.erase("by_source");
                }
                after[kind] = std::move(sj);
            }
            agreement[name]["after_stage"] = std::move(after);
        }
        agreement[name]["source"] = heldout_source;
        agreement[name]["window"] = window;
        write_json(eval_dir / "agreement.json", agreement);
        write_json(result_file, j);
        ledger.record("eval/" + name, r.seconds, 0);
        ledger.record("eval/" + name + "/heldout", seconds_since(t0), hm.tokens);
        results.push_back(std::move(r));
    }
    // 8. Report: one record per model (OUT/results/<model>.json, for `hydra report merge`), then report.md.
    fs::create_directories(out / "results");
    for (size_t i = 0; i < all_models.size(); ++i) {
        const auto& [name, path] = all_models[i];
        const LoadedModel m = load_model(path);
        VariantRecordInputs vi;
        vi.config = &cfg;
        vi.out_dir = out.string();
        vi.name = name;
        vi.path = path;
        vi.teacher_path = teacher_path;
        for (const PipelineVariant& v : cfg.variants)
            if (v.name == name) vi.variant = &v;
        if (vi.variant)  // the stages this variant ran (its budget), as they ran
            for (const std::string& st : vi.variant->stages)
                if (const auto it = stage_configs.find(st); it != stage_configs.end())
                    vi.stages[st] = it->second;
        vi.result = &results[i];
        vi.info = &info;
        vi.heldout = agreement.value(name, json::object());
        vi.timings = ledger.timings();
        vi.plan_summary = m.model->plan().ratio_summary();
        vi.kv_bytes_per_token = m.model->plan().kv_bytes_per_token(m.model->config(), 2);
        vi.state_bytes = m.model->plan().state_bytes(m.model->config());
        write_json(out / "results" / (name + ".json"), variant_record(vi));
    }
    PipelineResult result;
    ReportInputs ri;
    ri.config = &cfg;
    ri.out_dir = out.string();
    ri.teacher_path = teacher_path;
    ri.models = all_models;
    ri.results = &results;
    ri.agreement = agreement;
    ri.timings = ledger.timings();
    ri.info = &info;
    const ReportOutput ro = write_pipeline_report(ri);
    result.report_path = ro.path;
    result.table = ro.table;
    result.seconds = seconds_since(t_start);
    return result;
}

}  // namespace hydra
