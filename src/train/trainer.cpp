// Training loop (see trainer.h). Determinism: the same config, seed and thread count give
// bit-identical weights, whether the run is continuous or resumed from any checkpoint, because
// every source of randomness (init, data order) is seeded and saved, and all reductions use static
// OpenMP schedules.
#include "train/trainer.h"

#include <glob.h>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "core/threading.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/llama_model.h"
#include "model/model_directory.h"
#include "model/model_loader.h"
#include "model/weight_init.h"
#include "report/line_plot.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/vocab_to_tokenizer_json.h"
#include "train/adamw.h"
#include "train/byte_tokenizer.h"
#include "train/checkpoint.h"
#include "train/corpus_manifest.h"
#include "train/cpu_step_memory.h"
#include "train/cpu_train_engine.h"
#include "train/data_loader.h"
#include "train/lr_schedule.h"
#include "train/mix_config.h"
#include "train/param_groups.h"
#include "train/token_shards.h"

namespace hydra {

namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
void on_signal(int sig) {
    g_stop_signal = sig;
}

std::string default_cache(const std::string& sub) {
    if (const char* env = std::getenv("HYDRA_CACHE"); env && *env) return std::string(env) + "/" + sub;
    return std::string(HYDRA_SOURCE_DIR) + "/.cache/" + sub;
}

std::vector<std::string> expand_sources(const TrainConfig& c, const std::string& prose_dir) {
    std::vector<std::string> files;
    for (const std::string& pattern : c.sources) {
        const std::string full = fs::path(pattern).is_absolute() ? pattern : prose_dir + "/" + pattern;
        glob_t g{};
        const int rc = ::glob(full.c_str(), 0, nullptr, &g);
        if (rc == 0)
            for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
        globfree(&g);
        HYDRA_CHECK(rc == 0,
                    "data.sources: '{}' matches no file in {} (run tools/setup.sh to fetch the prose)",
                    pattern, prose_dir);
    }
    return files;
}

LrSchedule schedule_for(const TrainConfig& c) {
    LrSchedule s;
    s.kind = c.schedule == "cosine" ? LrSchedule::WarmupCosine
             : c.schedule == "wsd"  ? LrSchedule::WarmupStableDecay
                                    : LrSchedule::Constant;
    s.peak_lr = float(c.lr);
    s.warmup_steps = c.warmup_steps;
    s.total_steps = c.schedule_steps;
    s.min_lr_ratio = float(c.min_lr_ratio);
    s.decay_fraction = float(c.decay_fraction);
    s.validate();
    return s;
}

// Trainable flags per arena entry and optimizer spans for the stage: stage.trainable globs select
// what trains (everything else frozen), mixer parameters get stage.mixer_lr_scale.
std::vector<ParamRule> stage_rules(const TrainConfig& c) {
    std::vector<ParamRule> rules;
    const float mixer = float(c.mixer_lr_scale);
    auto add = [&](const std::string& pattern, bool trainable, float lr) {
        ParamRule r;
        r.pattern = pattern;
        r.trainable = trainable;
        if (lr != 1.0f) r.lr_scale = lr;
        rules.push_back(r);
    };
    const std::vector<std::string> mixers = {"*.self_attn.*", "*.linear_attn.*", "*.fusion.*"};
    if (c.trainable.empty()) {
        for (const auto& m : mixers) add(m, true, mixer);
        return rules;
    }
    for (const std::string& pattern : c.trainable) {
        bool is_mixer = false;
        for (const auto& m : mixers) is_mixer |= pattern.find(m.substr(1, m.size() - 2)) != std::string::npos;
        add(pattern, true, is_mixer ? mixer : 1.0f);
    }
    add("*", false, 1.0f);
    return rules;
}

std::unique_ptr<TextEncoder> make_encoder(const TrainConfig& c, std::unique_ptr<Tokenizer>& bpe_holder) {
    if (c.tokenizer == "byte") return std::make_unique<ByteEncoder>();
    std::optional<TokenizerVocab> vocab = load_vocab(c.tokenizer);  // no weights needed
    HYDRA_CHECK(vocab.has_value(), "data.tokenizer: {} has no tokenizer", c.tokenizer);
    bpe_holder = std::make_unique<Tokenizer>(*vocab, c.tokenizer);
    return std::make_unique<BpeEncoder>(*bpe_holder);
}

// data.shard_dir, else the cache's directory for the tokenizer; (re)built from data.sources when its
// index does not match, then opened and checked against the encoder.
TokenShards build_and_open_shards(const TrainConfig& cfg, const std::string& prose_dir,
                                  const TextEncoder& encoder) {
    if (!cfg.corpus.empty()) return open_token_shards(cfg.corpus, &encoder);  // built by `hydra corpus`
    const std::string shard_dir =
        cfg.shard_dir.empty()
            ? default_cache("shards/" + fmt::format("{}-{:x}", encoder.name() == "byte" ? "byte" : "bpe",
                                                    std::hash<std::string>{}(encoder.name())))
            : cfg.shard_dir;
    build_token_shards(expand_sources(cfg, prose_dir), encoder, shard_dir, 1 << 22, cfg.heldout_fraction,
                       cfg.data_seed);
    return open_token_shards(shard_dir, &encoder);
}

// The corpus's sources as training spans weighted by data.mix (or the corpus's own mix).
std::vector<WeightedSpan> corpus_train_spans(const TrainConfig& cfg) {
    const CorpusManifest m = read_corpus_manifest(cfg.corpus);
    const std::vector<double> w =
        cfg.mix.empty() ? default_mix_weights(cfg.corpus, m) : read_mix_weights(cfg.mix, m);
    std::vector<WeightedSpan> spans;
    for (size_t i = 0; i < m.sources.size(); ++i)
        spans.push_back({m.sources[i].train_begin, m.sources[i].train_end, w[i]});
    return spans;
}

double heldout_loss(const TokenSplit& split, const TrainConfig& c, TrainEngine& engine) {
    HeldoutIterator it(split, c.seq_len, c.eval_batches * c.batch_size);
    std::vector<int32_t> in, tg;
    double sum = 0;
    int64_t count = 0;
    while (int64_t rows = it.next_batch(c.batch_size, in, tg)) {
        const auto [s, n] = engine.eval_ce(TrainBatch{in.data(), tg.data(), rows, c.seq_len});
        sum += s;
        count += n;
    }
    return count ? sum / double(count) : NAN;
}

void write_loss_plot(const std::string& path, const std::vector<double>& steps,
                     const std::vector<double>& losses, const std::vector<double>& eval_steps,
                     const std::vector<double>& eval_losses, const TrainConfig& c) {
    std::vector<Series> series = {{"train loss", steps, losses}};
    if (!eval_steps.empty()) series.push_back({"held-out loss", eval_steps, eval_losses});
    LinePlotOptions o;
    o.title = "hydra train: " + c.stage + " loss";
    o.x_label = "step";
    o.y_label = c.stage == "align"      ? "layer error / layer update (mean over layers)"
                : c.stage == "pretrain" ? "cross-entropy (nats/token)"
                                        : fmt::format("{} CE + {} KL (nats/token)", c.ce_weight, c.kl_weight);
    if (!eval_steps.empty()) o.y_label += "; held-out: CE";
    // The plot is a side product of the run: the checkpoint and log.jsonl are written already, so a
    // plot that cannot be drawn (no PNG driver, ...) is reported, not made the run's failure.
    try {
        write_line_plot(path, series, o);
    } catch (const Error& e) {
        fmt::print(stderr, "warning: no loss plot: {}\n", e.what());
    }
}

}  // namespace

TokenShards open_training_shards(const TrainConfig& config) {
    std::unique_ptr<Tokenizer> bpe;
    const std::unique_ptr<TextEncoder> encoder = make_encoder(config, bpe);
    return build_and_open_shards(config, config.prose_dir.empty() ? default_cache("prose") : config.prose_dir,
                                 *encoder);
}

std::vector<std::string> training_source_files(const TrainConfig& config) {
    return expand_sources(config, config.prose_dir.empty() ? default_cache("prose") : config.prose_dir);
}

TrainRunResult run_training(TrainConfig cfg, const std::string& out_arg,
                            const std::optional<std::string>& resume_arg,
                            std::optional<int64_t> steps_override,
                            const std::function<void(const StepLog&)>& on_step,
                            const DataLoader::Generator& synthetic, const TrainEngineFactory& engine_factory,
                            Collective* dist) {
    // Data parallel: rank 0 owns every file (claims the output, writes the log, checkpoints and plot); the
    // other ranks read what rank 0 prepared and take part in every collective step, sync and stop decision.
    const bool root = !dist || dist->rank() == 0;
    const int rank = dist ? dist->rank() : 0, world = dist ? dist->world_size() : 1;
    HYDRA_CHECK(!dist || engine_factory, "data-parallel training needs the CUDA engine (--device cuda)");
    // The output directory, for the whole run: normalised ("runs/x/" = "runs/x"), locked against a
    // second writer, a save cut by a crash recovered, and refused unless it is absent, empty or a
    // hydra checkpoint (io/atomic_dir.h; `hydra train --force` clears it before calling this).
    std::optional<ClaimedDir> out_claim;
    if (root) {
        out_claim.emplace(claim_output_dir(out_arg, checkpoint_dir_kind(), false));
        for (const std::string& note : out_claim->notes) fmt::print(stderr, "hydra: {}\n", note);
    }
    const fs::path out_path = root ? out_claim->path : normalize_dir_path(out_arg, "--out");
    const std::string out_dir = out_path.string();
    std::optional<std::string> resume_dir;
    DirLock resume_lock;  // a resumed directory other than the output is read under its lock too
    if (resume_arg) {
        const fs::path p = normalize_dir_path(*resume_arg, "--resume");
        if (p != out_path && root) {
            resume_lock = DirLock::acquire(p);
            for (const std::string& note : recover_directory(p, &checkpoint_dir_kind()))
                fmt::print(stderr, "hydra: {}\n", note);
        }
        resume_dir = p.string();
    }
    std::optional<nlohmann::json> resumed_section;
    if (resume_dir) {  // the checkpoint's own config wins, so a resumed run is the same run
        resumed_section = read_checkpoint_config(*resume_dir).value("hydra", nlohmann::json::object());
        HYDRA_CHECK(resumed_section->contains("train_config"),
                    "{}/config.json: no hydra.train_config: not a `hydra train` checkpoint", *resume_dir);
        cfg = TrainConfig();
        cfg.apply(resumed_section->at("train_config"), *resume_dir + "/config.json");
    }
    if (dist) dist->barrier();  // rank 0 has recovered the directories the others read
    if (steps_override) cfg.steps = *steps_override;
    cfg.validate();
    HYDRA_CHECK(
        cfg.batch_size % world == 0,
        "train.batch_size = {} must be a multiple of the number of GPUs ({}): every rank takes the same "
        "number of rows of the global batch",
        cfg.batch_size, world);
    set_num_threads(cfg.threads);

    // Data.
    const std::string prose_dir = cfg.prose_dir.empty() ? default_cache("prose") : cfg.prose_dir;
    std::unique_ptr<Tokenizer> bpe;
    std::unique_ptr<TextEncoder> encoder = make_encoder(cfg, bpe);
    // rank 0 builds the shards (or finds them current), then the others find them current
    std::optional<TokenShards> opened;
    if (root) opened.emplace(build_and_open_shards(cfg, prose_dir, *encoder));
    if (dist) dist->barrier();
    if (!root) opened.emplace(build_and_open_shards(cfg, prose_dir, *encoder));
    TokenShards shards = std::move(*opened);
    HYDRA_CHECK(cfg.mix.empty() || !cfg.corpus.empty(),
                "data.mix needs data.corpus (a `hydra corpus` directory)");
    DataLoader loader = cfg.corpus.empty()
                            ? DataLoader(shards.train, cfg.seq_len, cfg.data_seed)
                            : DataLoader(shards.train, corpus_train_spans(cfg), cfg.seq_len, cfg.data_seed);
    HYDRA_CHECK(cfg.synthetic_fraction == 0 || bool(synthetic),
                "data.synthetic_fraction = {} needs the synthetic task generator (run through `hydra train`, "
                "`hydra distill` or `hydra pipeline`)",
                cfg.synthetic_fraction);

    // Model: from scratch (pretrain), from stage.init (transfer stages) or as the checkpoint saved it.
    std::unique_ptr<LlamaModel> model_holder;
    if (resume_dir) {
        const nlohmann::json saved = read_checkpoint_config(*resume_dir);
        const std::string where = *resume_dir + "/config.json";
        const ModelConfig mc = parse_hf_config(saved.dump(), where);
        check_weights_cover_config(mc, SafetensorsShards::open_dir(*resume_dir), where);  // before allocating
        const HybridPlan plan =
            HybridPlan::from_json(saved["hydra"].value("plan", nlohmann::json::object({{"kind", "teacher"}})),
                                  mc, where + ": hydra.plan");
        model_holder = std::make_unique<LlamaModel>(mc, &plan);
    } else if (cfg.stage != "pretrain") {
        LoadedModel init = load_model(cfg.init);
        model_holder = std::move(init.model);
    } else {
        model_holder =
            std::make_unique<LlamaModel>(cfg.model_config(encoder->vocab_size(), encoder->eos_id()));
    }
    LlamaModel& model = *model_holder;
    HYDRA_CHECK(model.config().vocab_size >= encoder->vocab_size(),
                "stage.init: the model's vocabulary ({}) is smaller than the data tokenizer's ({}); set "
                "data.tokenizer "
                "to the model's tokenizer",
                model.config().vocab_size, encoder->vocab_size());
    std::unique_ptr<LlamaModel> teacher;
    if (!cfg.teacher.empty()) {
        LoadedModel t = load_model(cfg.teacher);
        teacher = std::move(t.model);
        HYDRA_CHECK(teacher->config().vocab_size == model.config().vocab_size,
                    "stage.teacher: vocabulary {} differs from the student's {}",
                    teacher->config().vocab_size, model.config().vocab_size);
        HYDRA_CHECK(teacher->config().num_layers == model.config().num_layers || cfg.stage != "align",
                    "stage.teacher: align needs the same number of layers as the student ({} vs {})",
                    teacher->config().num_layers, model.config().num_layers);
    }
    const int64_t n = model.params().numel();
    AdamWConfig ac;
    ac.lr = float(cfg.lr);
    ac.beta1 = float(cfg.beta1);
    ac.beta2 = float(cfg.beta2);
    ac.eps = float(cfg.eps);
    ac.weight_decay = float(cfg.weight_decay);
    AdamW optimizer(ac, n);
    const std::vector<ParamSpan> spans = build_param_spans(
        model.params().entries(), cfg.stage == "pretrain" ? std::vector<ParamRule>() : stage_rules(cfg));
    const LrSchedule schedule = schedule_for(cfg);
    TrainState state;
    Rng rng(cfg.seed);
    if (resume_dir) {
        LoadedCheckpoint ck = load_checkpoint(*resume_dir, model, optimizer);
        state = ck.state;
        rng.set_state(state.rng);
        loader.restore(DataCursor::from_json(state.data_cursor, *resume_dir + "/state.json"));
    } else if (cfg.stage == "pretrain") {
        init_weights_normal(model, cfg.init_std, rng);
    }
    // After restore(): the mixer is not part of the cursor (its RNG state is).
    if (cfg.synthetic_fraction > 0) loader.set_mixer(synthetic, cfg.synthetic_fraction);
    // The step (train_engine.h): on the CPU, or on the device of an injected factory, starting from the
    // weights and optimizer state above.
    const std::unique_ptr<TrainEngine> engine =
        engine_factory
            ? engine_factory(TrainEngineSetup{&cfg, &model, teacher.get(), &spans, &optimizer, dist})
            : make_cpu_train_engine(cfg, model, teacher.get(), spans, optimizer);
    if (!engine_factory && root) {
        // A batch past the machine's memory is otherwise killed by the kernel without a word.
        const CpuStepMemory need = estimate_cpu_step_memory(
            model.config(), model.plan(), model.params().numel(), teacher ? teacher->params().numel() : 0,
            cfg.batch_size, cfg.seq_len, cfg.recompute);
        const std::string warning =
            cpu_step_memory_warning(need, available_memory_bytes(), cfg.batch_size, cfg.seq_len);
        if (!warning.empty()) fmt::print(stderr, "warning: {}\n", warning);
    }
    nlohmann::json section;
    section["train_config"] = cfg.to_json();
    section["tokenizer"] = encoder->name();
    section["plan"] = model.plan().to_json();

    if (root) fs::create_directories(out_dir);
    const std::string log_path = out_dir + "/log.jsonl";
    // The log lives in the checkpoint directory, which every save replaces atomically, so the lines
    // are kept in memory and written with each checkpoint; between saves they are also appended to
    // the live file. A resumed run keeps the checkpoint's lines up to its step.
    std::vector<std::string> log_lines;
    std::vector<double> curve_steps, curve_losses, eval_steps, eval_losses;
    if (resume_dir) {
        const fs::path prev_path = fs::path(*resume_dir) / "log.jsonl";
        std::ifstream prev(prev_path.string());
        std::string line;
        bool has_state_step = state.step == 0;
        int64_t log_last_step = 0;
        const bool has_log = prev.good();
        while (std::getline(prev, line)) {
            const std::optional<nlohmann::json> parsed = try_parse_json_bounded(line);
            if (!parsed || !parsed->is_object() || !parsed->contains("step") ||
                !(*parsed)["step"].is_number_integer())
                continue;
            const nlohmann::json& j = *parsed;
            log_last_step = std::max(log_last_step, j["step"].get<int64_t>());
            if (j["step"].get<int64_t>() > state.step) continue;
            has_state_step |= j["step"].get<int64_t>() == state.step;
            log_lines.push_back(line);
            if (j.contains("loss") && j["loss"].is_number()) {
                curve_steps.push_back(j["step"].get<double>());
                curve_losses.push_back(j["loss"].get<double>());
            }
            if (j.contains("heldout_loss")) {
                eval_steps.push_back(j["step"].get<double>());
                eval_losses.push_back(j["heldout_loss"].get<double>());
            }
        }
        // The log is saved with every checkpoint, so it holds the line of the checkpoint's step.
        HYDRA_CHECK(
            !has_log || has_state_step,
            "{}/state.json: step {} does not match {}, which has no line for that step (last step {}); the "
            "checkpoint is corrupt",
            *resume_dir, state.step, prev_path.string(), log_last_step);
        HYDRA_CHECK(state.step <= cfg.steps,
                    "{}: the checkpoint is already at step {}; run.steps = {} would not train (give --steps "
                    "above {})",
                    *resume_dir, state.step, cfg.steps, state.step);
    }
    auto joined_log = [&] {
        std::string text;
        for (const auto& l : log_lines) text += l + "\n";
        return text;
    };
    std::ofstream log;  // rank 0 only
    // The live file is the checkpoint's own log.jsonl, continued in place. Only at the start is it
    // rewritten (to drop lines past the resumed step), by a rename, so a kill never leaves a
    // checkpoint with a cut log; after a save it already holds exactly the saved lines.
    auto reopen_log = [&](bool rewrite) {
        if (!root) return;
        log.close();
        log.clear();
        if (rewrite) {
            const std::string part = log_path + ".part";
            {
                std::ofstream out(part, std::ios::trunc | std::ios::binary);
                out << joined_log();
                out.flush();
                HYDRA_CHECK(out.good(), "{}: cannot write the log", part);
            }
            HYDRA_CHECK(std::rename(part.c_str(), log_path.c_str()) == 0, "{}: cannot write the log",
                        log_path);
        }
        log.open(log_path, std::ios::app);
        HYDRA_CHECK(log.good(), "{}: cannot write the log", log_path);
    };
    reopen_log(true);

    // The step of the checkpoint in out_dir that this run wrote or resumed from (errors name only
    // checkpoints that exist).
    std::optional<int64_t> saved_step;
    if (resume_dir && *resume_dir == out_dir) saved_step = state.step;
    auto save = [&](const std::string& dir) {
        state.rng = rng.state();
        state.data_cursor = loader.cursor().to_json();
        if (root) log.close();
        engine->sync_to_host(model, optimizer);  // collective when data parallel
        if (!root) return;
        std::map<std::string, std::string> files = {{"log.jsonl", joined_log()}};
        if (bpe) {  // so the checkpoint loads as a model everywhere (eval, generate, the next stage)
            files["tokenizer.json"] = vocab_to_tokenizer_json(bpe->vocab());
            files["tokenizer_config.json"] = vocab_to_tokenizer_config_json(bpe->vocab());
        }
        save_checkpoint(dir, model, optimizer, state, section, files);
        saved_step = state.step;
        reopen_log(false);
    };

    g_stop_signal = 0;
    auto old_int = std::signal(SIGINT, on_signal);
    auto old_term = std::signal(SIGTERM, on_signal);
    std::vector<int32_t> inputs, targets;
    TrainRunResult result;
    result.out_dir = out_dir;
    while (state.step < cfg.steps) {
        const auto t0 = std::chrono::steady_clock::now();
        // this rank's rows r, r + W, ... of the global batch (the whole batch with one process)
        loader.next_batch_shard(cfg.batch_size, rank, world, inputs, targets);
        TrainBatch batch{inputs.data(), targets.data(), DataLoader::rows_of_rank(cfg.batch_size, rank, world),
                         cfg.seq_len};
        if (cfg.ce_from_position > 0)
            ignore_targets_before(targets.data(), batch.batch, batch.seq_len, cfg.ce_from_position);
        StepLog sl;
        sl.total_steps = cfg.steps;
        sl.lr = schedule.at(state.step);
        // The engine clips and takes the optimizer step itself when the step is finite.
        const EngineStepResult r = engine->step(batch, float(sl.lr), cfg.grad_clip);
        if (!r.finite) {
            state.bad_steps_in_row++;
            sl.skipped = true;
            sl.loss = NAN;
            if (root)
                fmt::print(stderr,
                           "\nstep {}: non-finite loss or gradient, step skipped ({} in a row, limit {})\n",
                           state.step + 1, state.bad_steps_in_row, cfg.max_bad_steps);
            if (state.bad_steps_in_row >= cfg.max_bad_steps) {
                std::signal(SIGINT, old_int);
                std::signal(SIGTERM, old_term);
                fail(
                    "training stopped: {} consecutive steps had a non-finite loss or gradient ({}); lower "
                    "optim.lr or raise optim.grad_clip",
                    state.bad_steps_in_row,
                    saved_step
                        ? fmt::format("the checkpoint of step {} in {} is intact", *saved_step, out_dir)
                        : fmt::format("no checkpoint of this run was saved in {}", out_dir));
            }
        } else {
            state.bad_steps_in_row = 0;
            sl.grad_norm = r.grad_norm;
            sl.loss = r.loss;
            state.last_loss = r.loss;
        }
        state.step++;
        sl.step = state.step;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        sl.tokens_per_second = double(cfg.batch_size * cfg.seq_len) / secs;
        if (state.step % cfg.eval_every == 0 || state.step == cfg.steps) {
            sl.heldout_loss = heldout_loss(shards.heldout, cfg, *engine);
            eval_steps.push_back(double(state.step));
            eval_losses.push_back(*sl.heldout_loss);
            result.final_heldout_loss = sl.heldout_loss;
        }
        nlohmann::json line = {{"step", sl.step},
                               {"lr", sl.lr},
                               {"grad_norm", sl.grad_norm},
                               {"tokens_per_s", sl.tokens_per_second},
                               {"skipped", sl.skipped}};
        if (cfg.stage != "pretrain") {
            line["stage"] = cfg.stage;
            if (std::isfinite(r.ce)) line["ce"] = r.ce;
            if (cfg.kl_weight > 0 && std::isfinite(r.kl)) line["kl"] = r.kl;
        }
        line["loss"] = sl.skipped ? nlohmann::json(nullptr) : nlohmann::json(sl.loss);
        if (sl.heldout_loss) line["heldout_loss"] = *sl.heldout_loss;
        log_lines.push_back(line.dump());
        if (root) {
            log << log_lines.back() << "\n";
            log.flush();
        }
        if (!sl.skipped) {
            curve_steps.push_back(double(sl.step));
            curve_losses.push_back(sl.loss);
        }
        if (on_step) on_step(sl);
        if (state.step % cfg.save_every == 0 || state.step == cfg.steps) save(out_dir);
        // every rank stops at the same step (a signal may reach the ranks at different steps)
        const bool stop = dist ? dist->any(g_stop_signal != 0) : g_stop_signal != 0;
        if (stop) {
            save(out_dir);
            result.interrupted = true;
            break;
        }
    }
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
    if (root) log.flush();
    if (root && !curve_steps.empty())
        write_loss_plot(out_dir + "/loss_curve.png", curve_steps, curve_losses, eval_steps, eval_losses, cfg);
    result.final_step = state.step;
    result.final_loss = state.last_loss;
    if (engine_factory) result.engine_summary = engine->summary();
    return result;
}

}  // namespace hydra
