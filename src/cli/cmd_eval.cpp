// `hydra eval MODEL... --suite ruler|passkey|mqar|all [--tasks a,b] --lengths 1k,2k,4k --samples N
// --out results.json`: synthetic long-context tasks (RULER-style) with greedy decoding through each
// model's (hybrid) cache; writes results.json, results.csv next to it and scores.png comparing models.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/gpu_generator.h"
#include "cli/model_load_report.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "eval/eval_runner.h"
#include "eval/results_io.h"
#include "eval/task_registry.h"
#include "eval/tasks_file.h"
#include "model/head_ablation.h"
#include "model/plan_builders.h"

namespace hydra::cli {

namespace fs = std::filesystem;

namespace {
struct EvalOptions {
    std::vector<std::string> models;
    std::string suite = "ruler";
    std::string tasks;
    std::string lengths = "1k";
    int64_t samples = 5;
    uint64_t seed = 0;
    std::string out = "results.json";
    std::string format = "auto", style = "ruler";
    int number_digits = 7, passkey_digits = 5, mqar_queries = 4, mqar_value_digits = 3;
    bool no_early_stop = false;
    int threads = 0;
    std::string device = "cpu";
    std::string ablate;  // head zero-ablation: top:N | random:N:SEED | L:H,L:H,... (model/head_ablation.h)
    std::string scores;  // scores.json for --ablate top:N
    std::string tasks_file;  // user rows (eval/tasks_file.h) instead of the built-in tasks
    int64_t bootstrap = 1000;
};

}  // namespace

void register_eval(CLI::App& app) {
    auto* o = new EvalOptions;
    auto* cmd = app.add_subcommand(
        "eval", "Synthetic long-context tasks (RULER, passkey, MQAR) on one or more models");
    cmd->add_option("MODEL", o->models,
                    "models: .gguf files or model directories (default: the default model)");
    cmd->add_option("--suite", o->suite, "ruler | passkey | mqar | all")->capture_default_str();
    auto* tasks_opt = cmd->add_option("--tasks", o->tasks, "comma list of tasks (overrides --suite)");
    auto* lengths_opt =
        cmd->add_option("--lengths", o->lengths, "prompt lengths in tokens, e.g. 1k,2k,4k (k = 1024)")
            ->capture_default_str();
    auto* samples_opt = cmd->add_option("--samples", o->samples, "samples per task per length")
                            ->capture_default_str()
                            ->check(CLI::Range(int64_t(1), int64_t(100000)));
    cmd->add_option(
           "--tasks-file", o->tasks_file,
           "JSONL of {\"prompt\": ..., \"answer\": str | [str, ...], \"length\": opt, \"id\": opt} rows, "
           "scored like the built-in tasks (instead of --suite/--tasks)")
        ->excludes(tasks_opt)
        ->excludes(lengths_opt)
        ->excludes(samples_opt);
    cmd->add_option("--bootstrap", o->bootstrap, "resamples of the 95% bootstrap intervals")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(1), int64_t(1000000)));
    cmd->add_option("--seed", o->seed, "sample seed")->capture_default_str();
    cmd->add_option("--out", o->out, "results JSON (results.csv and scores.png are written next to it)")
        ->capture_default_str();
    cmd->add_option("--prompt-format", o->format, "auto | raw | chatml")->capture_default_str();
    cmd->add_option("--prompt-style", o->style,
                    "ruler | compact (short prompts for tiny byte-level teachers)")
        ->capture_default_str();
    cmd->add_option("--number-digits", o->number_digits, "digits of NIAH number values")
        ->capture_default_str()
        ->check(CLI::Range(1, 18));
    cmd->add_option("--passkey-digits", o->passkey_digits, "digits of the pass key")
        ->capture_default_str()
        ->check(CLI::Range(1, 18));
    cmd->add_option("--mqar-queries", o->mqar_queries, "keys asked per MQAR sample")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    cmd->add_option("--mqar-value-digits", o->mqar_value_digits, "digits of MQAR values")
        ->capture_default_str()
        ->check(CLI::Range(1, 18));
    cmd->add_flag("--no-early-stop", o->no_early_stop,
                  "decode the full budget even once every answer is found");
    cmd->add_option(
        "--ablate", o->ablate,
        "zero-ablate query heads before evaluating: top:N (needs --scores), random:N:SEED, or L:H,L:H,...");
    cmd->add_option("--scores", o->scores, "scores.json of hydra score-heads (for --ablate top:N)");
    cmd->add_option("--device", o->device, "cpu | cuda (the GPU inference path of src/gpu)")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "cuda"}));
    add_threads_option(*cmd, o->threads);
    cmd->callback([o] {
        apply_threads(o->threads);
        if (o->models.empty()) o->models.push_back(default_model_path());
        EvalRunInfo info;
        info.bootstrap.resamples = o->bootstrap;
        std::vector<UserTaskRow> rows;
        std::string file_task;
        if (!o->tasks_file.empty()) {
            // Every row is checked before any model loads.
            rows = read_tasks_file(o->tasks_file);
            file_task = fs::path(o->tasks_file).stem().string();
            info.suite = "tasks-file";
            info.tasks_file = o->tasks_file;
            info.settings.tasks = {file_task};
            info.settings.samples = int64_t(rows.size());
        } else {
            info.suite = o->tasks.empty() ? o->suite : "custom";
            info.settings.tasks = o->tasks.empty() ? suite_tasks(o->suite) : parse_task_list(o->tasks);
            info.settings.lengths = parse_lengths(o->lengths);
            info.settings.samples = o->samples;
        }
        info.settings.seed = o->seed;
        info.settings.stop_at_full_score = !o->no_early_stop;
        info.prompt_format = o->format;
        info.prompt_style = o->style;
        info.device = o->device;
        TaskOptions topt;
        topt.format = parse_prompt_format(o->format);
        topt.style = parse_prompt_style(o->style);
        topt.number_digits = o->number_digits;
        topt.passkey_digits = o->passkey_digits;
        topt.mqar_queries = o->mqar_queries;
        topt.mqar_value_digits = o->mqar_value_digits;
        HYDRA_CHECK(fs::path(o->out).extension() == ".json", "--out {}: expected a .json path", o->out);
        const fs::path dir = fs::path(o->out).parent_path();
        HYDRA_CHECK(dir.empty() || fs::is_directory(dir), "--out {}: directory {} does not exist", o->out,
                    dir.string());
        for (const std::string& m : o->models)
            HYDRA_CHECK(fs::exists(m), "{}: no such model file or directory", m);
        if (o->device == "cuda") require_cuda_build("--device cuda");  // before any model is loaded

        std::vector<ModelEvalResult> results;
        for (const std::string& path : o->models) {
            LoadedModel m = load_model_reported(path);
            std::string name = path;
            if (!o->ablate.empty()) {
                const ModelConfig& mc = m.model->config();
                std::optional<HeadScoreTable> table;
                if (!o->scores.empty()) table = load_head_scores(o->scores, mc);
                const std::vector<HeadRef> heads =
                    parse_ablation(o->ablate, mc.num_layers, mc.num_heads, table ? &table->heads : nullptr);
                zero_ablate_heads(*m.model, heads);
                std::string list;
                for (const auto& [l, h] : heads)
                    list += fmt::format("{}L{}H{}", list.empty() ? "" : " ", l, h);
                fmt::print(stderr, "ablated {} heads ({}): {}\n", heads.size(), o->ablate, list);
                name = fmt::format("{} [ablate {}]", path, o->ablate);
            }
            auto ctx = std::make_shared<TaskContext>();
            ctx->text = model_text_for(path, m.vocab, m.model->config().eos_token_ids);
            ctx->options = topt;
            const int64_t max_pos = m.model->config().max_position_embeddings;
            if (!rows.empty()) {
                const int64_t context = max_pos > 0 ? max_pos : 8192;
                int64_t need = 1;
                for (const UserTaskRow& row : rows)
                    need = std::max<int64_t>(
                        need, int64_t(encode_prompt(*ctx, PromptText{row.prompt, "", {}, 0}).size()) +
                                  row_max_new_tokens(*ctx, row));
                fmt::print(stderr, "eval {}: {} rows of {}, tokenizer {}, prompt {}\n", path, rows.size(),
                           o->tasks_file, ctx->text.name(), ctx->chat() ? "chatml" : "raw");
                ProgressBar bar("eval", int64_t(rows.size()), "row");
                const GenerateFn generate =
                    o->device == "cuda" ? gpu_generator(*m.model, ctx->text, std::min(context, need), context)
                                        : GenerateFn{};
                ModelEvalResult r = run_tasks_file(
                    name, *m.model, *ctx, rows, file_task, o->tasks_file, context, info.settings,
                    [&](int64_t done, int64_t, const std::string& st) { bar.update(done, st); }, generate);
                aggregate(r, info.bootstrap);
                bar.finish(fmt::format("overall {:.1f}", r.overall));
                for (const auto& [len, v] : r.length_scores)
                    if (std::find(info.settings.lengths.begin(), info.settings.lengths.end(), len) ==
                        info.settings.lengths.end())
                        info.settings.lengths.push_back(len);
                std::sort(info.settings.lengths.begin(), info.settings.lengths.end());
                results.push_back(std::move(r));
                write_results_json(o->out, info, results);
                continue;
            }
            // A length up to the context is fine: run_eval shortens a prompt that would leave no room
            // for the answer to context - budget tokens, as RULER does.
            for (int64_t len : info.settings.lengths)
                HYDRA_CHECK(max_pos <= 0 || len <= max_pos,
                            "--lengths: {} tokens is beyond {}'s context of {} positions", len, path,
                            max_pos);
            std::vector<std::unique_ptr<TaskGenerator>> gens;
            std::vector<const TaskGenerator*> ptrs;
            for (const std::string& t : info.settings.tasks) {
                gens.push_back(make_task(t, ctx));
                ptrs.push_back(gens.back().get());
            }
            fmt::print(stderr, "eval {}: {} tasks x {} lengths x {} samples, tokenizer {}, prompt {}\n", path,
                       ptrs.size(), info.settings.lengths.size(), o->samples, ctx->text.name(),
                       ctx->chat() ? "chatml" : "raw");
            ProgressBar bar("eval", int64_t(ptrs.size() * info.settings.lengths.size()) * o->samples,
                            "sample");
            GenerateFn generate;
            if (o->device == "cuda") {
                // one cache for every sample: the longest prompt plus room for any task's decoding budget
                // (at most 128 tokens today; the generator refuses clearly should one need more)
                const int64_t context = max_pos > 0 ? max_pos : 8192;
                const int64_t longest =
                    *std::max_element(info.settings.lengths.begin(), info.settings.lengths.end());
                generate = gpu_generator(*m.model, ctx->text, std::min(context, longest + 1024),
                                         info.settings.context_limit);
            }
            ModelEvalResult r = run_eval(
                name, *m.model, ptrs, ctx->text, info.settings,
                [&](int64_t done, int64_t, const std::string& st) { bar.update(done, st); }, generate);
            aggregate(r, info.bootstrap);
            bar.finish(fmt::format("overall {:.1f}", r.overall));
            results.push_back(std::move(r));
            write_results_json(o->out, info, results);  // after every model, so a long run keeps what it has
        }
        const fs::path csv = fs::path(o->out).replace_extension(".csv");
        const fs::path png = (dir.empty() ? fs::path(".") : dir) / "scores.png";
        write_results_csv(csv.string(), results);
        // The figure is a side product: the scores are already saved, so a machine without PLplot's PNG
        // driver gets a warning, not a failed run.
        std::string wrote = fmt::format("{}, {}", o->out, csv.string());
        try {
            write_score_plot(png.string(), results);
            wrote += ", " + png.string();
        } catch (const Error& e) {
            fmt::print(stderr, "warning: no figure {}: {}\n", png.string(), e.what());
        }
        for (const ModelEvalResult& r : results) fmt::print("{}\n", results_table(r, info));
        fmt::print("wrote {}\n", wrote);
    });
}

}  // namespace hydra::cli
