// serve_load: an OpenAI-compatible load generator for `hydra serve` and llama.cpp's `llama-server`.
// For each concurrency level, that many client threads each send streaming /v1/completions requests
// (prompts of exactly --prompt-tokens token ids drawn at random from --token-range, new ones at each level,
// or a fixed text; max_tokens with ignore_eos, so that every request generates the same number of tokens) and
// measure the time to the first token, the output tokens/s of the whole level and of each stream, and errors
// by HTTP status. Prints one JSON document (stdout, or --out).
//   serve_load --url http://127.0.0.1:8080 --concurrency 1,8,32,128,256 --prompt-tokens 512 --max-tokens 128
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <httplib.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
    std::string url = "http://127.0.0.1:8080";
    std::string model;  // "": the server's first /v1/models entry (llama-server ignores it)
    std::string api_key;
    std::string concurrency = "1,8,32";
    int64_t requests = 0;  // per level; 0 = one per stream
    int64_t prompt_tokens = 512;
    std::string token_range = "100:10000";
    std::string prompt_text;  // instead of random ids
    int64_t max_tokens = 128;
    uint64_t seed = 1;
    double timeout_s = 1800;
    std::string out;
};

struct RequestResult {
    int status = 0;      // HTTP status; 0 = no response (connection error)
    double ttft_s = -1;  // to the first chunk with text
    double total_s = 0;
    int64_t tokens = 0;  // completion tokens (usage when the server sends it, else text chunks)
    std::string error;
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double idx = p / 100.0 * double(v.size() - 1);
    const size_t lo = size_t(idx), hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

struct Target {
    std::string host;
    int port = 80;
};

Target parse_url(const std::string& url) {
    std::string rest = url;
    if (rest.rfind("http://", 0) == 0)
        rest = rest.substr(7);
    else if (rest.find("://") != std::string::npos)
        throw std::runtime_error("--url: only http:// is supported");
    if (const size_t slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
    Target t;
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos) {
        t.host = rest;
    } else {
        t.host = rest.substr(0, colon);
        t.port = std::stoi(rest.substr(colon + 1));
    }
    if (t.host.empty()) throw std::runtime_error("--url has no host: " + url);
    return t;
}

// One streaming request; parses the server-sent events as they arrive.
RequestResult run_request(const Target& target, const Options& o, const json& body) {
    RequestResult r;
    httplib::Client cli(target.host, target.port);
    cli.set_connection_timeout(30);
    cli.set_read_timeout(time_t(o.timeout_s));
    cli.set_write_timeout(30);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers.emplace("Content-Type", "application/json");
    req.headers.emplace("Accept", "text/event-stream");
    if (!o.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + o.api_key);
    req.body = body.dump();
    const auto t0 = Clock::now();
    std::string pending, raw;
    int64_t text_chunks = 0, usage_tokens = -1;
    auto handle_line = [&](const std::string& line) {
        if (line.rfind("data: ", 0) != 0) return;
        const std::string data = line.substr(6);
        if (data == "[DONE]") return;
        const json j = json::parse(data, nullptr, false);
        if (j.is_discarded()) return;
        if (j.contains("error")) r.error = j["error"].dump();
        if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("completion_tokens"))
            usage_tokens = j["usage"]["completion_tokens"].get<int64_t>();
        if (j.contains("choices") && j["choices"].is_array())
            for (const json& c : j["choices"])
                if (c.contains("text") && c["text"].is_string() &&
                    !c["text"].get_ref<const std::string&>().empty()) {
                    if (r.ttft_s < 0) r.ttft_s = std::chrono::duration<double>(Clock::now() - t0).count();
                    ++text_chunks;
                }
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (raw.size() < 4096) raw.append(data, std::min(n, 4096 - raw.size()));
        pending.append(data, n);
        size_t pos;
        while ((pos = pending.find('\n')) != std::string::npos) {
            std::string line = pending.substr(0, pos);
            if (!line.empty() && line.back() == '\r') line.pop_back();
            pending.erase(0, pos + 1);
            handle_line(line);
        }
        return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool ok = cli.send(req, res, err);
    r.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!ok) {
        r.status = 0;
        r.error = httplib::to_string(err);
        return r;
    }
    r.status = res.status;
    if (res.status != 200 && r.error.empty()) r.error = raw;
    r.tokens = usage_tokens >= 0 ? usage_tokens : text_chunks;
    return r;
}

// level_index: the level's place in --concurrency, part of the prompts' seed, so that no level repeats an
// earlier level's prompts (a server keeping a slot's KV, as llama-server does by default, would skip their
// prefill).
json run_level(const Target& target, const Options& o, int64_t concurrency, int64_t level_index,
               const std::string& model) {
    const int64_t total = o.requests > 0 ? o.requests : concurrency;
    int64_t lo = 100, hi = 10000;
    if (const size_t c = o.token_range.find(':'); c != std::string::npos) {
        lo = std::stoll(o.token_range.substr(0, c));
        hi = std::stoll(o.token_range.substr(c + 1));
    }
    if (lo < 0 || hi < lo) throw std::runtime_error("--token-range must be LO:HI with 0 <= LO <= HI");
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::vector<RequestResult> results;
    const auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int64_t s = 0; s < concurrency; ++s) {
        threads.emplace_back([&, s] {
            std::mt19937_64 gen(o.seed * 1000003 + uint64_t(level_index) * 7919 + uint64_t(s));
            for (int64_t i; (i = next.fetch_add(1)) < total;) {
                json body = {{"max_tokens", o.max_tokens},
                             {"stream", true},
                             {"ignore_eos", true},
                             {"temperature", 0},
                             {"stream_options", {{"include_usage", true}}}};
                if (!model.empty()) body["model"] = model;
                if (!o.prompt_text.empty()) {
                    body["prompt"] = o.prompt_text;
                } else {
                    // Distinct random prompts, so that no server can answer from a prefix cache.
                    std::vector<int64_t> ids(size_t(o.prompt_tokens));
                    std::uniform_int_distribution<int64_t> d(lo, hi);
                    for (auto& id : ids) id = d(gen);
                    body["prompt"] = ids;
                }
                RequestResult r = run_request(target, o, body);
                std::lock_guard lock(mu);
                results.push_back(std::move(r));
            }
        });
    }
    for (auto& t : threads) t.join();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    std::vector<double> ttft, per_stream, e2e;
    std::map<std::string, int64_t> errors;
    int64_t tokens = 0, ok = 0;
    std::string first_error;
    for (const RequestResult& r : results) {
        if (r.status != 200 || !r.error.empty()) {
            ++errors[r.status == 0 ? "connection" : std::to_string(r.status)];
            if (first_error.empty()) first_error = r.error;
            continue;
        }
        ++ok;
        tokens += r.tokens;
        if (r.ttft_s >= 0) ttft.push_back(r.ttft_s * 1e3);
        e2e.push_back(r.total_s * 1e3);
        // Decoding rate of the stream: tokens after the first over the time after it.
        if (r.tokens > 1 && r.ttft_s >= 0 && r.total_s > r.ttft_s)
            per_stream.push_back(double(r.tokens - 1) / (r.total_s - r.ttft_s));
    }
    json level = {{"concurrency", concurrency},
                  {"requests", total},
                  {"ok", ok},
                  {"errors", errors},
                  {"wall_s", wall},
                  {"output_tokens", tokens},
                  {"output_tokens_per_s", wall > 0 ? double(tokens) / wall : 0.0},
                  {"ttft_ms", {{"p50", percentile(ttft, 50)}, {"p99", percentile(ttft, 99)}}},
                  {"e2e_ms", {{"p50", percentile(e2e, 50)}, {"p99", percentile(e2e, 99)}}},
                  {"per_stream_tokens_per_s",
                   {{"p50", percentile(per_stream, 50)}, {"min", percentile(per_stream, 0)}}}};
    if (!first_error.empty()) level["first_error"] = first_error.substr(0, 500);
    return level;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    CLI::App app{"serve_load: OpenAI-compatible streaming load generator (hydra serve, llama-server)"};
    app.add_option("--url", o.url, "server base URL")->capture_default_str();
    app.add_option("--model", o.model, "model name to send (default: the server's first /v1/models entry)");
    app.add_option("--api-key", o.api_key, "sent as Authorization: Bearer KEY");
    app.add_option("--concurrency", o.concurrency, "comma-separated stream counts")->capture_default_str();
    app.add_option("--requests", o.requests, "requests per level (default: one per stream)")
        ->check(CLI::NonNegativeNumber);
    app.add_option("--prompt-tokens", o.prompt_tokens, "prompt length in token ids")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--token-range", o.token_range, "LO:HI range of the random prompt ids")
        ->capture_default_str();
    app.add_option("--prompt-text", o.prompt_text, "a text prompt instead of random token ids");
    app.add_option("--max-tokens", o.max_tokens, "tokens generated per request (ignore_eos)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("--seed", o.seed, "seed of the random prompts")->capture_default_str();
    app.add_option("--timeout", o.timeout_s, "read timeout per request (s)")->capture_default_str();
    app.add_option("--out", o.out, "write the JSON here instead of stdout");
    CLI11_PARSE(app, argc, argv);
    try {
        const Target target = parse_url(o.url);
        std::vector<int64_t> levels;
        for (size_t pos = 0; pos <= o.concurrency.size();) {
            const size_t comma = std::min(o.concurrency.find(',', pos), o.concurrency.size());
            const int64_t c = std::stoll(o.concurrency.substr(pos, comma - pos));
            if (c < 1) throw std::runtime_error("--concurrency values must be >= 1");
            levels.push_back(c);
            pos = comma + 1;
        }
        std::string model = o.model;
        if (model.empty()) {
            httplib::Client cli(target.host, target.port);
            httplib::Headers h;
            if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
            if (auto res = cli.Get("/v1/models", h); res && res->status == 200) {
                const json j = json::parse(res->body, nullptr, false);
                if (!j.is_discarded() && j.contains("data") && !j["data"].empty())
                    model = j["data"][0].value("id", "");
            } else {
                throw std::runtime_error(fmt::format("GET {}/v1/models failed: is the server up?", o.url));
            }
        }
        json out = {{"url", o.url},
                    {"model", model},
                    {"prompt_tokens", o.prompt_text.empty() ? json(o.prompt_tokens) : json(nullptr)},
                    {"max_tokens", o.max_tokens},
                    {"levels", json::array()}};
        // The document is rewritten after every level, so that a run cut short keeps the levels it finished.
        auto write = [&] {
            const std::string text = out.dump(2) + "\n";
            if (o.out.empty()) return;
            const std::string tmp = o.out + ".tmp";
            {
                std::ofstream f(tmp);
                f << text;
                if (!f) throw std::runtime_error("cannot write " + tmp);
            }
            std::filesystem::rename(tmp, o.out);
        };
        for (size_t li = 0; li < levels.size(); ++li) {
            const int64_t c = levels[li];
            fmt::print(stderr, "serve_load: {} streams ...\n", c);
            out["levels"].push_back(run_level(target, o, c, int64_t(li), model));
            const json& l = out["levels"].back();
            fmt::print(stderr, "  {:.1f} tok/s, ttft p50 {:.0f} ms p99 {:.0f} ms, ok {}/{}\n",
                       l["output_tokens_per_s"].get<double>(), l["ttft_ms"]["p50"].get<double>(),
                       l["ttft_ms"]["p99"].get<double>(), l["ok"].get<int64_t>(),
                       l["requests"].get<int64_t>());
            write();
        }
        if (o.out.empty()) {
            const std::string text = out.dump(2) + "\n";
            std::fwrite(text.data(), 1, text.size(), stdout);
        }
    } catch (const std::exception& e) {
        fmt::print(stderr, "serve_load: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
