// Pipeline report writer (see pipeline_report.h).
#include "pipeline/pipeline_report.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "eval/bootstrap.h"
#include "eval/pareto.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "model/model_loader.h"
#include "pipeline/heldout_tables.h"
#include "report/line_plot.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string num(double v, int digits = 3) { return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : "n/a"; }

// Loss per step of one stage checkpoint's log.jsonl.
Series stage_series(const fs::path& log, const std::string& label) {
    Series s;
    s.label = label;
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
        const std::optional<json> parsed = try_parse_json_bounded(line);
        if (!parsed || !parsed->is_object()) continue;
        const json& j = *parsed;
        if (!j.contains("loss") || !j["loss"].is_number() || !j.contains("step") || !j["step"].is_number())
            continue;
        s.x.push_back(j["step"].get<double>());
        s.y.push_back(j["loss"].get<double>());
    }
    return s;
}

}  // namespace

ReportOutput write_pipeline_report(const ReportInputs& in) {
    const PipelineConfig& cfg = *in.config;
    const fs::path out(in.out_dir);
    std::string md;
    const std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    md += fmt::format("# HydraHead pipeline report: {}\n\n{}; output directory `{}`.\n\n", cfg.name, date, in.out_dir);
    md += fmt::format("Teacher: `{}`. Every variant is converted from it and gets the same three stages "
                      "(align {} steps x {} x {} tokens, distill {} steps x {} x {}, long context {} steps x {} x {}), "
                      "so the same token budget: {:.2f}M + {:.2f}M + {:.2f}M tokens. Training and evaluation ran on "
                      "the {}.\n\n",
                      in.teacher_path, cfg.align.steps, cfg.align.batch_size, cfg.align.seq_len, cfg.distill.steps,
                      cfg.distill.batch_size, cfg.distill.seq_len, cfg.longctx.steps, cfg.longctx.batch_size,
                      cfg.longctx.seq_len, 1e-6 * double(cfg.align.steps * cfg.align.batch_size * cfg.align.seq_len),
                      1e-6 * double(cfg.distill.steps * cfg.distill.batch_size * cfg.distill.seq_len),
                      1e-6 * double(cfg.longctx.steps * cfg.longctx.batch_size * cfg.longctx.seq_len),
                      cfg.device == "cuda" ? "GPU (CUDA)" : "CPU");
    // Variants that differ from that: fewer stages (baselines such as the teacher fine-tuned at length),
    // or other positions for their FA heads.
    const std::vector<std::string> all_stages = {"align", "distill", "longctx"};
    for (const PipelineVariant& v : cfg.variants) {
        std::vector<std::string> notes;
        if (v.stages != all_stages) {
            std::string st;
            for (const std::string& x : v.stages) st += (st.empty() ? "" : ", ") + x;
            notes.push_back(fmt::format("stages: {}", st.empty() ? "none (training-free)" : st));
        }
        if (!v.rope_scaling.empty())
            notes.push_back(fmt::format("FA heads' RoPE scaling {}", v.rope_scaling));
        if (v.nope) notes.push_back("FA heads without RoPE (NoPE)");
        if (notes.empty()) continue;
        std::string line;
        for (const std::string& n : notes) line += (line.empty() ? "" : "; ") + n;
        md += fmt::format("- `{}`: {}.\n", v.name, line);
    }
    md += "\n";

    // Headline table: every measured number with its 95% bootstrap interval.
    const EvalRunInfo fallback;
    const EvalRunInfo& info = in.info ? *in.info : fallback;
    auto metric = [](const json& a, const char* key, int digits) {
        const json v = a.value(key, json());
        return format_with_interval(v.is_number() ? v.get<double>() : NAN,
                                    interval_from_json(a.value(std::string(key) + "_ci", json())), digits);
    };
    std::string table =
        "| model | plan | KV bytes/token (bf16) | state bytes | held-out ppl | ppl / teacher | "
        "top-1 agree | KL(t||s) |";
    for (int64_t len : cfg.eval_lengths) table += fmt::format(" score@{} |", len);
    table += " mean |";
    for (const auto& [group, tasks] : info.groups) table += fmt::format(" {} mean |", group);
    table += "\n|---|---|---|---|---|---|---|---|";
    for (size_t i = 0; i < cfg.eval_lengths.size() + 1 + info.groups.size(); ++i) table += "---|";
    table += "\n";
    int64_t heldout_count = 0;
    std::string heldout_from;
    std::vector<ParetoPoint> pareto;
    for (size_t i = 0; i < in.models.size(); ++i) {
        const auto& [name, path] = in.models[i];
        const ModelEvalResult& r = (*in.results)[i];
        LoadedModel m = load_model(path);
        const HybridPlan& plan = m.model->plan();
        const ModelConfig& c = m.model->config();
        const json a = in.agreement.value(name, json::object());
        heldout_count = std::max(heldout_count, a.value("tokens", int64_t(0)));
        if (a.contains("source") && a["source"].is_string()) heldout_from = a["source"].get<std::string>();
        table += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |", name, plan.ratio_summary(),
                             plan.kv_bytes_per_token(c, 2), plan.state_bytes(c), metric(a, "ppl", 2),
                             metric(a, "ppl_ratio", 3), metric(a, "top1_agreement", 3), metric(a, "kl", 3));
        for (int64_t len : cfg.eval_lengths) {
            auto it = r.length_scores.find(len);
            auto ci = r.length_ci.find(len);
            table += fmt::format(
                " {} |", it == r.length_scores.end()
                             ? "n/a"
                             : format_with_interval(
                                   it->second, ci == r.length_ci.end() ? Interval{NAN, NAN} : ci->second));
        }
        table += fmt::format(" {} |", format_with_interval(r.overall, r.overall_ci));
        pareto.push_back({name, double(plan.kv_bytes_per_token(c, 2)), r.overall, r.overall_ci});
        for (const auto& [group, tasks] : info.groups) {
            const GroupScore g = group_score(r, tasks, info.bootstrap);
            table += fmt::format(" {} |", format_with_interval(g.overall, g.overall_ci));
        }
        table += "\n";
    }
    md += "## Results\n\n" + table + "\n";
    md += fmt::format(
        "Scores are RULER-style string-match scores x 100, {} samples per task and length, tasks: {}. "
        "Brackets: 95% percentile-bootstrap intervals ({} resamples; scores: samples resampled within "
        "each task x length cell; held-out metrics: windows resampled, since tokens of one window are "
        "correlated). Perplexity, its ratio to the teacher's, top-1 agreement and KL(teacher || student) "
        "are measured on {} held-out tokens ({} requested) in windows of {} tokens from the held-out "
        "split of `{}`: chunks left out of every training stage run here (as is `{}`). KV bytes count keys "
        "and values of the FA KV groups in "
        "bf16; the GDN state (fp32 recurrent + convolution history) does not grow with the "
        "sequence.\n\n",
        cfg.eval_samples, fmt::join(cfg.eval_tasks, ", "), info.bootstrap.resamples, heldout_count,
        cfg.heldout_tokens, cfg.distill.seq_len,
        heldout_from.empty() ? std::string("the distill stage's shards") : heldout_from,
        cfg.heldout_text.empty() ? "austen_persuasion.txt" : cfg.heldout_text);
    // Tasks the students also saw as synthetic training rows measure what the stages taught, not only
    // what the conversion kept: say which, and report the others as their own group.
    std::vector<std::string> trained;
    const std::vector<std::string> held = cfg.heldout_tasks();
    for (const std::string& t : cfg.eval_tasks)
        if (std::find(held.begin(), held.end(), t) == held.end()) trained.push_back(t);
    if (!trained.empty())
        md += fmt::format(
            "The students saw synthetic rows of {} during their stages (data.synthetic_tasks): on "
            "those tasks they can beat the teacher by having learned the task format. ",
            fmt::join(trained, ", "));
    if (!held.empty())
        md += fmt::format(
            "Held-out tasks (never a synthetic training row): {}; their mean is the \"{} mean\" "
            "column.",
            fmt::join(held, ", "), kHeldoutTaskGroup);
    md += "\n\n" + score_plot_markdown(out.string(), *in.results);
    {
        std::vector<std::pair<std::string, json>> detail;
        for (const auto& [name, path] : in.models)
            detail.emplace_back(name, in.agreement.value(name, json::object()));
        md += heldout_detail_markdown(detail);
    }
    md += pareto_section(pareto, out);

    // Per-task scores.
    md += "## Per task\n\n| model | task | held out |";
    for (int64_t len : cfg.eval_lengths) md += fmt::format(" {} |", len);
    md += "\n|---|---|---|";
    for (size_t i = 0; i < cfg.eval_lengths.size(); ++i) md += "---|";
    md += "\n";
    for (size_t i = 0; i < in.models.size(); ++i) {
        const ModelEvalResult& r = (*in.results)[i];
        for (const auto& task_row : r.task_scores) {
            const std::string& task = task_row.first;
            const bool is_held = std::find(held.begin(), held.end(), task) != held.end();
            md += fmt::format("| {} | {} | {} |", in.models[i].first, task, is_held ? "yes" : "no");
            md += task_markdown_cells(r, task, cfg.eval_lengths) + "\n";
        }
    }

    // Loss curves per stage.
    md += "\n## Training\n\n";
    if (fs::exists(out / "teacher" / "loss_curve.png")) md += "Teacher: ![teacher loss](teacher/loss_curve.png)\n\n";
    for (const std::string stage : {"align", "distill", "longctx"}) {
        std::vector<Series> series;
        for (size_t i = 0; i < in.models.size(); ++i) {
            if (in.models[i].first == "teacher") continue;
            const fs::path log = out / in.models[i].first / stage / "log.jsonl";
            if (fs::exists(log)) series.push_back(stage_series(log, in.models[i].first));
        }
        if (series.empty()) continue;
        LinePlotOptions o;
        o.title = "stage " + stage + ": training loss";
        o.x_label = "step";
        o.y_label = stage == "align" ? "layer error / layer update" : "loss (nats/token)";
        // A figure is a side product of the report: when it cannot be drawn (no PNG driver, ...) the
        // report says so and keeps its tables.
        try {
            write_line_plot((out / ("loss_" + stage + ".png")).string(), series, o);
            md += fmt::format("![{} loss](loss_{}.png)\n\n", stage, stage);
        } catch (const Error& e) {
            fmt::print(stderr, "warning: no {} loss plot: {}\n", stage, e.what());
            md += fmt::format("({} loss plot not drawn: {})\n\n", stage, e.what());
        }
    }
    if (fs::exists(out / "heads.png")) md += "Head scores of the teacher (outlined: the top eighth): ![heads](heads.png)\n\n";
    if (fs::exists(out / "ablation.json")) {
        const json ab = json::parse(read_text_file(out / "ablation.json"), nullptr, false);
        if (ab.is_object()) {
            md += fmt::format("Causality check of the scores: the teacher's accuracy on the scoring tasks at {} tokens "
                              "({} samples per task) is {} intact, {} with the top-scored {} heads zero-ablated, and with "
                              "{} random heads ablated:",
                              ab.value("length", 0), ab.value("samples_per_task", 0), num(ab.value("none", NAN), 1),
                              num(ab.value("top_scored", NAN), 1), ab.value("heads_ablated", 0),
                              ab.value("heads_ablated", 0));
            for (const auto& r : ab.value("random", json::array()))
                md += fmt::format(" {} (seed {})", num(r.value("accuracy", NAN), 1), r.value("seed", 0));
            md += ".";
            if (ab.contains("scores_from") && ab["scores_from"].is_string())
                md += fmt::format(" The scores were read from `{}` (score.file), not recomputed in this run.",
                                  ab["scores_from"].get<std::string>());
            md += "\n\n";
        }
    }

    md += "## Wall time and tokens\n\n| step | seconds | tokens |\n|---|---|---|\n";
    double total = 0;
    for (const auto& [k, v] : in.timings.items()) {
        md += fmt::format("| {} | {:.1f} | {} |\n", k, v.value("seconds", 0.0), v.value("tokens", int64_t(0)));
        total += v.value("seconds", 0.0);
    }
    md += fmt::format("| total | {:.1f} | |\n\n", total);
    md += "## Configuration\n\n```json\n" + cfg.to_json().dump(2) + "\n```\n";
    const fs::path path = out / "report.md";
    write_text_file(path, md);
    return {path.string(), table};
}

}  // namespace hydra
