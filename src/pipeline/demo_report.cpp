// `hydra demo`'s report (see demo_report.h).
#include "pipeline/demo_report.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "core/threading.h"
#include "eval/bootstrap.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "io/json_member.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::optional<GpuReportRef> latest_gpu_report(const std::string& results_dir) {
    std::error_code ec;
    if (!fs::is_directory(results_dir, ec)) return std::nullopt;
    std::optional<GpuReportRef> best;
    for (const fs::directory_entry& e : fs::directory_iterator(results_dir, ec)) {
        const fs::path report = e.path() / "report.md", config = e.path() / "pipeline_config.json";
        if (!fs::exists(report, ec) || !fs::exists(config, ec)) continue;
        const std::optional<json> c = try_parse_json_bounded(read_text_file(config));
        const json* device = c ? json_member(*c, "device") : nullptr;
        if (!device || *device != "cuda") continue;
        // The pipeline's report: "# title", "", "YYYY-MM-DD HH:MM UTC; ...", then sections.
        std::istringstream in(read_text_file(report));
        std::string line, date, results;
        bool in_results = false;
        while (std::getline(in, line)) {
            if (date.empty() && line.size() >= 20 && line[4] == '-' && line.find(" UTC") != std::string::npos)
                date = line.substr(0, line.find(" UTC") + 4);
            if (line.rfind("## ", 0) == 0) in_results = line == "## Results";
            if (in_results && line.rfind("|", 0) == 0) results += line + "\n";
        }
        if (date.empty()) continue;
        if (!best || date > best->date) best = GpuReportRef{report.string(), date, results};
    }
    return best;
}

namespace {

std::string seconds_text(const json& timings, const std::string& key) {
    if (!timings.contains(key)) return "-";
    const double s = timings[key].value("seconds", 0.0);
    return s >= 120 ? fmt::format("{:.1f} min", s / 60) : fmt::format("{:.0f} s", s);
}

// "2.3441 [2.1012, 2.5990]" from a held-out metrics JSON's `key` and `key`_ci (heldout_metrics_json);
// the value alone where the interval is absent (an agreement.json of an older demo run).
std::string value_with_interval(const json& metrics, const std::string& key, int digits) {
    const json* v = json_member(metrics, key);
    if (!v || !v->is_number()) return "-";
    const json* ci = json_member(metrics, key + "_ci");
    return format_with_interval(v->get<double>(), ci ? interval_from_json(*ci) : Interval{NAN, NAN}, digits);
}

std::string utc_now() {
    const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
    return buf;
}

}  // namespace

std::string write_demo_report(const DemoReportInputs& in) {
    const PipelineConfig& cfg = *in.config;
    const fs::path out(in.out_dir);
    std::string md = fmt::format("# HydraHead demo: {}\n\n{}; output directory `{}`.\n\n",
                                 fs::path(cfg.teacher).filename().string(), utc_now(), out.string());
    md += fmt::format(
        "The method on the teacher `{}` at CPU sizes: score its heads, check causally that the top-scored "
        "heads "
        "matter for retrieval, convert it 7:1 keeping the interpretability-selected KV groups as full "
        "attention, "
        "and recover it briefly. Every figure below was measured in this run; the sample counts are small "
        "(sized for a few minutes on 2 cores), so read them as a demonstration of the method, and the GPU "
        "report of section 6 for the full-budget figures.\n\n",
        cfg.teacher);

    // 1. Scores.
    const json& sc = in.scores;
    md += "## 1. Head scores (the fast screen)\n\n";
    md += fmt::format(
        "Attribution patching (a first-order estimate of every head's effect on the answer's logit "
        "difference, "
        "one backward pass per direction) on {} clean/corrupted pair(s) per task ({} used) of {} at {} "
        "tokens; "
        "{} heads scored in {}.\n\n",
        sc.value("pairs_per_task", int64_t(0)), sc.value("pairs_used", int64_t(0)),
        fmt::join(sc.value("tasks", std::vector<std::string>{}), ", "),
        fmt::join(sc.value("lengths", std::vector<int64_t>{}), ", "), sc.value("heads", int64_t(0)),
        seconds_text(in.timings, "score"));
    md += "| rank | head | score |\n|---|---|---|\n";
    int rank = 0;
    for (const json& t : sc.value("top", json::array()))
        md += fmt::format("| {} | L{}.H{} | {:.3f} |\n", ++rank, t["layer"].get<int64_t>(),
                          t["head"].get<int64_t>(), t["score"].get<double>());
    if (fs::exists(out / "heads.png")) md += "\n![head scores](heads.png)\n";
    md += "\n";

    // 2. Ablation.
    const json& ab = in.ablation;
    md += "## 2. The causal check\n\n";
    md += fmt::format(
        "Retrieval accuracy (RULER string match x 100) of the teacher on {} at {} tokens, {} samples per "
        "condition, "
        "the same samples in every row; {} heads (an eighth) zero-ablated ({}).\n\n",
        fmt::join(ab.value("tasks", std::vector<std::string>{}), ", "), ab.value("length", int64_t(0)),
        ab.value("samples_per_task", int64_t(0)), ab.value("heads_ablated", int64_t(0)),
        seconds_text(in.timings, "ablation"));
    md += "| heads ablated | accuracy |\n|---|---|\n";
    md += fmt::format("| none | {:.1f} |\n", ab.value("none", 0.0));
    md += fmt::format("| top-scored eighth | {:.1f} |\n", ab.value("top_scored", 0.0));
    double random_mean = 0;
    int n_random = 0;
    for (const json& r : ab.value("random", json::array())) {
        md += fmt::format("| random eighth (seed {}) | {:.1f} |\n", r["seed"].get<uint64_t>(),
                          r["accuracy"].get<double>());
        random_mean += r["accuracy"].get<double>(), ++n_random;
    }
    if (n_random) random_mean /= n_random;
    md += fmt::format(
        "\nAblating the top-scored eighth {} retrieval ({:.1f} -> {:.1f}); random eighths average {:.1f}. "
        "With {} "
        "samples per row one sample moves a row by {:.0f} points: the full-size check (20 samples per task, "
        "three "
        "tasks) is in `docs/results/smollm2_ablation/`.\n\n",
        ab.value("top_scored", 0.0) < random_mean ? "hurts" : "does not hurt more than random",
        ab.value("none", 0.0), ab.value("top_scored", 0.0), random_mean,
        ab.value("samples_per_task", int64_t(0)),
        100.0 / double(std::max<int64_t>(1, ab.value("samples_per_task", int64_t(1)) *
                                                int64_t(ab.value("tasks", json::array()).size()))));

    // 3. Conversion.
    const json& cv = in.conversion;
    const int64_t kv_t = cv.value("kv_bytes_per_token_teacher", int64_t(0)),
                  kv_h = cv.value("kv_bytes_per_token_hybrid", int64_t(0));
    md += "## 3. Conversion 7:1 and the KV cache\n\n";
    md += fmt::format(
        "Plan: {} ({} selection, {} granularity): {} of {} KV groups keep full attention, every other head "
        "becomes "
        "a Gated DeltaNet head initialised from the same weights ({}).\n\n",
        cv.value("plan", std::string()), cv.value("selection", std::string()),
        cv.value("granularity", std::string()), cv.value("fa_kv_groups", int64_t(0)),
        cv.value("kv_groups", int64_t(0)), seconds_text(in.timings, "convert"));
    md += "| | teacher | 7:1 hybrid |\n|---|---|---|\n";
    md += fmt::format("| KV cache, bytes per token (bf16) | {} | {} ({:.3f}x) |\n", kv_t, kv_h,
                      kv_t ? double(kv_h) / double(kv_t) : 0.0);
    for (int64_t len : {8192, 131072})
        md += fmt::format("| KV cache at {}K tokens | {:.1f} MiB | {:.1f} MiB |\n", len / 1024,
                          double(kv_t * len) / (1 << 20), double(kv_h * len) / (1 << 20));
    md += fmt::format("| recurrent state per sequence (fp32, any length) | 0 | {:.1f} MiB |\n",
                      double(cv.value("state_bytes", int64_t(0))) / (1 << 20));
    md += fmt::format("| parameters | {:.1f}M | {:.1f}M |\n\n",
                      double(cv.value("parameters_teacher", int64_t(0))) / 1e6,
                      double(cv.value("parameters_hybrid", int64_t(0))) / 1e6);

    // 4. Recovery.
    md += "## 4. A short recovery, measured on held-out text\n\n";
    const json& ag = in.agreement;
    md += fmt::format(
        "KL(teacher || student) per token, top-1 agreement and the student's perplexity on the same {} "
        "predicted tokens ({} windows) of `{}` (never trained on: every stage's data leaves it out), after "
        "each "
        "stage; brackets: 95% bootstrap intervals over windows.\n\n",
        ag.contains("converted") ? ag["converted"].value("tokens", int64_t(0)) : 0,
        ag.contains("converted") ? ag["converted"].value("windows", int64_t(0)) : 0,
        fs::path(cfg.heldout_text.empty() ? "austen_persuasion.txt" : cfg.heldout_text).filename().string());
    md +=
        "| model | stage | tokens trained | train loss (first -> last) | held-out KL(t\\|\\|s) | top-1 agree "
        "| ppl | wall time |\n";
    md += "|---|---|---|---|---|---|---|---|\n";
    auto row = [&](const std::string& label, const std::string& key, const std::string& stage_text) {
        if (!ag.contains(key)) return;
        const json& a = ag[key];
        std::string trained = "0", loss = "-", time = "-";
        if (in.stages.contains(key)) {
            const json& s = in.stages[key];
            trained = fmt::format("{}", s.value("tokens", int64_t(0)));
            if (s.contains("first_loss"))
                loss = fmt::format("{:.4f} -> {:.4f}", s["first_loss"].get<double>(),
                                   s["last_loss"].get<double>());
            time = seconds_text(in.timings, key);
        }
        md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} |\n", label, stage_text, trained, loss,
                          value_with_interval(a, "kl", 4), value_with_interval(a, "top1_agreement", 3),
                          value_with_interval(a, "ppl", 2), time);
    };
    row("7:1 converted", "converted", "none");
    row("+ stage 1", "align",
        fmt::format("align ({} steps of {} x {})", cfg.align.steps, cfg.align.batch_size, cfg.align.seq_len));
    row("+ stage 2", "distill",
        fmt::format("distill ({} steps of {} x {})", cfg.distill.steps, cfg.distill.batch_size,
                    cfg.distill.seq_len));
    if (ag.contains("converted") && ag.contains("distill"))
        md += fmt::format("\nHeld-out KL {} from {:.4f} to {:.4f} nats per token.",
                          ag["distill"]["kl"].get<double>() < ag["converted"]["kl"].get<double>()
                              ? "falls"
                              : "does not fall",
                          ag["converted"]["kl"].get<double>(), ag["distill"]["kl"].get<double>());
    for (const char* stage : {"align", "distill"})
        if (fs::exists(out / stage / "loss_curve.png"))
            md += fmt::format(" Loss curve of {}: ![{}]({}/loss_curve.png)", stage, stage, stage);
    md += "\n\n";

    // 5. Cost at length.
    if (const json& co = in.cost; co.is_object() && co.contains("teacher") && co.contains("hybrid")) {
        const json &t = co["teacher"], &h = co["hybrid"];
        const double dt = t.value("decode_tokens_per_second", 0.0),
                     dh = h.value("decode_tokens_per_second", 0.0);
        md += "## 5. What a long context costs, on this CPU\n\n";
        md += fmt::format(
            "One sequence of {} random tokens prefilled in one pass, then {} tokens decoded one at a time, "
            "the "
            "teacher and the recovered hybrid each from quantized weights (a GGUF's own, Q8_0 copies of f32 "
            "ones: `--quantize-weights q8_0`); {} threads ({}). The cache holds K / V (fp32) for every "
            "position "
            "of the full-attention heads and the GDN heads' constant state.\n\n",
            co.value("context", int64_t(0)), co.value("decode_tokens", int64_t(0)), num_threads(),
            seconds_text(in.timings, "cost"));
        md += "| | teacher | 7:1 hybrid |\n|---|---|---|\n";
        md += fmt::format("| prefill, s | {:.2f} | {:.2f} |\n", t.value("prefill_seconds", 0.0),
                          h.value("prefill_seconds", 0.0));
        md +=
            fmt::format("| decode, tokens/s | {:.1f} | {:.1f} ({:.2f}x) |\n", dt, dh, dt > 0 ? dh / dt : 0.0);
        md += fmt::format("| cache, MiB | {:.1f} | {:.1f} |\n\n", t.value("cache_bytes", 0.0) / (1 << 20),
                          h.value("cache_bytes", 0.0) / (1 << 20));
        md +=
            "Longer contexts and llama.cpp beside them: `bench/cpu_length_cost.sh`, BENCHMARKS \"Cost at "
            "length "
            "on the CPU\".\n\n";
    }

    // 6. Full budget.
    md += "## 6. The full-budget run\n\n";
    if (in.gpu_report) {
        md += fmt::format(
            "The same pipeline at full budget on one GPU (`hydra pipeline --preset smollm2-gpu`), latest "
            "report "
            "`{}` ({}):\n\n{}\n",
            fs::relative(in.gpu_report->path, std::string(HYDRA_SOURCE_DIR)).string(), in.gpu_report->date,
            in.gpu_report->results);
    } else {
        md +=
            "No GPU pipeline report under docs/results/ (run `hydra pipeline --preset smollm2-gpu` on a "
            "GPU).\n\n";
    }

    // Timings and settings.
    md += "## Wall time per step\n\n| step | wall time |\n|---|---|\n";
    double total = 0;
    for (const auto& [k, v] : in.timings.items()) {
        md += fmt::format("| {} | {} |\n", k, seconds_text(in.timings, k));
        total += v.value("seconds", 0.0);
    }
    md += fmt::format("| total | {:.1f} min |\n\n", total / 60);
    md += "## Settings\n\n```json\n" + cfg.to_json().dump(2) + "\n```\n";
    const std::string path = (out / "report.md").string();
    write_text_file(path, md);
    return path;
}

}  // namespace hydra
