// `hydra convert MODEL --ratio 7:1 --select ... --out DIR`: turns a full-attention model into a
// HydraHead hybrid (plan + parameter reuse, model/hybrid_conversion.h) and writes it as a model
// directory that every other command loads.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/model_load_report.h"
#include "core/error.h"
#include "io/atomic_dir.h"
#include "model/hybrid_conversion.h"
#include "model/model_directory.h"
#include "model/plan_builders.h"
#include "model/tokenizer_files.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra::cli {

namespace fs = std::filesystem;

namespace {

struct ConvertOptions {
    std::string model = default_model_path();
    std::string ratio;
    std::string select = "scores";
    std::string scores;
    std::string layers;
    std::string granularity = "kv";
    std::string fusion = "scale-norm";
    bool la_bias = false;
    uint64_t seed = 1;
    std::string calib = std::string(HYDRA_SOURCE_DIR) + "/.cache/prose/austen_emma.txt";
    int64_t calib_tokens = 1024;
    int64_t calib_skip_bytes = 20000;
    bool allow_neg_eigval = false;
    std::string rope_scaling;
    bool nope = false;
    int64_t window = 0, sinks = 0;  // the head-level sliding-window baseline instead of GDN heads
    std::string score_method;  // "": the file's aggregate
    std::string out;
    bool force = false;
    int threads = 0;
};

std::vector<int32_t> calibration_tokens(const ConvertOptions& o, const LoadedModel& m) {
    if (o.calib_tokens == 0) return {};
    HYDRA_CHECK(m.vocab.has_value(),
                "{}: the model has no tokenizer, so calibration text cannot be tokenized; pass --calib-tokens 0 to "
                "initialise fusion scales to 1",
                o.model);
    HYDRA_CHECK(fs::exists(o.calib),
                "{}: calibration text not found (run tools/setup.sh to fetch the prose cache, give --calib FILE, or "
                "--calib-tokens 0)",
                o.calib);
    std::string text = read_text_file(o.calib);
    if (int64_t(text.size()) > o.calib_skip_bytes + 64 * o.calib_tokens)
        text = text.substr(size_t(o.calib_skip_bytes));  // skip the Project Gutenberg header
    text = text.substr(0, size_t(std::min<int64_t>(int64_t(text.size()), 16 * o.calib_tokens)));
    Tokenizer tok(*m.vocab);
    std::vector<int32_t> ids = tok.encode(text, false);
    HYDRA_CHECK(int64_t(ids.size()) >= o.calib_tokens / 2, "{}: only {} tokens of calibration text (want {})", o.calib,
                ids.size(), o.calib_tokens);
    if (int64_t(ids.size()) > o.calib_tokens) ids.resize(size_t(o.calib_tokens));
    return ids;
}

}  // namespace

void register_convert(CLI::App& app) {
    auto* o = new ConvertOptions;
    auto* cmd = app.add_subcommand(
        "convert", "Turn a full-attention model into a HydraHead hybrid (FA heads kept, the rest Gated DeltaNet)");
    cmd->add_option("MODEL", o->model, "the full-attention teacher: a .gguf file or a model directory")
        ->capture_default_str();
    cmd->add_option("--ratio", o->ratio, "LA:FA heads over the whole model, e.g. 7:1 (the paper's operating point)");
    cmd->add_option("--select", o->select, "how FA heads are chosen: scores | random | uniform | layerwise | all-la")
        ->capture_default_str()
        ->check(CLI::IsMember({"scores", "random", "uniform", "layerwise", "all-la", "all-fa"}));
    cmd->add_option("--scores", o->scores, "scores.json from `hydra score-heads` (for --select scores)");
    cmd->add_option(
        "--score-method", o->score_method,
        "select by one method's scores of the file (activation, attribution, path, retrieval, ...) "
        "instead of their aggregate");
    cmd->add_option("--layers", o->layers, "FA layers for --select layerwise, e.g. 3,7,11 (default: every k-th)");
    cmd->add_option("--granularity", o->granularity, "kv: whole KV groups stay FA (the KV cache shrinks); head")
        ->capture_default_str()
        ->check(CLI::IsMember({"kv", "head"}));
    cmd->add_option("--fusion", o->fusion, "scale-norm | none | hymba | la-only")
        ->capture_default_str()
        ->check(CLI::IsMember({"scale-norm", "none", "hymba", "la-only"}));
    cmd->add_flag(
        "--la-bias", o->la_bias,
        "the fusion adds a learnable offset to each GDN head, started at its softmax head's mean output "
        "on the calibration text (and the GDN output scaled to the deviation about it): a much closer "
        "start than GDN heads alone (docs/results/conversion_init)");
    cmd->add_option("--seed", o->seed, "seed for random selection and fresh weights")->capture_default_str();
    cmd->add_option("--calib", o->calib, "text for the teacher statistics (head RMS, attention span)")
        ->capture_default_str();
    cmd->add_option("--calib-tokens", o->calib_tokens, "calibration length in tokens (0: no calibration)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(0), int64_t(1) << 16));
    cmd->add_flag("--allow-neg-eigval", o->allow_neg_eigval, "GDN beta = 2 sigmoid(b) (negative eigenvalues)");
    cmd->add_option(
        "--rope-scaling", o->rope_scaling,
        "RoPE scaling of the FA heads, TYPE:FACTOR[,key=value...]: linear, dynamic (NTK), yarn, llama3 "
        "(HF semantics; keys as in config.json's rope_scaling, e.g. yarn:4,beta_fast=32), or ntk:ALPHA "
        "(static NTK-aware: a larger rope_theta)");
    cmd->add_flag("--nope", o->nope, "FA heads without RoPE (NoPE ablation; the GDN heads carry order)");
    cmd->add_option(
           "--window", o->window,
           "sliding-window baseline: the heads --select would make GDN keep softmax attention over their "
           "last N positions instead")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
    cmd->add_option("--sinks", o->sinks, "with --window: the first N positions every windowed head also sees")
        ->check(CLI::Range(int64_t(0), int64_t(4096)));
    cmd->add_option("--out", o->out, "output model directory")->required();
    cmd->add_flag("--force", o->force,
                  "replace --out even when it is not a hydra model directory (deletes it)");
    add_threads_option(*cmd, o->threads);
    cmd->callback([o] {
        apply_threads(o->threads);
        // Claimed before the conversion's work: a bad --out fails at once, and no second writer
        // can start on it meanwhile.
        const ClaimedDir out = claim_output_dir(o->out, model_dir_kind(), o->force);
        for (const std::string& note : out.notes) fmt::print(stderr, "hydra: {}\n", note);
        const auto t0 = std::chrono::steady_clock::now();
        LoadedModel m = load_model_reported(o->model);
        const ModelConfig& cfg = m.model->config();

        PlanRequest req;
        req.select = o->select;
        if (!o->ratio.empty()) req.ratio = parse_ratio(o->ratio, "--ratio");
        req.granularity = o->granularity;
        req.fusion = parse_fusion(o->fusion, "--fusion");
        req.la_bias = o->la_bias;
        req.seed = o->seed;
        req.window = o->window;
        req.sinks = o->sinks;
        if (!o->layers.empty()) req.layers = parse_layer_list(o->layers, "--layers");
        req.gdn.norm_eps = cfg.rms_norm_eps;
        req.gdn.allow_neg_eigval = o->allow_neg_eigval;
        std::optional<HeadScoreTable> scores;
        if (!o->scores.empty()) {
            scores = load_head_scores(o->scores, cfg, o->score_method);
            req.scores = &*scores;
        }
        HYDRA_CHECK(o->select != "scores" || scores,
                    "--select scores needs --scores FILE (make one with `hydra score-heads`), or choose --select "
                    "random|uniform|layerwise");
        const HybridPlan plan = build_plan(cfg, req);

        ConversionOptions copt;
        copt.calibration_tokens = calibration_tokens(*o, m);
        copt.seed = o->seed;
        copt.fa_nope = o->nope;
        set_rope_option(copt, o->rope_scaling, cfg, "--rope-scaling");
        ConversionStats stats;
        auto hybrid = convert_to_hybrid(*m.model, plan, copt, &stats);

        nlohmann::json extra;
        extra["converted_from"] = fs::absolute(o->model).string();
        extra["calibration"] = {{"file", copt.calibration_tokens.empty() ? "" : o->calib},
                                {"tokens", stats.calibration_tokens}};
        extra["teacher_head_rms"] = stats.head_rms;
        extra["teacher_head_span"] = stats.head_span;
        save_model_directory(out.path.string(), *hybrid, extra, tokenizer_files_of(o->model, m));

        const HybridPlan teacher = HybridPlan::all_fa(cfg);
        const int64_t kv = plan.kv_bytes_per_token(cfg, 2), kv_t = teacher.kv_bytes_per_token(cfg, 2);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        fmt::print("plan         {} [{}; {} granularity; fusion {}{}]\n", plan.ratio_summary(),
                   plan.selection, plan.granularity, fusion_name(plan.fusion),
                   plan.la_bias ? " with LA offsets" : "");
        fmt::print("FA KV groups {} of {}\n", plan.total_fa_kv_groups(cfg), cfg.num_layers * cfg.num_kv_heads);
        fmt::print("KV cache     {} bytes/token bf16 vs teacher {} ({:.4f}x)\n", kv, kv_t, double(kv) / double(kv_t));
        fmt::print("GDN state    {} bytes per sequence (fp32)\n", plan.state_bytes(cfg));
        const ModelConfig& hc = hybrid->config();
        fmt::print("rope         theta {} scaling {}{}; context {}\n", hc.rope_theta,
                   describe_rope_scaling(hc.rope_scaling, hc.max_position_embeddings),
                   hc.fa_nope ? "; NoPE (FA heads unrotated)" : "", hc.max_position_embeddings);
        fmt::print("calibration  {} tokens\n", stats.calibration_tokens);
        fmt::print("parameters   {} ({:.1f}M; teacher {:.1f}M)\n", hybrid->params().parameter_count(),
                   double(hybrid->params().parameter_count()) / 1e6, double(m.model->params().parameter_count()) / 1e6);
        fmt::print("wrote        {} in {:.1f} s\n", o->out, s);
    });
}

}  // namespace hydra::cli
