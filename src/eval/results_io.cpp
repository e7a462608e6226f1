// results.json / results.csv / scores.png writers and the results.json reader (see results_io.h).
#include "eval/results_io.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_dir.h"
#include "io/json_kind.h"
#include "report/line_plot.h"

namespace hydra {

using json = nlohmann::json;

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

json group_json(const GroupScore& g) {
    json j;
    j["tasks"] = g.tasks;
    j["per_length"] = json::object();
    j["per_length_ci"] = json::object();
    for (const auto& [len, v] : g.length_scores) {
        j["per_length"][std::to_string(len)] = round2(v);
        j["per_length_ci"][std::to_string(len)] = interval_json(g.length_ci.at(len));
    }
    j["overall"] = std::isfinite(g.overall) ? json(round2(g.overall)) : json(nullptr);
    j["overall_ci"] = interval_json(g.overall_ci);
    return j;
}

}  // namespace

json model_result_json(const ModelEvalResult& r, const EvalRunInfo& info) {
    json m;
    m["model"] = r.model;
    m["seconds"] = r.seconds;
    m["overall"] = round2(r.overall);
    m["overall_ci"] = interval_json(r.overall_ci);
    for (const auto& [len, v] : r.length_scores) {
        m["per_length"][std::to_string(len)] = round2(v);
        if (auto it = r.length_ci.find(len); it != r.length_ci.end())
            m["per_length_ci"][std::to_string(len)] = interval_json(it->second);
    }
    for (const auto& [task, lv] : r.task_scores)
        for (const auto& [len, v] : lv) {
            m["scores"][task][std::to_string(len)] = round2(v);
            if (auto t = r.task_ci.find(task); t != r.task_ci.end())
                if (auto it = t->second.find(len); it != t->second.end())
                    m["scores_ci"][task][std::to_string(len)] = interval_json(it->second);
        }
    for (const auto& [name, tasks] : info.groups)
        m["groups"][name] = group_json(group_score(r, tasks, info.bootstrap));
    m["samples"] = json::array();
    for (const SampleOutcome& s : r.samples) {
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
        if (!s.id.empty()) m["samples"].back()["id"] = s.id;
    }
    return m;
}

json results_to_json(const EvalRunInfo& info, const std::vector<ModelEvalResult>& results) {
    json j;
    j["suite"] = info.suite;
    j["tasks"] = info.settings.tasks;
    j["lengths"] = info.settings.lengths;
    j["samples_per_task_length"] = info.settings.samples;
    j["seed"] = info.settings.seed;
    j["prompt_format"] = info.prompt_format;
    j["prompt_style"] = info.prompt_style;
    j["device"] = info.device;
    if (!info.tasks_file.empty()) j["tasks_file"] = info.tasks_file;
    j["scoring"] = "RULER string_match_all/part x100; length = mean over tasks; overall = mean over lengths";
    j["bootstrap"] = {{"method", "percentile; samples resampled within each task x length cell"},
                      {"resamples", info.bootstrap.resamples},
                      {"seed", info.bootstrap.seed},
                      {"level", info.bootstrap.level}};
    for (const auto& [name, tasks] : info.groups) j["groups"][name] = tasks;
    j["models"] = json::array();
    for (const ModelEvalResult& r : results) j["models"].push_back(model_result_json(r, info));
    return j;
}

void write_results_json(const std::string& path, const EvalRunInfo& info,
                        const std::vector<ModelEvalResult>& results) {
    // dump with replace: model outputs may hold invalid UTF-8 (a character cut by max_new_tokens)
    write_text_file(
        path, results_to_json(info, results).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}

ModelEvalResult model_result_from_json(const json& m, const std::string& where,
                                       const BootstrapOptions& boot) {
    HYDRA_CHECK(m.is_object(), "{}: expected a model result object, found {}", where, json_kind(m));
    ModelEvalResult r;
    r.model = m.value("model", std::string());
    if (m.contains("seconds") && m["seconds"].is_number()) r.seconds = m["seconds"].get<double>();
    const json samples = m.value("samples", json::array());
    HYDRA_CHECK(samples.is_array(), "{}: samples: expected a list, found {}", where, json_kind(samples));
    for (size_t i = 0; i < samples.size(); ++i) {
        const json& s = samples[i];
        const std::string w = fmt::format("{}: samples[{}]", where, i);
        HYDRA_CHECK(s.is_object() && s.contains("task") && s["task"].is_string() && s.contains("length") &&
                        s["length"].is_number_integer() && s.contains("score") && s["score"].is_number(),
                    "{}: expected an object with task (string), length (integer) and score (number)", w);
        SampleOutcome o;
        o.task = s["task"].get<std::string>();
        o.length = s["length"].get<int64_t>();
        o.score = s["score"].get<double>();
        HYDRA_CHECK(std::isfinite(o.score) && o.score >= 0 && o.score <= 1, "{}: score {} not in [0, 1]", w,
                    o.score);
        auto num = [&](const char* k) {
            return s.contains(k) && s[k].is_number() ? s[k].get<double>() : 0.0;
        };
        o.index = int64_t(num("index"));
        o.prompt_tokens = int64_t(num("prompt_tokens"));
        o.generated = int64_t(num("generated_tokens"));
        o.prefill_seconds = num("prefill_s");
        o.decode_seconds = num("decode_s");
        o.generate_seconds = num("build_s");
        if (s.contains("id") && s["id"].is_string()) o.id = s["id"].get<std::string>();
        if (s.contains("output") && s["output"].is_string()) o.output = s["output"].get<std::string>();
        if (s.contains("answers") && s["answers"].is_array())
            for (const json& a : s["answers"])
                if (a.is_string()) o.answers.push_back(a.get<std::string>());
        r.samples.push_back(std::move(o));
    }
    if (!r.samples.empty()) {
        aggregate(r, boot);
        return r;
    }
    // No samples: the stored numbers (hydra eval: scores / per_length; older pipeline files:
    // task_scores / length_scores) and whatever intervals are there.
    const char* scores_key = m.contains("scores") ? "scores" : "task_scores";
    const char* length_key = m.contains("per_length") ? "per_length" : "length_scores";
    auto length_of = [&](const std::string& key) {
        HYDRA_CHECK(!key.empty() && key.size() <= 12 && std::all_of(key.begin(), key.end(), ::isdigit),
                    "{}: \"{}\" is not a length (expected a token count)", where, key);
        return std::stoll(key);
    };
    try {
        const json scores = m.value(scores_key, json::object()),
                   per_length = m.value(length_key, json::object());
        const json scores_ci = m.value("scores_ci", json::object()),
                   length_ci = m.value("per_length_ci", json::object());
        for (const auto& [task, by_len] : scores.items()) {
            HYDRA_CHECK(by_len.is_object(), "{}: {}.{}: expected an object of length -> score", where,
                        scores_key, task);
            for (const auto& [len, v] : by_len.items())
                if (v.is_number()) {
                    r.task_scores[task][length_of(len)] = v.get<double>();
                    r.task_ci[task][length_of(len)] =
                        interval_from_json(scores_ci.value(task, json::object()).value(len, json()));
                }
        }
        for (const auto& [len, v] : per_length.items())
            if (v.is_number()) {
                r.length_scores[length_of(len)] = v.get<double>();
                r.length_ci[length_of(len)] = interval_from_json(length_ci.value(len, json()));
            }
    } catch (const json::exception& e) {
        fail("{}: malformed scores: {}", where, e.what());
    }
    if (m.contains("overall") && m["overall"].is_number()) r.overall = m["overall"].get<double>();
    r.overall_ci = interval_from_json(m.value("overall_ci", json()));
    return r;
}

std::string results_to_csv(const std::vector<ModelEvalResult>& results) {
    auto end = [](double v) { return std::isfinite(v) ? fmt::format("{:.2f}", v) : std::string(); };
    std::string out = "model,task,length,score,ci_lo,ci_hi,samples,mean_prefill_s,mean_decode_s\n";
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
                Interval ci{NAN, NAN};
                if (auto t = r.task_ci.find(task); t != r.task_ci.end())
                    if (auto it = t->second.find(len); it != t->second.end()) ci = it->second;
                const double d = double(std::max<int64_t>(n, 1));
                out += fmt::format("\"{}\",\"{}\",{},{:.2f},{},{},{},{:.3f},{:.3f}\n", r.model, task, len, v,
                                   end(ci.lo), end(ci.hi), n, pf / d, dc / d);
            }
        for (const auto& [len, v] : r.length_scores) {
            const auto it = r.length_ci.find(len);
            const Interval ci = it == r.length_ci.end() ? Interval{NAN, NAN} : it->second;
            out +=
                fmt::format("\"{}\",overall,{},{:.2f},{},{},,,\n", r.model, len, v, end(ci.lo), end(ci.hi));
        }
    }
    return out;
}

void write_results_csv(const std::string& path, const std::vector<ModelEvalResult>& results) {
    write_text_file(path, results_to_csv(results));
}

void write_score_plot(const std::string& path, const std::vector<ModelEvalResult>& results) {
    std::vector<Series> series;
    std::set<int64_t> lens;
    for (const ModelEvalResult& r : results) {
        Series s;
        s.label = model_label(r.model);
        for (const auto& [len, v] : r.length_scores) {
            s.x.push_back(double(len));
            s.y.push_back(v);
            const auto it = r.length_ci.find(len);
            s.y_lo.push_back(it == r.length_ci.end() ? NAN : it->second.lo);
            s.y_hi.push_back(it == r.length_ci.end() ? NAN : it->second.hi);
            lens.insert(len);
        }
        series.push_back(std::move(s));
    }
    LinePlotOptions o;
    o.title = "Score vs context length (mean over tasks, 95% bootstrap intervals)";
    o.x_label = "prompt length (tokens)";
    o.y_label = "score";
    o.log_x = lens.size() >= 2;
    o.y_min = 0;
    o.y_max = 100;
    write_line_plot(path, series, o);
}

std::string score_plot_markdown(const std::string& out_dir, const std::vector<ModelEvalResult>& results) {
    const std::string path = out_dir + "/score_vs_length.png";
    std::error_code ec;
    std::filesystem::remove(path, ec);  // a figure of an earlier run must not pass for this one's
    try {
        write_score_plot(path, results);
        return "![score vs length](score_vs_length.png)\n\n";
    } catch (const Error& e) {
        return fmt::format(
            "(score plot not drawn here: {}. `hydra report merge RUN/results --out DIR` draws it from the "
            "records on a machine that has the driver.)\n\n",
            e.what());
    }
}

std::string task_markdown_cells(const ModelEvalResult& r, const std::string& task,
                                const std::vector<int64_t>& lengths) {
    const auto scores = r.task_scores.find(task);
    const auto ci = r.task_ci.find(task);
    std::string cells;
    for (int64_t len : lengths) {
        const bool ran = scores != r.task_scores.end() && scores->second.count(len);
        const Interval iv =
            ci != r.task_ci.end() && ci->second.count(len) ? ci->second.at(len) : Interval{NAN, NAN};
        cells += fmt::format(" {} |", ran ? format_with_interval(scores->second.at(len), iv) : "n/a");
    }
    return cells;
}

std::string results_table(const ModelEvalResult& r, const EvalRunInfo& info) {
    std::set<int64_t> lens;
    for (const auto& [len, v] : r.length_scores) lens.insert(len);
    constexpr int kCell = 20;  // "100.0 [100.0, 100.0]" plus a space
    std::string out = fmt::format("{}\n{:<18}", r.model, "task");
    for (int64_t l : lens) out += fmt::format("{:>{}}", l, kCell);
    out += "\n";
    auto ci_of = [](const auto& m, int64_t l) { return m.count(l) ? m.at(l) : Interval{NAN, NAN}; };
    for (const auto& [task, lv] : r.task_scores) {
        out += fmt::format("{:<18}", task.size() > 17 ? task.substr(0, 15) + ".." : task);
        const auto tc = r.task_ci.count(task) ? r.task_ci.at(task) : std::map<int64_t, Interval>{};
        for (int64_t l : lens)
            out += fmt::format("{:>{}}", lv.count(l) ? format_with_interval(lv.at(l), ci_of(tc, l)) : "-",
                               kCell);
        out += "\n";
    }
    out += fmt::format("{:<18}", "mean");
    for (int64_t l : lens)
        out +=
            fmt::format("{:>{}}", format_with_interval(r.length_scores.at(l), ci_of(r.length_ci, l)), kCell);
    out += "\n";
    for (const auto& [name, tasks] : info.groups) {
        const GroupScore g = group_score(r, tasks, info.bootstrap);
        out += fmt::format("{:<18}", name.size() > 17 ? name.substr(0, 15) + ".." : name);
        for (int64_t l : lens)
            out += fmt::format("{:>{}}",
                               g.length_scores.count(l)
                                   ? format_with_interval(g.length_scores.at(l), g.length_ci.at(l))
                                   : "-",
                               kCell);
        out += "\n";
    }
    out +=
        fmt::format("overall {}  ({:.1f} s)\n", format_with_interval(r.overall, r.overall_ci, 2), r.seconds);
    return out;
}

}  // namespace hydra
