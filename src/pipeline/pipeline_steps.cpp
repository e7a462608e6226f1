// Steps shared by the pipeline and the demo (see pipeline_steps.h).
#include "pipeline/pipeline_steps.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

#include <fmt/ranges.h>

#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "io/json_member.h"
#include "model/head_ablation.h"
#include "model/model_loader.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string default_prose(const std::string& name) {
    if (const char* env = std::getenv("HYDRA_CACHE"); env && *env) return std::string(env) + "/prose/" + name;
    return std::string(HYDRA_SOURCE_DIR) + "/.cache/prose/" + name;
}

std::vector<int32_t> prose_tokens(const ModelText& text, const std::string& file, int64_t count,
                                  int64_t skip_bytes) {
    if (count <= 0 || !fs::exists(file)) return {};
    std::string s = read_text_file(file);
    if (int64_t(s.size()) > skip_bytes + 64 * count) s = s.substr(size_t(skip_bytes));
    s = s.substr(0, size_t(std::min<int64_t>(int64_t(s.size()), 8 * count + 1024)));
    std::vector<int32_t> ids = text.encoder->encode(s);
    if (int64_t(ids.size()) > count) ids.resize(size_t(count));
    return ids;
}

TrainConfig without_heldout(TrainConfig tc, const std::string& heldout, const std::string& label) {
    if (heldout.empty() || !fs::exists(heldout)) return tc;
    std::vector<std::string> kept;
    bool dropped = false;
    for (const std::string& f : training_source_files(tc)) {
        std::error_code ec;
        if (fs::equivalent(f, heldout, ec))
            dropped = true;
        else
            kept.push_back(fs::absolute(f).string());
    }
    if (!dropped) return tc;
    HYDRA_CHECK(!kept.empty(), "{}: data.sources holds only the held-out text {}; give the stage other prose",
                label, heldout);
    tc.sources = kept;
    return tc;
}

bool stage_complete(const fs::path& dir, int64_t steps) {
    if (!fs::exists(dir / "state.json") || !fs::exists(dir / "model.safetensors")) return false;
    const std::optional<json> st = try_parse_json_bounded(read_text_file(dir / "state.json"));
    if (!st || !st->is_object()) return false;
    const json* step = json_member(*st, "step");
    return step && step->is_number_integer() && step->get<int64_t>() >= steps;
}

bool train_stage_resumable(const TrainConfig& tc, const fs::path& dir,
                           const std::function<void(const StepLog&)>& on_step,
                           const DataLoader::Generator& synthetic, const TrainEngineFactory& engine) {
    if (stage_complete(dir, tc.steps)) return false;
    const bool resume = fs::exists(dir / "state.json");
    // a resumed run keeps the config saved with it but for the step count, which the pipeline's may have
    // grown since (without the override the stage would end at its old count, short of tc.steps)
    run_training(tc, dir.string(), resume ? std::optional(dir.string()) : std::nullopt,
                 resume ? std::optional(tc.steps) : std::nullopt, on_step, synthetic, engine);
    return true;
}

namespace {

// A copy of the teacher with `heads` zero-ablated (model/head_ablation.h).
std::unique_ptr<LlamaModel> ablated_copy(const LlamaModel& m, const std::vector<HeadRef>& heads) {
    auto copy = std::make_unique<LlamaModel>(m.config(), &m.plan());
    std::copy_n(m.params().data(), m.params().numel(), copy->params().data());
    zero_ablate_heads(*copy, heads);
    return copy;
}

}  // namespace

json ablation_check(const LlamaModel& teacher, const ModelText& text,
                    const std::vector<const TaskGenerator*>& tasks,
                    const std::vector<std::string>& task_names, const std::vector<double>& aggregate,
                    int64_t length, int64_t samples, const std::vector<uint64_t>& random_seeds,
                    const ModelGenerator& generator, const json& done,
                    const std::function<void(const json&)>& checkpoint,
                    const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
    const ModelConfig& c = teacher.config();
    const int64_t L = c.num_layers, H = c.num_heads, n = std::max<int64_t>(1, (L * H + 7) / 8);
    HYDRA_CHECK(int64_t(aggregate.size()) == L * H, "ablation check: {} scores for {} heads",
                aggregate.size(), L * H);
    EvalSettings es;
    es.tasks = task_names;
    es.lengths = {length};
    es.samples = samples;
    es.context_limit = length + 256;
    SampleCache cache;  // the same samples for every ablation
    es.sample_cache = &cache;
    auto accuracy = [&](const std::string& label, const LlamaModel& m) {
        const GenerateFn gen = generator ? generator(m, es.context_limit) : GenerateFn{};
        return run_eval(
                   "ablation", m, tasks, text, es,
                   [&](int64_t d, int64_t total, const std::string&) {
                       if (progress) progress(label, d, total);
                   },
                   gen)
            .overall;
    };
    std::vector<std::vector<double>> table(static_cast<size_t>(L),
                                           std::vector<double>(static_cast<size_t>(H), 0.0));
    for (int64_t i = 0; i < L * H; ++i) table[size_t(i / H)][size_t(i % H)] = aggregate[size_t(i)];
    // An earlier partial result counts only when it was measured the same way.
    const bool same = done.is_object() && done.value("heads_ablated", int64_t(-1)) == n &&
                      done.value("length", int64_t(-1)) == length &&
                      done.value("samples_per_task", int64_t(-1)) == samples &&
                      done.value("tasks", json::array()) == json(task_names);
    json j;
    j["heads_ablated"] = n;
    j["length"] = length;
    j["samples_per_task"] = samples;
    j["tasks"] = task_names;
    auto condition = [&](const std::string& key, const std::function<double()>& measure) {
        j[key] = same && done.contains(key) ? done[key].get<double>() : measure();
        if (checkpoint) checkpoint(j);
    };
    condition("none", [&] { return accuracy("intact", teacher); });
    condition("top_scored",
              [&] { return accuracy("top-scored", *ablated_copy(teacher, top_scored_heads(table, n))); });
    json random = json::array();
    for (uint64_t seed : random_seeds) {
        const std::string key = fmt::format("random_{}", seed);
        condition(key, [&] {
            return accuracy(fmt::format("random seed {}", seed),
                            *ablated_copy(teacher, random_heads(L, H, n, seed)));
        });
        random.push_back({{"seed", seed}, {"accuracy", j[key]}});
    }
    for (uint64_t seed : random_seeds) j.erase(fmt::format("random_{}", seed));
    j["random"] = random;
    return j;
}

std::string ablation_summary(const json& ab) {
    std::string random;
    for (const json& r : ab["random"])
        random += fmt::format("{}{:.1f}", random.empty() ? "" : " / ", r["accuracy"].get<double>());
    return fmt::format(
        "ablation: accuracy {:.1f} intact, {:.1f} without the top-scored eighth, random eighths {}",
        ab["none"].get<double>(), ab["top_scored"].get<double>(), random);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

json read_json_or(const fs::path& path, json fallback) {
    if (!fs::exists(path)) return fallback;
    std::optional<json> j = try_parse_json_bounded(read_text_file(path));
    return j ? std::move(*j) : fallback;
}

void write_json(const fs::path& path, const json& j) {
    write_text_file(path, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

std::function<bool(const std::string&)> steps_forced_from(const std::vector<std::string>& steps,
                                                          const std::string& from, const std::string& what) {
    size_t from_index = steps.size();
    if (!from.empty()) {
        auto it = std::find(steps.begin(), steps.end(), from);
        HYDRA_CHECK(it != steps.end(), "--from: '{}' is not a {} step ({})", from, what,
                    fmt::format("{}", fmt::join(steps, ", ")));
        from_index = size_t(it - steps.begin());
    }
    return [steps, from_index](const std::string& step) {
        return size_t(std::find(steps.begin(), steps.end(), step) - steps.begin()) >= from_index;
    };
}

}  // namespace hydra
