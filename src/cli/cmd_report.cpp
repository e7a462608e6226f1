// `hydra report merge INPUT... --out DIR`: one report (markdown, plot, merged JSON) from the per-model
// records of several pipeline runs or sessions (pipeline/results_merge.h).
#include <fmt/format.h>

#include "cli/commands.h"
#include "io/dir_kind.h"
#include "pipeline/results_merge.h"

namespace hydra::cli {

namespace {
struct ReportOptions {
    std::vector<std::string> inputs;
    std::string out;
};
}  // namespace

void register_report(CLI::App& app) {
    auto* report = app.add_subcommand("report", "Reports across pipeline runs");
    report->require_subcommand(1);
    auto* o = new ReportOptions;
    auto* merge = report->add_subcommand(
        "merge", "Merge per-model results (OUT/results/*.json of hydra pipeline runs) into one report");
    merge->add_option("INPUT", o->inputs, "pipeline run directories, results/ folders or record files")
        ->required();
    merge->add_option("--out", o->out, "output directory (report.md, score_vs_length.png, merged.json)")
        ->required();
    merge->callback([o] {
        const auto out = normalize_dir_path(o->out, "--out");
        const auto records = collect_variant_records(o->inputs);
        const MergeResult r = write_merged_report(records, out.string());
        for (const std::string& n : r.notes) fmt::print(stderr, "note: {}\n", n);
        fmt::print("merged {} records: {}\n", records.size(), r.report_path);
    });
}

}  // namespace hydra::cli
