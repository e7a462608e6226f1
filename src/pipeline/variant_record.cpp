// Per-model result records (see variant_record.h).
#include "pipeline/variant_record.h"

#include <ctime>
#include <filesystem>

#include "core/error.h"
#include "io/json_kind.h"
#include "train/corpus_manifest.h"
#include "train/mix_config.h"

namespace hydra {

using json = nlohmann::json;

json variant_record(const VariantRecordInputs& in) {
    const PipelineConfig& cfg = *in.config;
    json j;
    j["format"] = "hydra-variant-result";
    j["version"] = 1;
    j["pipeline"] = cfg.name;
    j["run_dir"] = in.out_dir;
    const std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    j["written"] = date;
    j["model"] = in.name;
    j["path"] = in.path;
    j["teacher"] = in.teacher_path;
    j["device"] = cfg.device;
    j["variant"] = in.variant ? json{{"select", in.variant->select},           {"ratio", in.variant->ratio},
                                     {"granularity", in.variant->granularity}, {"fusion", in.variant->fusion},
                                     {"layers", in.variant->layers},           {"seed", in.variant->seed}}
                              : json(nullptr);
    j["plan"] = in.plan_summary;
    j["kv_bytes_per_token"] = in.kv_bytes_per_token;
    j["state_bytes"] = in.state_bytes;
    int64_t total = 0;
    j["budget"]["stages"] = json::object();
    j["data_mix"]["stages"] = json::object();
    for (const auto& [kind, tc] : in.stages) {
        const int64_t tokens = tc.steps * tc.batch_size * tc.seq_len;
        total += tokens;
        j["budget"]["stages"][kind] = {
            {"steps", tc.steps}, {"batch_size", tc.batch_size}, {"seq_len", tc.seq_len}, {"tokens", tokens}};
        std::vector<std::string> names;
        for (const std::string& s : tc.sources) names.push_back(std::filesystem::path(s).filename().string());
        j["data_mix"]["stages"][kind] = {
            {"sources", names},
            {"shard_dir", tc.shard_dir},
            {"heldout_fraction", tc.heldout_fraction},
            {"synthetic_fraction", tc.synthetic_fraction},
            {"synthetic_tasks", tc.synthetic_fraction > 0 ? json(tc.synthetic_tasks) : json::array()}};
        if (!tc.corpus.empty()) {  // a `hydra corpus` directory replaces the prose files: its weights per source
            json& st = j["data_mix"]["stages"][kind];
            st["corpus"] = tc.corpus;
            st["mix_file"] = tc.mix;
            if (is_corpus_dir(tc.corpus)) {
                const CorpusManifest m = read_corpus_manifest(tc.corpus);
                const std::vector<double> w =
                    tc.mix.empty() ? default_mix_weights(tc.corpus, m) : read_mix_weights(tc.mix, m);
                st["mix_weights"] = json::object();
                for (size_t i = 0; i < m.sources.size(); ++i) st["mix_weights"][m.sources[i].name] = w[i];
            }
        }
    }
    j["budget"]["total_tokens"] = total;
    // Wall time: this model's steps (convert and stages of a variant, its evaluation), as timings.json
    // recorded them (a step resumed in a later session keeps the time it took when it ran).
    double wall = 0;
    j["wall_seconds"]["steps"] = json::object();
    for (const auto& [k, v] : in.timings.items()) {
        const bool own = k.rfind(in.name + "/", 0) == 0 || k == "eval/" + in.name ||
                         k.rfind("eval/" + in.name + "/", 0) == 0;
        if (!own || !v.is_object()) continue;
        const double s = v.value("seconds", 0.0);
        j["wall_seconds"]["steps"][k] = s;
        wall += s;
    }
    j["wall_seconds"]["total"] = wall;
    const EvalRunInfo& info = *in.info;
    json groups = json::object();
    for (const auto& [g, tasks] : info.groups) groups[g] = tasks;
    j["eval_settings"] = {{"tasks", info.settings.tasks},
                          {"lengths", info.settings.lengths},
                          {"samples", info.settings.samples},
                          {"seed", info.settings.seed},
                          {"bootstrap_resamples", info.bootstrap.resamples},
                          {"groups", groups}};
    j["eval"] = model_result_json(*in.result, info);
    j["eval"]["model"] = in.name;
    j["heldout"] = in.heldout;
    return j;
}

void check_variant_record(const json& r, const std::string& where) {
    HYDRA_CHECK(r.is_object(), "{}: expected a JSON object, found {}", where, json_kind(r));
    HYDRA_CHECK(r.value("format", std::string()) == "hydra-variant-result",
                "{}: not a hydra variant result (format must be \"hydra-variant-result\")", where);
    HYDRA_CHECK(r.contains("version") && r["version"].is_number_integer() && r["version"].get<int64_t>() == 1,
                "{}: unsupported version (this hydra reads version 1)", where);
    for (const char* k : {"model", "plan", "pipeline", "run_dir", "device"})
        HYDRA_CHECK(r.contains(k) && r[k].is_string(), "{}: field \"{}\" must be a string", where, k);
    for (const char* k : {"budget", "data_mix", "wall_seconds", "eval_settings", "eval", "heldout"})
        HYDRA_CHECK(r.contains(k) && r[k].is_object(), "{}: field \"{}\" must be an object", where, k);
}

}  // namespace hydra
