// convert_variant: one variant of a pipeline config turned into a model directory, the same way for
// `hydra pipeline` and `hydra demo`: its plan (selection, ratio, granularity, fusion and its LA offsets,
// seed, layers, the sliding-window baseline's window and sinks; head scores of its score_method), the
// conversion with the teacher's calibration statistics and the FA heads' positions (rope_scaling, nope), and
// a directory that loads alone (the teacher's tokenizer files, or the byte tokenizer's mark).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "eval/model_text_encoder.h"
#include "model/hybrid_conversion.h"
#include "model/hybrid_plan.h"
#include "model/model_loader.h"
#include "pipeline/pipeline_config.h"

namespace hydra {

struct VariantConversion {
    HybridPlan plan;
    ConversionStats stats;
    int64_t parameters = 0;  // of the converted model
};

// Converts `teacher` (loaded from `teacher_path`) as `variant` says into `out_dir`, which must not hold a
// model yet. `scores_path`: the teacher's scores.json (read only for select = scores); `calibration`: the
// teacher tokens its head statistics are measured on.
VariantConversion convert_variant(const LoadedModel& teacher, const std::string& teacher_path,
                                  const ModelText& text, const PipelineVariant& variant,
                                  const std::filesystem::path& scores_path, std::vector<int32_t> calibration,
                                  const std::filesystem::path& out_dir);

}  // namespace hydra
