// results.json / results.csv / scores.png writers (see results_io.h).
#include "eval/results_io.h"

#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "io/atomic_dir.h"
#include "report/line_plot.h"

namespace hydra {

namespace {
double round2(double v) {
    return std::round(v * 100.0) / 100.0;
}
std::string model_label(const std::string& path) {
    std::filesystem::path p(path);
    std::string name = p.filename().string();
    if (name.empty()) name = p.parent_path().filename().string();
    return name;
}
}  // namespace

nlohmann::json results_to_json(const EvalRunInfo& info, const std::vector<ModelEvalResult>& results) {
    nlohmann::json j;
    j["suite"] = info.suite;
    j["tasks"] = info.settings.tasks;
    j["lengths"] = info.settings.lengths;
    j["samples_per_task_length"] = info.settings.samples;
    j["seed"] = info.settings.seed;
    j["prompt_format"] = info.prompt_format;
    j["prompt_style"] = info.prompt_style;
    j["device"] = info.device;
    j["scoring"] = "RULER string_match_all/part x100; length = mean over tasks; overall = mean over lengths";
    j["models"] = nlohmann::json::array();
    for (const ModelEvalResult& r : results) {
        nlohmann::json m;
        m["model"] = r.model;
        m["seconds"] = r.seconds;
        m["overall"] = round2(r.overall);
        for (const auto& [len, v] : r.length_scores) m["per_length"][std::to_string(len)] = round2(v);
        for (const auto& [task, lv] : r.task_scores)
            for (const auto& [len, v] : lv) m["scores"][task][std::to_string(len)] = round2(v);
        m["samples"] = nlohmann::json::array();
        for (const SampleOutcome& s : r.samples)
            m["samples"].push_back({{"task", s.task},
                                    {"length", s.length},
                                    {"index", s.index},
                                    {"prompt_tokens", s.prompt_tokens},
                                    {"score", s.score},
                                    {"answers", s.answers},
                                    {"output", s.output},
                                    {"generated_tokens", s.generated},
                                    {"prefill_s", s.prefill_seconds},
                                    {"decode_s", s.decode_seconds},
                                    {"build_s", s.generate_seconds}});
        j["models"].push_back(m);
    }
    return j;
}

void write_results_json(const std::string& path, const EvalRunInfo& info,
                        const std::vector<ModelEvalResult>& results) {
    // dump with replace: model outputs may hold invalid UTF-8 (a character cut by max_new_tokens)
    write_text_file(
        path,
        results_to_json(info, results).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::string results_to_csv(const std::vector<ModelEvalResult>& results) {
    std::string out = "model,task,length,score,samples,mean_prefill_s,mean_decode_s\n";
    for (const ModelEvalResult& r : results) {
        for (const auto& [task, lv] : r.task_scores)
            for (const auto& [len, v] : lv) {
                double pf = 0, dc = 0;
                int64_t n = 0;
                for (const SampleOutcome& s : r.samples)
                    if (s.task == task && s.length == len) {
                        pf += s.prefill_seconds;
                        dc += s.decode_seconds;
                        ++n;
                    }
                out += fmt::format("\"{}\",{},{},{:.2f},{},{:.3f},{:.3f}\n", r.model, task, len, v, n,
                                   pf / double(n), dc / double(n));
            }
        for (const auto& [len, v] : r.length_scores)
            out += fmt::format("\"{}\",overall,{},{:.2f},,,\n", r.model, len, v);
    }
    return out;
}

void write_results_csv(const std::string& path, const std::vector<ModelEvalResult>& results) {
    write_text_file(path, results_to_csv(results));
}

void write_score_plot(const std::string& path, const std::vector<ModelEvalResult>& results) {
    std::vector<Series> series;
    bool log_x = true;
    std::set<int64_t> lens;
    for (const ModelEvalResult& r : results) {
        Series s;
        s.label = model_label(r.model);
        for (const auto& [len, v] : r.length_scores) {
            s.x.push_back(double(len));
            s.y.push_back(v);
            lens.insert(len);
        }
        series.push_back(std::move(s));
    }
    if (lens.size() < 2) log_x = false;
    LinePlotOptions o;
    o.title = "Score vs context length (mean over tasks)";
    o.x_label = "prompt length (tokens)";
    o.y_label = "score";
    o.log_x = log_x;
    o.y_min = 0;
    o.y_max = 100;
    write_line_plot(path, series, o);
}

std::string results_table(const ModelEvalResult& r) {
    std::set<int64_t> lens;
    for (const auto& [len, v] : r.length_scores) lens.insert(len);
    std::string out = fmt::format("{}\n{:<18}", r.model, "task");
    for (int64_t l : lens) out += fmt::format("{:>9}", l);
    out += "\n";
    for (const auto& [task, lv] : r.task_scores) {
        out += fmt::format("{:<18}", task);
        for (int64_t l : lens)
            out += lv.count(l) ? fmt::format("{:>9.1f}", lv.at(l)) : fmt::format("{:>9}", "-");
        out += "\n";
    }
    out += fmt::format("{:<18}", "mean");
    for (int64_t l : lens) out += fmt::format("{:>9.1f}", r.length_scores.at(l));
    out += fmt::format("\noverall {:.2f}  ({:.1f} s)\n", r.overall, r.seconds);
    return out;
}

}  // namespace hydra
