// User-supplied task rows (see tasks_file.h).
#include "eval/tasks_file.h"

#include <algorithm>
#include <chrono>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "eval/task.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "io/json_kind.h"
#include "tokenizer/byte_unicode.h"

namespace hydra {

using json = nlohmann::json;

std::vector<UserTaskRow> parse_tasks_jsonl(const std::string& text, const std::string& name) {
    std::vector<UserTaskRow> rows;
    std::set<std::string> ids;
    size_t pos = 0;
    for (int64_t line = 1; pos < text.size(); ++line) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string_view l(text.data() + pos, end - pos);
        pos = end + 1;
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        const std::string where = fmt::format("{}:{}", name, line);
        if (const size_t bad = utf8_invalid_offset(l); bad != std::string_view::npos)
            fail("{}: invalid UTF-8 at byte {} of the line", where, bad + 1);
        if (std::all_of(l.begin(), l.end(), [](char c) { return c == ' ' || c == '\t'; })) continue;
        json j = parse_json_bounded(l, where);
        HYDRA_CHECK(j.is_object(),
                    "{}: expected a JSON object {{\"prompt\": ..., \"answer\": ...}}, found {}", where,
                    json_kind(j));
        for (const auto& [k, v] : j.items())
            HYDRA_CHECK(k == "prompt" || k == "answer" || k == "length" || k == "id",
                        "{}: unknown key \"{}\" (keys: prompt, answer, length, id)", where, k);
        UserTaskRow r;
        r.line = line;
        HYDRA_CHECK(j.contains("prompt"), "{}: missing \"prompt\"", where);
        HYDRA_CHECK(j["prompt"].is_string(), "{}: \"prompt\" must be a string, found {}", where,
                    json_kind(j["prompt"]));
        r.prompt = j["prompt"].get<std::string>();
        HYDRA_CHECK(!r.prompt.empty(), "{}: \"prompt\" is empty", where);
        HYDRA_CHECK(j.contains("answer"), "{}: missing \"answer\" (a string or a list of acceptable strings)",
                    where);
        const json& a = j["answer"];
        if (a.is_string()) {
            r.answers.push_back(a.get<std::string>());
        } else if (a.is_array()) {
            HYDRA_CHECK(!a.empty(), "{}: \"answer\" is an empty list", where);
            for (size_t i = 0; i < a.size(); ++i) {
                HYDRA_CHECK(a[i].is_string(), "{}: \"answer\"[{}] must be a string, found {}", where, i,
                            json_kind(a[i]));
                r.answers.push_back(a[i].get<std::string>());
            }
        } else {
            fail("{}: \"answer\" must be a string or a list of strings, found {}", where, json_kind(a));
        }
        for (const std::string& s : r.answers) {
            const auto not_space = [](unsigned char c) { return !std::isspace(c); };
            HYDRA_CHECK(std::any_of(s.begin(), s.end(), not_space),
                        "{}: an answer is empty or blank (it would match every output)", where);
        }
        if (j.contains("length")) {
            const json& v = j["length"];
            if (v.is_number_integer()) {
                r.length = v.get<int64_t>();
                HYDRA_CHECK(r.length >= 1, "{}: \"length\" must be at least 1, found {}", where, r.length);
            } else if (v.is_string()) {
                try {
                    r.length = parse_length(v.get<std::string>());
                } catch (const Error& e) {
                    fail("{}: \"length\": {}", where, e.what());
                }
            } else {
                fail("{}: \"length\" must be a positive integer or a token count like \"4k\", found {}",
                     where, json_kind(v));
            }
        }
        if (j.contains("id")) {
            const json& v = j["id"];
            HYDRA_CHECK(v.is_string() || v.is_number_integer(),
                        "{}: \"id\" must be a string or an integer, found {}", where, json_kind(v));
            r.id = v.is_string() ? v.get<std::string>() : std::to_string(v.get<int64_t>());
            HYDRA_CHECK(ids.insert(r.id).second, "{}: \"id\" {} repeats an earlier row's", where, r.id);
        } else {
            r.id = fmt::format("line {}", line);
        }
        rows.push_back(std::move(r));
    }
    HYDRA_CHECK(!rows.empty(), "{}: no rows (expected one JSON object per line)", name);
    return rows;
}

std::vector<UserTaskRow> read_tasks_file(const std::string& path) {
    return parse_tasks_jsonl(read_text_file(path), path);
}

int64_t row_max_new_tokens(const TaskContext& ctx, const UserTaskRow& row) {
    int64_t longest = 0;
    for (const std::string& a : row.answers)
        longest = std::max<int64_t>(longest, int64_t(ctx.text.encoder->encode(" " + a).size()));
    return std::clamp<int64_t>(2 * longest + 16, 32, 256);
}

ModelEvalResult run_tasks_file(const std::string& model_name, const LlamaModel& model, const TaskContext& ctx,
                               const std::vector<UserTaskRow>& rows, const std::string& task,
                               const std::string& file, int64_t context, const EvalSettings& settings,
                               const std::function<void(int64_t, int64_t, const std::string&)>& progress,
                               const GenerateFn& generate) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    // Encode and check every row first: an over-long prompt is an error before any decoding.
    struct Prepared {
        std::vector<int32_t> prompt;
        int64_t max_new = 0, length = 0;
    };
    std::vector<Prepared> prep;
    for (const UserTaskRow& r : rows) {
        Prepared p;
        p.prompt = encode_prompt(ctx, PromptText{r.prompt, "", {}, 0});
        p.max_new = row_max_new_tokens(ctx, r);
        HYDRA_CHECK(
            int64_t(p.prompt.size()) + p.max_new <= context,
            "{}:{}: the prompt has {} tokens; with the answer budget of {} it exceeds {}'s context of {} "
            "positions",
            file, r.line, p.prompt.size(), p.max_new, model_name, context);
        if (r.length > 0) {
            p.length = r.length;
        } else {
            p.length = 256;
            while (p.length < int64_t(p.prompt.size())) p.length *= 2;
        }
        prep.push_back(std::move(p));
    }
    ModelEvalResult res;
    res.model = model_name;
    double sum = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
        const UserTaskRow& r = rows[i];
        const Prepared& p = prep[i];
        std::function<bool(const std::string&)> full;
        if (settings.stop_at_full_score)
            full = [&r](const std::string& out) { return score_answers(r.answers, "part", out) >= 1.0; };
        const GreedyResult g = generate
                                   ? generate(p.prompt, p.max_new, full)
                                   : greedy_generate(model, ctx.text, p.prompt, p.max_new, context, full);
        SampleOutcome o;
        o.task = task;
        o.id = r.id;
        o.length = p.length;
        o.index = int64_t(i);
        o.prompt_tokens = int64_t(p.prompt.size());
        o.answers = r.answers;
        o.output = g.text;
        o.generated = int64_t(g.tokens.size());
        o.prefill_seconds = g.prefill_seconds;
        o.decode_seconds = g.decode_seconds;
        o.score = score_answers(r.answers, "part", g.text);
        sum += o.score;
        res.samples.push_back(std::move(o));
        if (progress)
            progress(int64_t(i + 1), int64_t(rows.size()),
                     fmt::format("{} | mean {:.1f}", r.id, 100.0 * sum / double(i + 1)));
    }
    aggregate(res);
    res.seconds = std::chrono::duration<double>(clock::now() - start).count();
    return res;
}

}  // namespace hydra
