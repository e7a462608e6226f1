// Merged report of per-model records (see results_merge.h).
#include "pipeline/results_merge.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "eval/bootstrap.h"
#include "eval/pareto.h"
#include "eval/results_io.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "pipeline/heldout_tables.h"
#include "pipeline/variant_record.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

VariantRecordFile read_record(const fs::path& p) {
    const std::string text = read_text_file(p);
    json j = parse_json_bounded(text, p.string());
    check_variant_record(j, p.string());
    return {p.string(), std::move(j)};
}

std::vector<fs::path> json_files(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

std::string metric(const json& a, const std::string& key, int digits) {
    const json v = a.value(key, json());
    return format_with_interval(v.is_number() ? v.get<double>() : NAN,
                                interval_from_json(a.value(key + "_ci", json())), digits);
}

std::string millions(int64_t tokens) {
    return fmt::format("{:.2f}M", 1e-6 * double(tokens));
}

std::string duration(double s) {
    if (s < 90) return fmt::format("{:.0f} s", s);
    if (s < 5400) return fmt::format("{:.1f} min", s / 60);
    return fmt::format("{:.2f} h", s / 3600);
}

}  // namespace

std::vector<VariantRecordFile> collect_variant_records(const std::vector<std::string>& inputs) {
    HYDRA_CHECK(!inputs.empty(),
                "report merge: no inputs (give record files, results/ folders or pipeline runs)");
    std::vector<VariantRecordFile> out;
    for (const std::string& in : inputs) {
        const fs::path p(in);
        HYDRA_CHECK(fs::exists(p), "report merge: {} does not exist", in);
        const size_t before = out.size();
        if (fs::is_regular_file(p)) {
            out.push_back(read_record(p));
        } else {
            const fs::path dir = fs::is_directory(p / "results") ? p / "results" : p;
            for (const fs::path& f : json_files(dir)) out.push_back(read_record(f));
        }
        HYDRA_CHECK(out.size() > before,
                    "report merge: {} holds no records (expected *.json written by `hydra pipeline` into "
                    "OUT/results)",
                    in);
    }
    // Same model name from several runs (every run has a "teacher"): keep each, named after its run.
    std::map<std::string, int> count;
    for (const auto& r : out) ++count[r.record["model"].get<std::string>()];
    for (auto& r : out) {
        const std::string name = r.record["model"].get<std::string>();
        if (count[name] > 1)
            r.record["model"] = fmt::format(
                "{} ({})", name, fs::path(r.record["run_dir"].get<std::string>()).filename().string());
    }
    return out;
}

MergeResult write_merged_report(const std::vector<VariantRecordFile>& records, const std::string& out_dir) {
    HYDRA_CHECK(!records.empty(), "report merge: no records");
    const fs::path out(out_dir);
    fs::create_directories(out);
    MergeResult res;
    std::vector<ModelEvalResult> results;
    std::set<int64_t> lengths;
    std::vector<std::string> group_names;
    std::set<std::string> settings_seen;
    for (const auto& f : records) {
        const json& r = f.record;
        BootstrapOptions boot;
        boot.resamples = r["eval_settings"].value("bootstrap_resamples", int64_t(1000));
        ModelEvalResult e = model_result_from_json(r["eval"], f.path, boot);
        e.model = r["model"].get<std::string>();
        for (const auto& [len, v] : e.length_scores) lengths.insert(len);
        const json groups = r["eval_settings"].value("groups", json::object());
        for (const auto& [g, tasks] : groups.items())
            if (std::find(group_names.begin(), group_names.end(), g) == group_names.end())
                group_names.push_back(g);
        json s = r["eval_settings"];
        s.erase("groups");
        settings_seen.insert(s.dump());
        results.push_back(std::move(e));
    }
    if (settings_seen.size() > 1)
        res.notes.push_back(
            fmt::format("the records were evaluated with {} different settings (tasks, lengths, samples, "
                        "seed): compare their "
                        "scores with care; each record's settings are in merged.json",
                        settings_seen.size()));

    std::string md;
    const std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    md += fmt::format("# HydraHead merged report\n\n{}; {} models from {} record files.\n\n", date,
                      records.size(), records.size());
    for (const std::string& n : res.notes) md += "Note: " + n + ".\n\n";

    md +=
        "## Models: budget, data mix, wall time\n\n| model | run | device | plan | KV bytes/token (bf16) | "
        "stage tokens (align / distill / longctx) | total tokens | data mix | wall time |\n"
        "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& f : records) {
        const json& r = f.record;
        const json& stages = r["budget"].value("stages", json::object());
        std::string per_stage;
        for (const char* k : {"align", "distill", "longctx"}) {
            const json st = stages.value(k, json::object());
            per_stage += fmt::format("{}{}", per_stage.empty() ? "" : " / ",
                                     st.contains("tokens") ? millions(st["tokens"].get<int64_t>()) : "-");
        }
        std::string mix;
        const json dstage = r["data_mix"].value("stages", json::object()).value("distill", json::object());
        if (dstage.contains("corpus")) {
            const size_t n = dstage.value("mix_weights", json::object()).size();
            mix = fmt::format("distill: corpus `{}` ({} sources, {} mix){}", dstage["corpus"].get<std::string>(), n,
                              dstage.value("mix_file", std::string()).empty() ? "its own" : "a file's",
                              dstage.value("synthetic_fraction", 0.0) > 0
                                  ? fmt::format(" + {:.0f}% synthetic rows",
                                                100 * dstage.value("synthetic_fraction", 0.0))
                                  : "");
        } else if (!dstage.empty()) {
            std::vector<std::string> src;
            for (const auto& s : dstage.value("sources", json::array()))
                if (s.is_string()) src.push_back(s.get<std::string>());
            mix = fmt::format(
                "distill: {} ({} files){}",
                src.size() <= 3 ? fmt::format("{}", fmt::join(src, ", ")) : fmt::format("{}, ...", src[0]),
                src.size(),
                dstage.value("synthetic_fraction", 0.0) > 0
                    ? fmt::format(" + {:.0f}% synthetic rows", 100 * dstage.value("synthetic_fraction", 0.0))
                    : "");
        } else {
            mix = "- (teacher)";
        }
        md += fmt::format("| {} | `{}` | {} | {} | {} | {} | {} | {} | {} |\n", r["model"].get<std::string>(),
                          r["run_dir"].get<std::string>(), r["device"].get<std::string>(),
                          r["plan"].get<std::string>(), r.value("kv_bytes_per_token", int64_t(0)), per_stage,
                          millions(r["budget"].value("total_tokens", int64_t(0))), mix,
                          duration(r["wall_seconds"].value("total", 0.0)));
    }

    md +=
        "\n## Results\n\n| model | held-out tokens | held-out ppl | ppl / teacher | top-1 agree | KL(t||s) |";
    for (int64_t len : lengths) md += fmt::format(" score@{} |", len);
    md += " mean |";
    for (const std::string& g : group_names) md += fmt::format(" {} mean |", g);
    md += "\n|---|---|---|---|---|---|";
    for (size_t i = 0; i < lengths.size() + 1 + group_names.size(); ++i) md += "---|";
    md += "\n";
    for (size_t i = 0; i < records.size(); ++i) {
        const json& r = records[i].record;
        const json& h = r["heldout"];
        const ModelEvalResult& e = results[i];
        md += fmt::format("| {} | {} | {} | {} | {} | {} |", e.model, h.value("tokens", int64_t(0)),
                          metric(h, "ppl", 2), metric(h, "ppl_ratio", 3), metric(h, "top1_agreement", 3),
                          metric(h, "kl", 3));
        for (int64_t len : lengths) {
            auto it = e.length_scores.find(len);
            auto ci = e.length_ci.find(len);
            md += fmt::format(
                " {} |", it == e.length_scores.end()
                             ? "n/a"
                             : format_with_interval(
                                   it->second, ci == e.length_ci.end() ? Interval{NAN, NAN} : ci->second));
        }
        md += fmt::format(" {} |", format_with_interval(e.overall, e.overall_ci));
        BootstrapOptions boot;
        boot.resamples = r["eval_settings"].value("bootstrap_resamples", int64_t(1000));
        for (const std::string& g : group_names) {
            const json tasks = r["eval_settings"].value("groups", json::object()).value(g, json());
            if (!tasks.is_array()) {
                md += " n/a |";
                continue;
            }
            const GroupScore gs = group_score(e, tasks.get<std::vector<std::string>>(), boot);
            md += fmt::format(" {} |", format_with_interval(gs.overall, gs.overall_ci));
        }
        md += "\n";
    }
    md +=
        "\nBrackets: 95% percentile-bootstrap intervals (scores: samples resampled within each task x length "
        "cell; "
        "held-out metrics: windows resampled). Held-out metrics are measured on the held-out split of each "
        "run's "
        "shards (the record's heldout.source).\n\n" +
        score_plot_markdown(out.string(), results);
    {
        std::vector<std::pair<std::string, json>> detail;
        for (const auto& f : records)
            detail.emplace_back(f.record["model"].get<std::string>(),
                                f.record.value("heldout", json::object()));
        md += heldout_detail_markdown(detail);
    }
    std::vector<ParetoPoint> pareto;
    for (size_t i = 0; i < records.size(); ++i)
        pareto.push_back({results[i].model, double(records[i].record.value("kv_bytes_per_token", int64_t(0))),
                          results[i].overall, results[i].overall_ci});
    md += pareto_section(pareto, out);

    md += "## Per task\n\n| model | task |";
    for (int64_t len : lengths) md += fmt::format(" {} |", len);
    md += "\n|---|---|";
    for (size_t i = 0; i < lengths.size(); ++i) md += "---|";
    md += "\n";
    const std::vector<int64_t> length_list(lengths.begin(), lengths.end());
    for (const ModelEvalResult& e : results)
        for (const auto& task_row : e.task_scores)
            md += fmt::format("| {} | {} |", e.model, task_row.first) +
                  task_markdown_cells(e, task_row.first, length_list) + "\n";
    md += "\n## Sources\n\n";
    for (const auto& f : records)
        md += fmt::format("- `{}` ({}, written {})\n", f.path, f.record["model"].get<std::string>(),
                          f.record.value("written", std::string("?")));

    json merged = {{"format", "hydra-merged-results"}, {"version", 1}, {"records", json::array()}};
    for (const auto& f : records) merged["records"].push_back(f.record);
    write_text_file(out / "merged.json", merged.dump(1, ' ', false, json::error_handler_t::replace) + "\n");
    res.report_path = (out / "report.md").string();
    write_text_file(out / "report.md", md);
    return res;
}

}  // namespace hydra
