// A pipeline variant's conversion into a model directory (see variant_conversion.h).
#include "pipeline/variant_conversion.h"

#include <optional>

#include "interp/scores_io.h"
#include "model/model_directory.h"
#include "model/plan_builders.h"
#include "model/tokenizer_files.h"

namespace hydra {

VariantConversion convert_variant(const LoadedModel& teacher, const std::string& teacher_path,
                                  const ModelText& text, const PipelineVariant& v,
                                  const std::filesystem::path& scores_path, std::vector<int32_t> calibration,
                                  const std::filesystem::path& out_dir) {
    const ModelConfig& tcfg = teacher.model->config();
    PlanRequest req;
    req.select = v.select;
    if (!v.ratio.empty()) req.ratio = parse_ratio(v.ratio, v.name + ".ratio");
    req.granularity = v.granularity;
    req.fusion = parse_fusion(v.fusion, v.name + ".fusion");
    req.la_bias = v.la_bias;
    req.seed = v.seed;
    req.window = v.window;
    req.sinks = v.sinks;
    if (!v.layers.empty()) req.layers = parse_layer_list(v.layers, v.name + ".layers");
    req.gdn.norm_eps = tcfg.rms_norm_eps;
    std::optional<HeadScoreTable> scores;
    if (v.select == "scores") {
        scores = load_head_scores(scores_path.string(), tcfg, v.score_method);
        req.scores = &*scores;
    }
    VariantConversion out{build_plan(tcfg, req), {}, 0};

    ConversionOptions co;
    co.seed = v.seed;
    co.calibration_tokens = std::move(calibration);
    co.fa_nope = v.nope;
    set_rope_option(co, v.rope_scaling, tcfg, v.name + ".rope_scaling");
    const auto hybrid = convert_to_hybrid(*teacher.model, out.plan, co, &out.stats);
    out.parameters = hybrid->params().parameter_count();

    nlohmann::json extra = {{"converted_from", std::filesystem::absolute(teacher_path).string()},
                            {"variant", v.name}};
    if (text.name() == "byte-v1") extra["tokenizer"] = "byte-v1";
    save_model_directory(out_dir.string(), *hybrid, extra, tokenizer_files_of(teacher_path, teacher));
    return out;
}

}  // namespace hydra
