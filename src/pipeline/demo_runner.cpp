// `hydra demo` on the real default model (see demo_runner.h).
#include "pipeline/demo_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "eval/decode_cost.h"
#include "eval/eval_runner.h"
#include "eval/heldout_metrics.h"
#include "eval/model_text_encoder.h"
#include "eval/synthetic_mixer.h"
#include "eval/task_registry.h"
#include "interp/score_heads.h"
#include "interp/scores_io.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"
#include "model/weight_quantizer.h"
#include "pipeline/demo_report.h"
#include "pipeline/pipeline_steps.h"
#include "pipeline/run_ledger.h"
#include "pipeline/variant_conversion.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
// The cost step: one sequence at this context (or the teacher's window, when shorter), then these steps.
constexpr int64_t kDemoCostContext = 4096, kDemoCostSteps = 32;
}  // namespace

const std::vector<std::string>& demo_steps() {
    static const std::vector<std::string> steps = {"score",   "ablation", "convert", "align",
                                                   "distill", "cost",     "report"};
    return steps;
}

PipelineConfig demo_config(const std::string& teacher) {
    // The GPU preset's stage recipe (trainable sets, loss weights, learning-rate scales), so the demo
    // recovers the way the full-budget run does, only for far fewer tokens.
    PipelineConfig p = PipelineConfig::preset("smollm2-gpu");
    p.name = "demo";
    p.teacher = teacher;
    p.device = "cpu";
    p.score_file.clear();
    // A NIAH task SmolLM2-135M solves at 1K tokens (every sample right), so ablating the heads it needs
    // shows as a drop. Sized for a 2-core machine (about 3 minutes when it is quiet, 8 beside a build and
    // test run): 4 scoring pairs, 6 samples per ablation condition.
    p.score_methods = {"attribution"};
    p.score_tasks = {"niah_single_1"};
    p.score_lengths = {1024};
    p.score_samples = 4;
    p.ablation_samples = 6;
    p.calib_tokens = 512;
    PipelineVariant v;
    v.name = "hydra-7:1-scores";
    v.select = "scores";
    v.ratio = "7:1";
    // The fusion's LA offsets start the conversion at a held-out KL of 2.5 instead of 6.1 on the demo's
    // prose (docs/results/conversion_init): a short recovery then shows a model, not a collapse.
    v.la_bias = true;
    p.variants = {v};
    for (TrainConfig* s : {&p.align, &p.distill}) {
        s->tokenizer = teacher;
        s->sources = {"austen_emma.txt"};  // far more text than the stages read; one file tokenizes fast
        s->seq_len = 256;
        s->batch_size = 1;
        s->synthetic_fraction = 0.0;  // the check is held-out prose KL
        s->eval_batches = 1;
        s->warmup_steps = 1;
    }
    // Align moves the held-out KL least per second (2.49 -> 2.32 in 2 steps), distill most (1.82 after 24:
    // about 60 s on a quiet 2-core machine), so align keeps 2 steps and distill takes 24. KL runs on 2048
    // held-out tokens in windows of the stages' 256: eight windows give the bootstrap something to resample
    // (one window's "interval" would be a point), ~10 s per model.
    p.align.steps = p.align.schedule_steps = 2;
    p.align.save_every = 2;  // a checkpoint of the 155M-parameter hybrid with AdamW state is ~2 GB
    p.distill.steps = p.distill.schedule_steps = 24;
    p.distill.save_every = 24;
    p.heldout_tokens = 2048;
    return p;
}

namespace {

using Clock = std::chrono::steady_clock;

// First and last training loss and the steps of a stage, from its log.jsonl.
json stage_summary(const fs::path& dir, const TrainConfig& tc) {
    json s = {{"steps", tc.steps}, {"tokens", tc.steps * tc.batch_size * tc.seq_len}};
    std::ifstream in(dir / "log.jsonl");
    std::string line;
    while (std::getline(in, line)) {
        const std::optional<json> parsed = try_parse_json_bounded(line);
        if (!parsed || !parsed->is_object()) continue;
        const json& j = *parsed;
        if (!j.contains("loss") || !j["loss"].is_number()) continue;
        if (!s.contains("first_loss")) s["first_loss"] = j["loss"];
        s["last_loss"] = j["loss"];
    }
    return s;
}

}  // namespace

DemoResult run_demo(const PipelineConfig& cfg, const std::string& out_dir, const std::string& from,
                    const PipelineHooks& hooks) {
    const auto t_start = Clock::now();
    cfg.validate();
    HYDRA_CHECK(!cfg.teacher.empty(), "demo: no teacher model (give MODEL or set teacher=PATH)");
    HYDRA_CHECK(cfg.variants.size() == 1,
                "demo: builds exactly one variant, the config has {} (use `hydra pipeline` for several)",
                cfg.variants.size());
    const PipelineVariant& variant = cfg.variants[0];
    const bool on_device = cfg.device == "cuda";
    HYDRA_CHECK(!on_device || (hooks.train_engine && hooks.generator),
                "demo: device = cuda, but this hydra was built without CUDA (set device=cpu)");
    const auto forced = steps_forced_from(demo_steps(), from, "demo");
    const std::string heldout_file =
        cfg.heldout_text.empty() ? default_prose("austen_persuasion.txt") : cfg.heldout_text;
    RunLedger ledger(out_dir, "demo", cfg.to_json());
    const fs::path& out = ledger.out();
    const auto say = &RunLedger::say;
    auto progress = [&](const std::string& label, int64_t done, int64_t total, const std::string& status) {
        if (hooks.progress) hooks.progress(label, done, total, status);
    };

    const auto t_load = Clock::now();
    LoadedModel teacher = load_model(cfg.teacher);
    HYDRA_CHECK(teacher.model->plan().is_all_fa(), "{}: the demo's teacher must be a full-attention model",
                cfg.teacher);
    const ModelConfig& tcfg = teacher.model->config();
    const ModelText text = model_text_for(cfg.teacher, teacher.vocab, tcfg.eos_token_ids);
    auto ctx = std::make_shared<TaskContext>();
    ctx->text = text;
    ctx->options = training_task_options(text);
    const std::string data_tokenizer = text.name() == "byte-v1" ? "byte" : cfg.teacher;
    const int64_t L = tcfg.num_layers, H = tcfg.num_heads;
    if (!ledger.has("load")) ledger.record("load", seconds_since(t_load));

    // 1. Head scores: the fast screen.
    const fs::path scores_path = out / "scores.json";
    if (forced("score")) fs::remove(scores_path);
    std::vector<std::unique_ptr<TaskGenerator>> gens;
    std::vector<ScoreTask> score_tasks;
    std::vector<const TaskGenerator*> task_ptrs;
    for (const std::string& t : cfg.score_tasks) {
        gens.push_back(make_task(t, ctx));
        const std::vector<std::string> c = gens.back()->corruptions();
        HYDRA_CHECK(!c.empty(), "score.tasks: task '{}' has no clean/corrupted pairs", t);
        score_tasks.push_back({gens.back().get(), c[0]});
        task_ptrs.push_back(gens.back().get());
    }
    if (fs::exists(scores_path)) {
        say("score: done, skipped");
    } else {
        say(fmt::format("score: {} on {} at {} tokens, {} pairs per task", fmt::join(cfg.score_methods, "+"),
                        fmt::join(cfg.score_tasks, ","), fmt::join(cfg.score_lengths, ","),
                        cfg.score_samples));
        const auto t0 = Clock::now();
        ScoreHeadsOptions so;
        so.methods = cfg.score_methods;
        so.lengths = cfg.score_lengths;
        so.samples = cfg.score_samples;
        check_score_options(tcfg, so);
        ScoreReport report =
            score_heads(*teacher.model, text, score_tasks, so,
                        [&](int64_t d, int64_t n, const std::string& s) { progress("score", d, n, s); });
        report.model_source = cfg.teacher;
        draw_figure((out / "heads.png").string(), [&] {
            write_scores_heatmap((out / "heads.png").string(), report.scores.aggregate, L, H,
                                 "head scores: attribution patching", "combined score", (L * H + 7) / 8);
        });
        write_scores_json(scores_path.string(), tcfg, report);  // last: marks the step done
        ledger.record("score", seconds_since(t0));
    }
    const HeadScoreTable scores = load_head_scores(scores_path.string(), tcfg);
    std::vector<double> aggregate;
    for (const auto& layer : scores.heads) aggregate.insert(aggregate.end(), layer.begin(), layer.end());
    json score_info = {{"methods", cfg.score_methods},
                       {"tasks", cfg.score_tasks},
                       {"lengths", cfg.score_lengths},
                       {"pairs_per_task", cfg.score_samples},
                       {"heads", L * H}};
    {
        const json sj = read_json_or(scores_path, json::object());
        if (sj.contains("pairs") && sj["pairs"].is_array()) {
            int64_t used = 0;
            for (const json& p : sj["pairs"]) used += p.value("used", false) ? 1 : 0;
            score_info["pairs"] = sj["pairs"].size();
            score_info["pairs_used"] = used;
        }
    }
    for (const auto& [l, h] : top_heads(aggregate, H, 12))
        score_info["top"].push_back({{"layer", l}, {"head", h}, {"score", aggregate[size_t(l * H + h)]}});
    {
        std::string top;
        for (const json& t : score_info["top"])
            top += fmt::format(" L{}.H{}={:.2f}", t["layer"].get<int64_t>(), t["head"].get<int64_t>(),
                               t["score"].get<double>());
        say("top heads:" + top);
    }

    // 2. The causal check: the top-scored eighth ablated against random eighths.
    const fs::path ablation_path = out / "ablation.json", partial_path = out / "ablation.partial.json";
    if (forced("ablation")) fs::remove(ablation_path), fs::remove(partial_path);
    json ablation = read_json_or(ablation_path, json());
    if (!ablation.is_null()) {
        say("ablation: done, skipped");
    } else {
        say(fmt::format("ablation: {} at {} tokens, {} samples per condition (intact, top-scored, 3 random)",
                        fmt::join(cfg.score_tasks, ","), cfg.score_lengths[0], cfg.ablation_samples));
        const auto t0 = Clock::now();
        const ModelGenerator generator = on_device ? ModelGenerator([&](const LlamaModel& m, int64_t limit) {
            return hooks.generator(m, text, limit, limit);
        })
                                                   : ModelGenerator{};
        ablation = ablation_check(
            *teacher.model, text, task_ptrs, cfg.score_tasks, aggregate, cfg.score_lengths[0],
            cfg.ablation_samples, {1, 2, 3}, generator, read_json_or(partial_path, json()),
            [&](const json& partial) { write_json(partial_path, partial); },
            [&](const std::string& label, int64_t d, int64_t n) { progress("ablation " + label, d, n, ""); });
        write_json(ablation_path, ablation);
        fs::remove(partial_path);
        ledger.record("ablation", seconds_since(t0));
    }
    say(ablation_summary(ablation));

    // 3. Convert 7:1 and measure the KV cache and the untrained hybrid's held-out KL.
    const fs::path hybrid_dir = out / "hybrid";
    const fs::path agreement_path = out / "agreement.json";
    if (forced("convert")) {
        fs::remove_all(hybrid_dir);
        fs::remove(out / "conversion.json");
        fs::remove(agreement_path);
    }
    const std::vector<int32_t> heldout = prose_tokens(text, heldout_file, cfg.heldout_tokens, 40000);
    HYDRA_CHECK(heldout.size() >= 2,
                "demo: no held-out text in {} (run tools/setup.sh, or set eval.heldout_text)", heldout_file);
    // Windows of the length the stages trained at (the student has seen no longer rows).
    const int64_t window =
        std::min<int64_t>({int64_t(heldout.size()), cfg.distill.seq_len,
                           tcfg.max_position_embeddings > 0 ? tcfg.max_position_embeddings : int64_t(1024)});
    json agreement = read_json_or(agreement_path, json::object());
    auto measure = [&](const std::string& key, const std::string& model_dir) {
        if (agreement.contains(key)) return;
        const auto t0 = Clock::now();
        LoadedModel m = load_model(model_dir);
        // the pipeline's held-out statistics (eval/heldout_metrics), here over the held-out prose's windows
        const HeldoutMetrics hm = heldout_metrics(
            cpu_logits_fn(*teacher.model), cpu_logits_fn(*m.model),
            heldout_windows(std::span<const int32_t>(heldout), window, int64_t(heldout.size())),
            teacher.model->config().vocab_size);
        agreement[key] = heldout_metrics_json(hm);
        write_json(agreement_path, agreement);
        ledger.record("kl/" + key, seconds_since(t0));
        say(fmt::format(
            "held-out KL(t||s) {}: {:.4f} nats/token, top-1 agreement {:.3f}, ppl {:.2f} ({} tokens)", key,
            agreement[key]["kl"].get<double>(), agreement[key]["top1_agreement"].get<double>(),
            agreement[key]["ppl"].get<double>(), agreement[key]["tokens"].get<int64_t>()));
    };
    json conversion = read_json_or(out / "conversion.json", json());
    if (fs::exists(hybrid_dir / "config.json") && !conversion.is_null()) {
        say("convert: done, skipped");
    } else {
        const auto t0 = Clock::now();
        fs::remove_all(hybrid_dir);
        const VariantConversion vc = convert_variant(
            teacher, cfg.teacher, text, variant, scores_path,
            prose_tokens(text, default_prose("austen_emma.txt"), cfg.calib_tokens, 20000), hybrid_dir);
        const HybridPlan& plan = vc.plan;
        const HybridPlan all_fa = HybridPlan::all_fa(tcfg);
        conversion = {{"plan", plan.ratio_summary()},
                      {"selection", plan.selection},
                      {"granularity", plan.granularity},
                      {"fa_kv_groups", plan.total_fa_kv_groups(tcfg)},
                      {"kv_groups", tcfg.num_layers * tcfg.num_kv_heads},
                      {"kv_bytes_per_token_teacher", all_fa.kv_bytes_per_token(tcfg, 2)},
                      {"kv_bytes_per_token_hybrid", plan.kv_bytes_per_token(tcfg, 2)},
                      {"state_bytes", plan.state_bytes(tcfg)},
                      {"parameters_teacher", teacher.model->params().parameter_count()},
                      {"parameters_hybrid", vc.parameters},
                      {"calibration_tokens", vc.stats.calibration_tokens}};
        write_json(out / "conversion.json", conversion);  // last: marks the step done
        ledger.record("convert", seconds_since(t0));
    }
    say(fmt::format("convert: {}; KV cache {} -> {} bytes/token (bf16, {:.3f}x)",
                    conversion["plan"].get<std::string>(),
                    conversion["kv_bytes_per_token_teacher"].get<int64_t>(),
                    conversion["kv_bytes_per_token_hybrid"].get<int64_t>(),
                    double(conversion["kv_bytes_per_token_hybrid"].get<int64_t>()) /
                        double(conversion["kv_bytes_per_token_teacher"].get<int64_t>())));
    measure("converted", hybrid_dir.string());

    // 4. Recovery: stage 1 (align) then a short stage 2 (distill), held-out KL after each.
    json stages = json::object();
    fs::path previous = hybrid_dir;
    for (const auto& stage :
         {std::pair<std::string, const TrainConfig*>{"align", &cfg.align}, {"distill", &cfg.distill}}) {
        // plain names, not a structured binding: the progress lambda below captures `kind`
        const std::string& kind = stage.first;
        const TrainConfig* base = stage.second;
        const fs::path dir = out / kind;
        if (forced(kind)) {
            fs::remove_all(dir);
            agreement.erase(kind);
            write_json(agreement_path, agreement);
        }
        TrainConfig tc = *base;
        tc.stage = kind;
        tc.init = previous.string();
        tc.teacher = cfg.teacher;
        tc.tokenizer = data_tokenizer;
        tc.device = cfg.device;
        if (tc.shard_dir.empty()) tc.shard_dir = (out / "shards").string();
        tc = without_heldout(tc, heldout_file, kind);
        if (stage_complete(dir, tc.steps)) {
            say(fmt::format("{}: done ({} steps), skipped", kind, tc.steps));
        } else {
            say(fmt::format("{}: {} steps of {} x {} tokens{}", kind, tc.steps, tc.batch_size, tc.seq_len,
                            fs::exists(dir / "state.json") ? " (resuming)" : ""));
            const auto t0 = Clock::now();
            DataLoader::Generator synthetic;
            if (tc.synthetic_fraction > 0 && hooks.synthetic_rows) synthetic = hooks.synthetic_rows(tc);
            train_stage_resumable(
                tc, dir,
                [&](const StepLog& s) {
                    progress(kind, s.step, s.total_steps,
                             fmt::format("loss {:.4f} {:.1f} tok/s", s.loss, s.tokens_per_second));
                },
                synthetic, on_device ? hooks.train_engine : TrainEngineFactory{});
            ledger.record(kind, seconds_since(t0));
        }
        stages[kind] = stage_summary(dir, tc);
        measure(kind, dir.string());
        previous = dir;
    }

    // 5. Cost at length: the teacher and the recovered hybrid, one sequence at a long context on this CPU.
    const fs::path cost_path = out / "cost.json";
    if (forced("cost")) fs::remove(cost_path);
    json cost = read_json_or(cost_path, json());
    if (!cost.is_null()) {
        say("cost: done, skipped");
    } else {
        const auto t0 = Clock::now();
        const int64_t context = std::min<int64_t>(kDemoCostContext, tcfg.max_position_embeddings > 0
                                                                        ? tcfg.max_position_embeddings
                                                                        : kDemoCostContext);
        const std::vector<int32_t> ids = random_token_ids(context, tcfg.vocab_size, 1234);
        cost = {{"context", context}, {"decode_tokens", kDemoCostSteps}};
        // as served: the GGUF's own quantized weights, Q8_0 copies of f32 ones (--quantize-weights q8_0); the
        // teacher is the one loaded above (no step after this one runs it)
        LoadedModel hybrid = load_model(previous.string());
        for (const auto& [key, model] : {std::pair<std::string, LlamaModel*>{"teacher", teacher.model.get()},
                                         {"hybrid", hybrid.model.get()}}) {
            quantize_linear_weights(*model);
            const DecodeCost c = measure_decode_cost(*model, ids, kDemoCostSteps);
            cost[key] = {{"prefill_seconds", c.prefill_seconds},
                         {"decode_tokens_per_second", c.decode_tokens_per_second},
                         {"cache_bytes", c.cache_bytes},
                         {"kv_bytes_per_token", c.kv_bytes_per_token}};
        }
        write_json(cost_path, cost);
        ledger.record("cost", seconds_since(t0));
    }
    say(fmt::format(
        "cost at {} tokens of context: decode {:.1f} tok/s teacher, {:.1f} hybrid; cache {:.1f} -> "
        "{:.1f} MiB",
        cost["context"].get<int64_t>(), cost["teacher"]["decode_tokens_per_second"].get<double>(),
        cost["hybrid"]["decode_tokens_per_second"].get<double>(),
        cost["teacher"]["cache_bytes"].get<double>() / (1 << 20),
        cost["hybrid"]["cache_bytes"].get<double>() / (1 << 20)));

    // 6. Report.
    DemoReportInputs ri;
    ri.config = &cfg;
    ri.out_dir = out.string();
    ri.scores = score_info;
    ri.ablation = ablation;
    ri.conversion = conversion;
    ri.agreement = agreement;
    ri.stages = stages;
    ri.cost = cost;
    ri.timings = ledger.timings();
    ri.gpu_report = latest_gpu_report(std::string(HYDRA_SOURCE_DIR) + "/docs/results");
    DemoResult r;
    r.report_path = write_demo_report(ri);
    r.seconds = seconds_since(t_start);
    const json& before = agreement["converted"];
    const json& after = agreement["distill"];
    r.summary = fmt::format(
        "{}\nKV cache: {} -> {} bytes/token\nheld-out KL(t||s): {:.4f} converted -> {:.4f} after align -> "
        "{:.4f} "
        "after distill",
        ablation_summary(ablation), conversion["kv_bytes_per_token_teacher"].get<int64_t>(),
        conversion["kv_bytes_per_token_hybrid"].get<int64_t>(), before["kl"].get<double>(),
        agreement["align"]["kl"].get<double>(), after["kl"].get<double>());
    return r;
}

}  // namespace hydra
