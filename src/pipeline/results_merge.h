// `hydra report merge DIR... --out DIR`: one report from the per-model records of several pipeline
// runs or sessions (pipeline/variant_record.h), e.g. variants trained in separate GPU sessions. Writes
// OUT/report.md (per model: token budget, data mix, wall time; then the results with 95% intervals:
// held-out perplexity / KL / agreement, score per length, mean, task groups; then per-task scores),
// OUT/score_vs_length.png (error bars) and OUT/merged.json (every record as read).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hydra {

struct VariantRecordFile {
    std::string path;
    nlohmann::json record;
};

// Each input is a record file (.json), a directory of records, or a pipeline run directory (its
// results/ folder). Records are checked (check_variant_record); a model name that occurs twice gets
// its run's name appended, so both stay in the report. Throws hydra::Error naming the input that
// holds no record, or the file of a malformed one.
std::vector<VariantRecordFile> collect_variant_records(const std::vector<std::string>& inputs);

struct MergeResult {
    std::string report_path;
    std::vector<std::string> notes;  // e.g. records evaluated with different settings
};

MergeResult write_merged_report(const std::vector<VariantRecordFile>& records, const std::string& out_dir);

}  // namespace hydra
