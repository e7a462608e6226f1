// Pipeline presets, file/override parsing and validation (see pipeline_config.h).
#include "pipeline/pipeline_config.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "io/bounded_parse.h"
#include "io/json_kind.h"
#include "model/rope_scaling.h"

namespace hydra {

namespace {

using json = nlohmann::json;

std::vector<std::string> strings(const json& v, const std::string& where) {
    HYDRA_CHECK(v.is_array(), "{}: expected a list of strings, found {}", where, json_kind(v));
    std::vector<std::string> out;
    for (const auto& e : v) {
        HYDRA_CHECK(e.is_string(), "{}: expected strings, found {}", where, json_kind(e));
        out.push_back(e.get<std::string>());
    }
    return out;
}

std::vector<int64_t> integers(const json& v, const std::string& where) {
    HYDRA_CHECK(v.is_array(), "{}: expected a list of integers, found {}", where, json_kind(v));
    std::vector<int64_t> out;
    for (const auto& e : v) {
        HYDRA_CHECK(e.is_number_integer(), "{}: expected integers, found {}", where, json_kind(e));
        out.push_back(e.get<int64_t>());
    }
    return out;
}

int64_t integer(const json& v, const std::string& where) {
    HYDRA_CHECK(v.is_number_integer(), "{}: expected an integer, found {}", where, json_kind(v));
    return v.get<int64_t>();
}

std::string string(const json& v, const std::string& where) {
    HYDRA_CHECK(v.is_string(), "{}: expected a string, found {}", where, json_kind(v));
    return v.get<std::string>();
}

PipelineVariant parse_variant(const json& v, const std::string& where) {
    HYDRA_CHECK(v.is_object(), "{}: expected an object, found {}", where, json_kind(v));
    PipelineVariant out;
    for (const auto& [k, e] : v.items()) {
        const std::string w = where + "." + k;
        if (k == "name")
            out.name = string(e, w);
        else if (k == "select")
            out.select = string(e, w);
        else if (k == "ratio")
            out.ratio = string(e, w);
        else if (k == "granularity")
            out.granularity = string(e, w);
        else if (k == "fusion")
            out.fusion = string(e, w);
        else if (k == "layers")
            out.layers = string(e, w);
        else if (k == "seed")
            out.seed = uint64_t(integer(e, w));
        else if (k == "rope_scaling")
            out.rope_scaling = string(e, w);
        else if (k == "window")
            out.window = integer(e, w);
        else if (k == "sinks")
            out.sinks = integer(e, w);
        else if (k == "score_method")
            out.score_method = string(e, w);
        else if (k == "nope" || k == "la_bias") {
            HYDRA_CHECK(e.is_boolean(), "{}: expected true or false, found {}", w, json_kind(e));
            (k == "nope" ? out.nope : out.la_bias) = e.get<bool>();
        } else if (k == "stages") {
            HYDRA_CHECK(e.is_array(), "{}: expected a list of stage names, found {}", w, json_kind(e));
            out.stages.clear();
            for (size_t i = 0; i < e.size(); ++i)
                out.stages.push_back(string(e[i], fmt::format("{}[{}]", w, i)));
        } else
            fail(
                "{}: unknown key (variant keys: name, select, ratio, granularity, fusion, la_bias, layers, "
                "seed, "
                "score_method, rope_scaling, nope, stages, window, sinks)",
                w);
    }
    HYDRA_CHECK(!out.name.empty(), "{}: a variant needs a name", where);
    // A sliding-window variant has no new heads for stage 1 to align: by default it runs distill, longctx.
    if (out.window > 0 && !v.contains("stages")) out.stages = {"distill", "longctx"};
    return out;
}

json variant_json(const PipelineVariant& v) {
    return {{"name", v.name},
            {"select", v.select},
            {"ratio", v.ratio},
            {"granularity", v.granularity},
            {"fusion", v.fusion},
            {"la_bias", v.la_bias},
            {"layers", v.layers},
            {"seed", v.seed},
            {"score_method", v.score_method},
            {"rope_scaling", v.rope_scaling},
            {"nope", v.nope},
            {"stages", v.stages},
            {"window", v.window},
            {"sinks", v.sinks}};
}

TrainConfig stage_defaults(const std::string& kind) {
    TrainConfig c;
    c.stage = kind;
    c.tokenizer = "byte";
    c.warmup_steps = 5;
    c.schedule = "cosine";
    c.eval_every = 1000000;  // held-out loss at the end of a stage only
    c.save_every = 25;
    c.log_every = 1;
    return c;
}

}  // namespace

std::vector<std::string> PipelineConfig::preset_names() {
    return {"tiny-cpu", "smollm2-gpu", "smollm2-gpu-selection", "smollm2-gpu-long"};
}

PipelineConfig PipelineConfig::preset(const std::string& name) {
    if (name == "smollm2-gpu-selection") {
        // Issue 33's selection study at equal budgets (50M stage-2 tokens each, on a corpus given as
        // {align,distill,longctx}.data.corpus): which heads to keep, at which granularity and ratio, against
        // random choices and the layer-wise hybrid. Ten students, about 7 minutes each on one H200: run in
        // parts with variants_only=[...] and join them with `hydra report merge`.
        PipelineConfig p = preset("smollm2-gpu");
        p.name = name;
        p.distill.steps = p.distill.schedule_steps = 3052;  // 3052 x 8 x 2048 = 50.0M tokens
        p.longctx.steps = p.longctx.schedule_steps = 20;
        p.eval_lengths = {2048, 4096, 8192};
        p.variants = {{"hydra-7:1-scores", "scores", "7:1", "kv", "scale-norm", "", 1},
                      {"hydra-7:1-random-s1", "random", "7:1", "kv", "scale-norm", "", 1},
                      {"hydra-7:1-random-s2", "random", "7:1", "kv", "scale-norm", "", 2},
                      {"hydra-7:1-random-s3", "random", "7:1", "kv", "scale-norm", "", 3},
                      {"hydra-7:1-retrieval", "scores", "7:1", "kv", "scale-norm", "", 1, "retrieval"},
                      {"hydra-7:1-scores-head", "scores", "7:1", "head", "scale-norm", "", 1},
                      {"hydra-15:1-scores-head", "scores", "15:1", "head", "scale-norm", "", 1},
                      {"hydra-3:1-scores-head", "scores", "3:1", "head", "scale-norm", "", 1},
                      {"layerwise-3:1", "layerwise", "3:1", "kv", "none", "", 1},
                      {"all-la", "all-la", "", "kv", "scale-norm", "", 1}};
        return p;
    }
    if (name == "smollm2-gpu-long") {
        // Issue 34's study past the teacher's 8K window: stage 3 on 16K-token rows (recomputation), the
        // evaluation from 4K to 128K; the teacher with training-free YaRN (factor 16: its 8K window to 128K)
        // or dynamic NTK scaling (the same factor, applied only past 8K positions), and fine-tuned by the
        // same stage 3, against 7:1 hybrids with YaRN, unscaled and NoPE FA heads, the layer-wise hybrid with
        // YaRN, and the head-level sliding-window baseline (DuoAttention's design: the heads the 7:1
        // selection makes GDN keep softmax attention over their last 1024 positions and 4 sinks). Eight
        // models: run in parts with variants_only=[...], join with `hydra report merge`.
        PipelineConfig p = preset("smollm2-gpu");
        p.name = name;
        p.distill.steps = p.distill.schedule_steps = 3052;
        p.longctx.seq_len = 16384;
        p.longctx.batch_size = 1;
        p.longctx.steps = p.longctx.schedule_steps = 200;  // 3.3M tokens of stage 3 for every model
        // Inside the teacher's 8K window the teacher teaches (KL), past it the text (CE): a CE term inside
        // the window pulls the student off its teacher (see smollm2-gpu's stage 3).
        p.longctx.kl_max_position = 8192;
        p.longctx.ce_from_position = 8192;
        p.longctx.ce_weight = 1.0;
        p.longctx.kl_weight = 1.0;
        p.eval_lengths = {4096, 8192, 16384, 32768, 65536, 131072};
        p.eval_samples = 20;
        const std::vector<std::string> all = {"align", "distill", "longctx"};
        p.variants = {
            {"teacher-yarn16", "all-fa", "", "kv", "none", "", 1, "", "yarn:16", false, {}},
            {"teacher-dynamic16", "all-fa", "", "kv", "none", "", 1, "", "dynamic:16", false, {}},
            {"teacher-yarn16-ft", "all-fa", "", "kv", "none", "", 1, "", "yarn:16", false, {"longctx"}},
            {"hydra-7:1-yarn16", "scores", "7:1", "kv", "scale-norm", "", 1, "", "yarn:16", false, all},
            {"hydra-7:1", "scores", "7:1", "kv", "scale-norm", "", 1, "", "", false, all},
            {"hydra-7:1-nope", "scores", "7:1", "kv", "scale-norm", "", 1, "", "", true, all},
            {"layerwise-3:1-yarn16", "layerwise", "3:1", "kv", "none", "", 1, "", "yarn:16", false, all},
            {"swa-7:1-w1024",
             "scores",
             "7:1",
             "kv",
             "none",
             "",
             1,
             "",
             "",
             false,
             {"distill", "longctx"},
             1024,
             4}};
        return p;
    }
    PipelineConfig p;
    p.name = name;
    p.align = stage_defaults("align");
    p.distill = stage_defaults("distill");
    p.longctx = stage_defaults("longctx");
    p.align.trainable = {"*.linear_attn.*", "*.fusion.*"};
    p.distill.ce_weight = 0.0;
    p.distill.kl_weight = 1.0;
    p.distill.mixer_lr_scale = 3.0;
    p.longctx.ce_weight = 1.0;
    p.longctx.kl_weight = 0.5;
    p.longctx.mixer_lr_scale = 3.0;
    if (name == "tiny-cpu") {
        // A 4-layer byte-level teacher (2 KV groups per layer, so 7:1 keeps exactly one of its 8 groups
        // FA) that learns prose and synthetic retrieval in a few minutes on 2 cores.
        TrainConfig t = TrainConfig::preset("tiny-cpu");
        t.hidden_size = 128;
        t.num_layers = 4;
        t.num_heads = 8;
        t.num_kv_heads = 2;
        t.intermediate_size = 384;
        t.seq_len = 256;
        t.batch_size = 16;
        t.steps = t.schedule_steps = 400;
        t.warmup_steps = 30;
        t.lr = 3e-3;
        t.eval_every = 200;
        t.save_every = 100;
        t.synthetic_fraction = 0.5;
        t.synthetic_tasks = {"passkey", "niah_single_1", "mqar"};
        p.teacher_train = t;
        for (TrainConfig* s : {&p.align, &p.distill, &p.longctx}) {
            s->seq_len = 256;
            s->batch_size = 8;
            s->synthetic_tasks = t.synthetic_tasks;
        }
        p.align.steps = p.align.schedule_steps = 40;
        p.align.lr = 3e-3;
        p.distill.steps = p.distill.schedule_steps = 80;
        p.distill.lr = 1e-3;
        p.distill.synthetic_fraction = 0.5;
        p.longctx.seq_len = 512;   // 2x the teacher's training length
        p.longctx.batch_size = 4;  // same tokens per step
        p.longctx.steps = p.longctx.schedule_steps = 40;
        p.longctx.lr = 5e-4;
        p.longctx.kl_max_position = 256;
        p.longctx.synthetic_fraction = 0.5;
        p.score_lengths = {224};  // inside the teacher's 256 positions, answer included
        p.score_samples = 4;
        p.calib_tokens = 512;
        p.eval_lengths = {256, 512, 1024};
        p.eval_samples = 5;
        p.heldout_tokens = 8192;
        p.variants = {{"hydra-7:1-scores", "scores", "7:1", "kv", "scale-norm", "", 1},
                      {"hydra-7:1-random", "random", "7:1", "kv", "scale-norm", "", 1},
                      {"layerwise-3:1", "layerwise", "3:1", "kv", "none", "", 1},
                      {"all-la", "all-la", "", "kv", "scale-norm", "", 1}};
        return p;
    }
    if (name == "smollm2-gpu") {
        // SmolLM2-135M (the default model) on one GPU (the CUDA training and inference paths). Sized to
        // run end to end in about 15 minutes on one H200; every student gets the same token budget:
        // align 50 x 8 x 2048 (0.8M tokens), distill 400 x 8 x 2048 (6.6M), long context 50 x 2 x 8192
        // (0.8M). Scale the steps up for a better recovery; the report states what ran.
        p.teacher = std::string(HYDRA_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
        p.device = "cuda";
        for (TrainConfig* s : {&p.align, &p.distill, &p.longctx}) {
            s->tokenizer = p.teacher;
            s->seq_len = 2048;
            s->batch_size = 8;
            s->synthetic_tasks = {"passkey", "niah_single_1", "niah_multikey_1", "mqar"};
            s->eval_batches = 4;
            s->save_every = 200;  // a checkpoint holds 1.6 GB of weights and AdamW state
        }
        p.align.steps = p.align.schedule_steps = 50;
        p.align.lr = 1e-3;
        p.distill.steps = p.distill.schedule_steps = 400;
        p.distill.lr = 3e-4;
        p.distill.warmup_steps = 20;
        p.distill.synthetic_fraction = 0.2;
        p.longctx.seq_len = 8192;  // 4x stage 2, the teacher's whole window
        p.longctx.batch_size = 2;
        p.longctx.steps = p.longctx.schedule_steps = 50;
        p.longctx.lr = 1e-4;
        p.longctx.kl_max_position = 8192;
        p.longctx.synthetic_fraction = 0.3;
        p.longctx.recompute = true;
        // KL only: the rows stay inside the teacher's window, where it has a distribution for every position.
        // A cross-entropy term fits the corpus instead, away from the teacher: CE 1.0 + KL 0.5 for 20 steps
        // took a 50M-token student from 0.194 to 0.289 nats of held-out KL (docs/BENCHMARKS.md).
        p.longctx.ce_weight = 0.0;
        p.longctx.kl_weight = 1.0;
        // The preset reads the scores `hydra score-heads` computed for this model (committed with their
        // settings in docs/results/smollm2_scores), so every run selects the same heads; score.file=""
        // scores again (on the GPU in seconds, on a CPU in hours).
        p.score_file = std::string(HYDRA_SOURCE_DIR) + "/docs/results/smollm2_scores/scores.json";
        p.score_tasks = {"niah_single_1", "niah_multikey_1", "passkey"};
        p.score_lengths = {1024};
        p.score_samples = 8;
        p.ablation_samples = 20;
        p.calib_tokens = 2048;
        // 50 samples per task and length: a 95% interval of about +-14 points at a score of 50, where 10
        // samples left about +-30. niah_single_2 and vt never appear as synthetic training rows
        // (synthetic_tasks above), so they measure what the conversion kept rather than a format the
        // stages taught: the report shows them as the held-out task group. 16K and 32K lie beyond the
        // teacher's 8K window (length generalisation); eval.lengths=[2048,4096,8192] drops them.
        p.eval_tasks = {"niah_single_1", "niah_single_2", "niah_multikey_1", "passkey", "vt"};
        p.eval_lengths = {2048, 4096, 8192, 16384, 32768};
        p.eval_samples = 50;
        p.heldout_tokens = 1 << 20;  // 512 windows of 2048 tokens
        p.variants = {{"hydra-7:1-scores", "scores", "7:1", "kv", "scale-norm", "", 1},
                      {"hydra-7:1-random", "random", "7:1", "kv", "scale-norm", "", 1},
                      {"layerwise-3:1", "layerwise", "3:1", "kv", "none", "", 1},
                      {"all-la", "all-la", "", "kv", "scale-norm", "", 1}};
        return p;
    }
    std::string names;
    for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
    fail("unknown pipeline preset '{}' (presets: {})", name, names);
}

void PipelineConfig::apply(const json& object, const std::string& origin) {
    HYDRA_CHECK(object.is_object(), "{}: the pipeline config must be an object", origin);
    for (const auto& [key, v] : object.items()) {
        const std::string w = origin + ": " + key;
        if (key == "name")
            name = string(v, w);
        else if (key == "teacher")
            teacher = string(v, w);
        else if (key == "device")
            device = string(v, w);
        else if (key == "teacher_train")
            teacher_train.apply(v, w);
        else if (key == "align")
            align.apply(v, w);
        else if (key == "distill")
            distill.apply(v, w);
        else if (key == "longctx")
            longctx.apply(v, w);
        else if (key == "calib_tokens")
            calib_tokens = integer(v, w);
        else if (key == "variants") {
            HYDRA_CHECK(v.is_array(), "{}: expected a list of variants", w);
            variants.clear();
            for (size_t i = 0; i < v.size(); ++i)
                variants.push_back(parse_variant(v[i], fmt::format("{}[{}]", w, i)));
        } else if (key == "variants_only") {
            // keeps the named variants of those defined so far (a preset's study run in parts, one GPU
            // session each; `hydra report merge` joins the parts)
            HYDRA_CHECK(v.is_array() && !v.empty(), "{}: expected a non-empty list of variant names", w);
            std::vector<PipelineVariant> kept;
            for (size_t i = 0; i < v.size(); ++i) {
                const std::string n = string(v[i], fmt::format("{}[{}]", w, i));
                const auto it = std::find_if(variants.begin(), variants.end(),
                                             [&](const PipelineVariant& x) { return x.name == n; });
                if (it == variants.end()) {
                    std::string names;
                    for (const PipelineVariant& x : variants) names += (names.empty() ? "" : ", ") + x.name;
                    fail("{}: no variant named '{}' (variants: {})", w, n, names);
                }
                kept.push_back(*it);
            }
            variants = std::move(kept);
        } else if (key == "score") {
            HYDRA_CHECK(v.is_object(), "{}: expected an object", w);
            for (const auto& [k, e] : v.items()) {
                const std::string ww = w + "." + k;
                if (k == "methods")
                    score_methods = strings(e, ww);
                else if (k == "tasks")
                    score_tasks = strings(e, ww);
                else if (k == "lengths")
                    score_lengths = integers(e, ww);
                else if (k == "samples")
                    score_samples = integer(e, ww);
                else if (k == "ablation_samples")
                    ablation_samples = integer(e, ww);
                else if (k == "file")
                    score_file = string(e, ww);
                else
                    fail(
                        "{}: unknown key (score keys: methods, tasks, lengths, samples, ablation_samples, "
                        "file)",
                        ww);
            }
        } else if (key == "eval") {
            HYDRA_CHECK(v.is_object(), "{}: expected an object", w);
            for (const auto& [k, e] : v.items()) {
                const std::string ww = w + "." + k;
                if (k == "tasks")
                    eval_tasks = strings(e, ww);
                else if (k == "lengths")
                    eval_lengths = integers(e, ww);
                else if (k == "samples")
                    eval_samples = integer(e, ww);
                else if (k == "heldout_tokens")
                    heldout_tokens = integer(e, ww);
                else if (k == "heldout_text")
                    heldout_text = string(e, ww);
                else if (k == "heldout_shards")
                    heldout_shards = string(e, ww);
                else if (k == "bootstrap_resamples")
                    bootstrap_resamples = integer(e, ww);
                else if (k == "teacher") {
                    HYDRA_CHECK(e.is_boolean(), "{}: expected true or false, found {}", ww, json_kind(e));
                    eval_teacher = e.get<bool>();
                } else
                    fail(
                        "{}: unknown key (eval keys: tasks, lengths, samples, heldout_tokens, "
                        "heldout_shards, heldout_text, bootstrap_resamples, teacher)",
                        ww);
            }
        } else {
            fail(
                "{}: unknown key (keys: name, teacher, device, teacher_train, score, calib_tokens, variants, "
                "align, "
                "distill, longctx, eval)",
                w);
        }
    }
}

void PipelineConfig::apply_override(const std::string& assignment) {
    const size_t eq = assignment.find('=');
    HYDRA_CHECK(eq != std::string::npos && eq > 0, "override '{}': expected key=value", assignment);
    const std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
    const size_t dot = key.find('.');
    const std::string head = key.substr(0, dot);
    if (dot != std::string::npos &&
        (head == "align" || head == "distill" || head == "longctx" || head == "teacher_train")) {
        TrainConfig& c = head == "align"     ? align
                         : head == "distill" ? distill
                         : head == "longctx" ? longctx
                                             : teacher_train;
        c.apply_override(key.substr(dot + 1) + "=" + value);
        return;
    }
    // Depth-limited: the value is copied into the nested object below (a copy recurses per level).
    json nested = try_parse_json_bounded(value).value_or(json(value));
    std::string rest = key;
    std::vector<std::string> parts;
    for (size_t p = 0; (p = rest.find('.')) != std::string::npos; rest = rest.substr(p + 1))
        parts.push_back(rest.substr(0, p));
    parts.push_back(rest);
    for (size_t i = parts.size(); i-- > 0;) nested = json{{parts[i], nested}};
    apply(nested, "override '" + assignment + "'");
}

std::vector<std::string> PipelineConfig::heldout_tasks() const {
    std::vector<std::string> out;
    for (const std::string& t : eval_tasks) {
        bool trained = false;
        for (const TrainConfig* s : {&align, &distill, &longctx, teacher.empty() ? &teacher_train : &align})
            trained |= s->synthetic_fraction > 0 &&
                       std::find(s->synthetic_tasks.begin(), s->synthetic_tasks.end(), t) !=
                           s->synthetic_tasks.end();
        if (!trained) out.push_back(t);
    }
    return out;
}

void PipelineConfig::validate() const {
    HYDRA_CHECK(!variants.empty(), "pipeline: no variants to build");
    const std::vector<std::string> order = {"align", "distill", "longctx"};
    for (const PipelineVariant& v : variants) {
        HYDRA_CHECK(v.name.find('/') == std::string::npos && v.name != "teacher" && v.name != "eval",
                    "pipeline: variant name '{}' must be a plain directory name other than teacher/eval",
                    v.name);
        // stages: known names, each once, in pipeline order
        size_t next = 0;
        for (const std::string& st : v.stages) {
            const auto it = std::find(order.begin(), order.end(), st);
            HYDRA_CHECK(it != order.end(),
                        "pipeline: variant '{}': unknown stage '{}' (align, distill, longctx)", v.name, st);
            const size_t at = size_t(it - order.begin());
            HYDRA_CHECK(at >= next,
                        "pipeline: variant '{}': stages must be in the order align, distill, longctx, "
                        "each at most once",
                        v.name);
            next = at + 1;
        }
        HYDRA_CHECK(v.score_method.empty() || v.select == "scores",
                    "pipeline: variant '{}': score_method is for select scores (select is {})", v.name,
                    v.select);
        HYDRA_CHECK(
            v.score_method.empty() || !score_file.empty() ||
                std::find(score_methods.begin(), score_methods.end(), v.score_method) != score_methods.end(),
            "pipeline: variant '{}': score_method '{}' is not among score.methods, which this run scores "
            "(add it there, or give score.file)",
            v.name, v.score_method);
        if (!v.rope_scaling.empty() && v.rope_scaling.rfind("ntk:", 0) != 0) {
            try {
                (void)parse_rope_scaling_spec(v.rope_scaling);
            } catch (const Error& e) {
                fail("pipeline: variant '{}': rope_scaling: {}", v.name, e.what());
            }
        }
        HYDRA_CHECK(
            v.window >= 0 && v.sinks >= 0 && (v.window > 0 || v.sinks == 0),
            "pipeline: variant '{}': window {} and sinks {} (sinks need a window > 0; neither negative)",
            v.name, v.window, v.sinks);
        HYDRA_CHECK(
            v.window == 0 || std::find(v.stages.begin(), v.stages.end(), "align") == v.stages.end(),
            "pipeline: variant '{}': a sliding-window variant has no new heads for the align stage to "
            "train (stages: distill, longctx)",
            v.name);
        HYDRA_CHECK(
            v.window == 0 || (v.select != "all-fa" && !v.nope),
            "pipeline: variant '{}': a sliding window replaces LA heads: it needs a selection with LA "
            "heads (not all-fa) and keeps RoPE (no nope)",
            v.name);
        if (v.select == "all-fa") {
            HYDRA_CHECK(!v.nope,
                        "pipeline: variant '{}': nope needs LA heads to carry order (select all-fa has none)",
                        v.name);
            for (const std::string& st : v.stages)
                HYDRA_CHECK(
                    st == "longctx",
                    "pipeline: variant '{}': an all-fa variant (the teacher) runs at most the longctx stage, "
                    "not {} (it has no LA heads to align or distill)",
                    v.name, st);
        }
    }
    HYDRA_CHECK(!eval_lengths.empty() && eval_samples > 0, "pipeline: eval needs lengths and samples > 0");
    HYDRA_CHECK(score_samples > 0 && !score_lengths.empty(), "pipeline: score needs lengths and samples > 0");
    HYDRA_CHECK(ablation_samples > 0, "pipeline: score.ablation_samples must be > 0");
    HYDRA_CHECK(calib_tokens >= 0, "pipeline: calib_tokens must be >= 0");
    HYDRA_CHECK(heldout_tokens >= 1, "pipeline: eval.heldout_tokens must be >= 1");
    HYDRA_CHECK(bootstrap_resamples >= 1 && bootstrap_resamples <= 1000000,
                "pipeline: eval.bootstrap_resamples must be in [1, 1000000]");
    HYDRA_CHECK(device == "cpu" || device == "cuda", "pipeline: device '{}' is not cpu or cuda", device);
    if (teacher.empty()) teacher_train.validate();
}

json PipelineConfig::to_json() const {
    json j;
    j["name"] = name;
    j["teacher"] = teacher;
    j["device"] = device;
    if (teacher.empty()) j["teacher_train"] = teacher_train.to_json();
    j["score"] = {{"methods", score_methods},
                  {"tasks", score_tasks},
                  {"lengths", score_lengths},
                  {"samples", score_samples},
                  {"ablation_samples", ablation_samples},
                  {"file", score_file}};
    j["calib_tokens"] = calib_tokens;
    j["variants"] = json::array();
    for (const auto& v : variants) j["variants"].push_back(variant_json(v));
    j["align"] = align.to_json();
    j["distill"] = distill.to_json();
    j["longctx"] = longctx.to_json();
    j["eval"] = {{"tasks", eval_tasks},
                 {"lengths", eval_lengths},
                 {"samples", eval_samples},
                 {"heldout_tokens", heldout_tokens},
                 {"heldout_shards", heldout_shards},
                 {"heldout_text", heldout_text},
                 {"bootstrap_resamples", bootstrap_resamples},
                 {"teacher", eval_teacher}};
    return j;
}

}  // namespace hydra
