// hydra serve over real HTTP: a server started on 127.0.0.1 (a free port) over the CPU batch backend,
// and httplib clients. Greedy completions equal hydra::generate() token for token (streaming or not, tiny
// teacher, tiny hybrid, the default model), concurrent requests each get their output alone, a repeated
// prompt (prefix-cache hit) gives the same output, prompt logprobs for echo + logprobs, every bad input
// is a 4xx OpenAI error after which the server keeps serving, and a soak of 200 concurrent clients with
// disconnects mid-stream ends with no 5xx but deliberate 503s, every slot free and memory bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model_paths.h"
#include "serve/cpu_batch_backend.h"
#include "serve/generator.h"
#include "serve/http_server.h"
#include "serve/openai_api.h"
#include "serve/scheduler.h"
#include "serve_test_model.h"
#include "tokenizer/chat_template.h"

namespace hydra::serve {
namespace {

using nlohmann::json;

struct ServerOptions {
    int64_t max_seqs = 4;
    int64_t ctx = 256;
    std::string api_key;
    size_t max_body = size_t(1) << 20;
    int64_t max_queue = 256;
};

ServerOptions slots(int64_t max_seqs, int64_t ctx = 256, int64_t max_queue = 256) {
    ServerOptions o;
    o.max_seqs = max_seqs;
    o.ctx = ctx;
    o.max_queue = max_queue;
    return o;
}

// A model served on 127.0.0.1:<free port> by a thread of the test.
class TestServer {
  public:
    TestServer(const LlamaModel& model, const Tokenizer& tok, const ServerOptions& o = {})
        : backend_(model, o.max_seqs, o.ctx, size_t(o.max_seqs) * size_t(64) << 20),
          scheduler_(backend_, tok, config(o)),
          served_(make_served_model("tiny", tok, backend_.context(), eos_of(model, tok))),
          server_(scheduler_, served_, http_config(o)) {
        port_ = server_.bind();
        thread_ = std::thread([this] { server_.run(); });
    }
    ~TestServer() {
        server_.stop();
        thread_.join();
    }
    int port() const { return port_; }
    Scheduler& scheduler() { return scheduler_; }
    HttpServer& server() { return server_; }
    std::thread& thread() { return thread_; }

    static std::vector<int32_t> eos_of(const LlamaModel& model, const Tokenizer& tok) {
        std::vector<int32_t> e = model.config().eos_token_ids;
        if (tok.eos_id() >= 0) e.push_back(tok.eos_id());
        return e;
    }

  private:
    static SchedulerConfig config(const ServerOptions& o) {
        SchedulerConfig c;
        c.max_queue = o.max_queue;
        c.prefill_chunk = 16;  // prompts in several chunks
        return c;
    }
    static HttpServerConfig http_config(const ServerOptions& o) {
        HttpServerConfig c;
        c.port = 0;
        c.api_key = o.api_key;
        c.max_body_bytes = o.max_body;
        return c;
    }
    CpuBatchBackend backend_;
    Scheduler scheduler_;
    ServedModel served_;
    HttpServer server_;
    int port_ = 0;
    std::thread thread_;
};

struct Reply {
    int status = 0;
    json body;
    std::string raw;
};

Reply post(int port, const std::string& path, const std::string& body, const std::string& key = "") {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(120);
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    Reply r;
    auto res = cli.Post(path.c_str(), h, body, "application/json");
    if (!res) return r;
    r.status = res->status;
    r.raw = res->body;
    r.body = json::parse(res->body, nullptr, false);
    return r;
}
Reply post(int port, const std::string& path, const json& body, const std::string& key = "") {
    return post(port, path, body.dump(), key);
}

// The data payloads of a server-sent event stream.
std::vector<std::string> sse_payloads(const std::string& s) {
    std::vector<std::string> out;
    size_t pos = 0;
    while ((pos = s.find("data: ", pos)) != std::string::npos) {
        const size_t end = s.find("\n\n", pos);
        if (end == std::string::npos) break;
        out.push_back(s.substr(pos + 6, end - pos - 6));
        pos = end;
    }
    return out;
}

std::vector<int32_t> greedy(const LlamaModel& m, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                            int64_t n, std::vector<int32_t> stops) {
    Sampler s(SamplerConfig{0.0f, 0, 1.0f, 0});
    return generate(m, tok, prompt, n, s, stops, nullptr).tokens;
}

// What a completion of `tokens` must look like: the per-token texts and the whole text.
void expect_completion(const json& choice, const Tokenizer& tok, const std::vector<int32_t>& tokens) {
    ASSERT_TRUE(choice.contains("logprobs") && choice["logprobs"].is_object()) << choice.dump();
    const json& got = choice["logprobs"]["tokens"];
    ASSERT_EQ(got.size(), tokens.size()) << choice.dump();
    for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(got[i], token_text(tok, tokens[i])) << "token " << i;
    EXPECT_EQ(choice["text"], utf8_lossy(tok.decode(tokens)));
}

struct Tiny {
    Tokenizer tok{test::tiny_byte_vocab(), "tiny"};
    std::unique_ptr<LlamaModel> teacher = test::tiny_serve_teacher();
    std::unique_ptr<LlamaModel> hybrid = test::tiny_serve_hybrid(*teacher);
};
Tiny& tiny() {
    static Tiny t;
    return t;
}

std::vector<int32_t> prompt_ids(int n, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(int32_t(32 + gen() % 90));  // printable ASCII bytes
    return p;
}

// Greedy completions (non-streaming and streaming) == generate(), for one model.
void check_greedy_matches_generate(const LlamaModel& model, const Tokenizer& tok,
                                   const std::vector<int32_t>& prompt, int64_t n) {
    TestServer server(model, tok);
    const std::vector<int32_t> want = greedy(model, tok, prompt, n, TestServer::eos_of(model, tok));
    const json body = {{"prompt", prompt}, {"max_tokens", n}, {"temperature", 0}, {"logprobs", 0}};
    const Reply r = post(server.port(), "/v1/completions", body);
    ASSERT_EQ(r.status, 200) << r.raw;
    expect_completion(r.body["choices"][0], tok, want);
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], prompt.size());
    EXPECT_EQ(r.body["usage"]["completion_tokens"], want.size());
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], int64_t(want.size()) == n ? "length" : "stop");

    json sbody = body;
    sbody["stream"] = true;
    sbody["stream_options"] = {{"include_usage", true}};
    const Reply s = post(server.port(), "/v1/completions", sbody);
    ASSERT_EQ(s.status, 200) << s.raw;
    const std::vector<std::string> chunks = sse_payloads(s.raw);
    ASSERT_GE(chunks.size(), 2u);
    EXPECT_EQ(chunks.back(), "[DONE]");
    std::string text;
    json tokens = json::array();
    std::string finish;
    int64_t usage = -1;
    for (size_t i = 0; i + 1 < chunks.size(); ++i) {
        const json c = json::parse(chunks[i]);
        ASSERT_FALSE(c.contains("error")) << chunks[i];
        if (c.contains("usage") && c["usage"].is_object()) usage = c["usage"]["completion_tokens"];
        for (const json& ch : c["choices"]) {
            text += ch["text"].get<std::string>();
            if (ch["logprobs"].is_object())
                for (const json& t : ch["logprobs"]["tokens"]) tokens.push_back(t);
            if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
        }
    }
    EXPECT_EQ(text, utf8_lossy(tok.decode(want)));
    ASSERT_EQ(tokens.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(tokens[i], token_text(tok, want[i]));
    EXPECT_EQ(usage, int64_t(want.size()));
    EXPECT_EQ(finish, int64_t(want.size()) == n ? "length" : "stop");
}

TEST(HttpServer, TinyTeacherGreedyEqualsGenerate) {
    check_greedy_matches_generate(*tiny().teacher, tiny().tok, prompt_ids(40, 1), 24);
}

TEST(HttpServer, TinyHybridGreedyEqualsGenerate) {
    check_greedy_matches_generate(*tiny().hybrid, tiny().tok, prompt_ids(37, 2), 24);
}

// Different requests at once (lengths, prompts, max_tokens) each give what they give alone.
void check_concurrent(const LlamaModel& model) {
    const Tokenizer& tok = tiny().tok;
    TestServer server(model, tok, slots(3));
    constexpr int kRequests = 7;
    std::vector<std::vector<int32_t>> prompts, want;
    std::vector<int64_t> n;
    for (int i = 0; i < kRequests; ++i) {
        prompts.push_back(prompt_ids(5 + 9 * i, 100 + uint64_t(i)));
        n.push_back(6 + 3 * i);
        want.push_back(greedy(model, tok, prompts.back(), n.back(), TestServer::eos_of(model, tok)));
    }
    std::vector<Reply> replies(kRequests);
    std::vector<std::thread> threads;
    for (int i = 0; i < kRequests; ++i)
        threads.emplace_back([&, i] {
            replies[size_t(i)] = post(server.port(), "/v1/completions",
                                      json{{"prompt", prompts[size_t(i)]},
                                           {"max_tokens", n[size_t(i)]},
                                           {"temperature", 0},
                                           {"logprobs", 0}});
        });
    for (auto& t : threads) t.join();
    for (int i = 0; i < kRequests; ++i) {
        SCOPED_TRACE(i);
        ASSERT_EQ(replies[size_t(i)].status, 200) << replies[size_t(i)].raw;
        expect_completion(replies[size_t(i)].body["choices"][0], tok, want[size_t(i)]);
    }
}

TEST(HttpServer, ConcurrentRequestsEachGetTheirOwnOutputTeacher) {
    check_concurrent(*tiny().teacher);
}
TEST(HttpServer, ConcurrentRequestsEachGetTheirOwnOutputHybrid) {
    check_concurrent(*tiny().hybrid);
}

TEST(HttpServer, RepeatedPromptGivesTheSameOutput) {
    for (const LlamaModel* model : {tiny().teacher.get(), tiny().hybrid.get()}) {
        TestServer server(*model, tiny().tok);
        const json body = {
            {"prompt", prompt_ids(70, 9)}, {"max_tokens", 12}, {"temperature", 0}, {"logprobs", 2}};
        const Reply a = post(server.port(), "/v1/completions", body);
        const Reply b = post(server.port(), "/v1/completions", body);
        ASSERT_EQ(a.status, 200) << a.raw;
        ASSERT_EQ(b.status, 200) << b.raw;
        EXPECT_EQ(a.body["choices"], b.body["choices"]);
        // Seeded sampling is reproducible too.
        json sampled = body;
        sampled["temperature"] = 0.9;
        sampled["seed"] = 5;
        EXPECT_EQ(post(server.port(), "/v1/completions", sampled).body["choices"],
                  post(server.port(), "/v1/completions", sampled).body["choices"]);
        std::printf("prefix cache: %lld cached prompt tokens\n",
                    (long long)server.scheduler().stats().cached_prompt_tokens_total);
    }
}

TEST(HttpServer, ChatCompletion) {
    const Tokenizer& tok = tiny().tok;
    const LlamaModel& model = *tiny().teacher;
    TestServer server(model, tok);
    const json body = {{"model", "tiny"},
                       {"messages", {{{"role", "user"}, {"content", "hello"}}}},
                       {"max_tokens", 10},
                       {"temperature", 0}};
    const Reply r = post(server.port(), "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["object"], "chat.completion");
    const json& msg = r.body["choices"][0]["message"];
    EXPECT_EQ(msg["role"], "assistant");
    const std::vector<int32_t> prompt =
        tok.encode(apply_chatml_template({{"system", "You are tiny."}, {"user", "hello"}}, true, ""), true);
    std::vector<int32_t> stops = TestServer::eos_of(model, tok);
    stops.push_back(test::kTinyImEnd);
    const std::vector<int32_t> want = greedy(model, tok, prompt, 10, stops);
    EXPECT_EQ(msg["content"], utf8_lossy(tok.decode(want)));
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], prompt.size());
    // Streaming: the role first, then the content, then the finish reason.
    json sbody = body;
    sbody["stream"] = true;
    const Reply s = post(server.port(), "/v1/chat/completions", sbody);
    ASSERT_EQ(s.status, 200);
    const std::vector<std::string> chunks = sse_payloads(s.raw);
    ASSERT_GE(chunks.size(), 3u);
    EXPECT_EQ(json::parse(chunks[0])["choices"][0]["delta"]["role"], "assistant");
    std::string content;
    for (size_t i = 1; i + 1 < chunks.size(); ++i) {
        const json d = json::parse(chunks[i])["choices"][0]["delta"];
        if (d.contains("content")) content += d["content"].get<std::string>();
    }
    EXPECT_EQ(content, msg["content"]);
    EXPECT_FALSE(json::parse(chunks[chunks.size() - 2])["choices"][0]["finish_reason"].is_null());
    // /v1/models, /health, /metrics
    httplib::Client cli("127.0.0.1", server.port());
    auto models = cli.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
    auto health = cli.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    auto metrics = cli.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_NE(metrics->body.find("hydra_http_responses_total{code=\"200\"}"), std::string::npos)
        << metrics->body;
    EXPECT_NE(metrics->body.find("hydra_generated_tokens_total"), std::string::npos);
}

TEST(HttpServer, EchoLogprobsScoreThePrompt) {
    const Tokenizer& tok = tiny().tok;
    const LlamaModel& model = *tiny().teacher;
    TestServer server(model, tok);
    const std::vector<int32_t> prompt = prompt_ids(20, 4);
    const Reply r = post(server.port(), "/v1/completions",
                         json{{"prompt", prompt}, {"max_tokens", 0}, {"echo", true}, {"logprobs", 1}});
    ASSERT_EQ(r.status, 200) << r.raw;
    const json& lp = r.body["choices"][0]["logprobs"];
    ASSERT_EQ(lp["token_logprobs"].size(), prompt.size()) << r.raw;
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_EQ(r.body["choices"][0]["text"], tok.decode(prompt));
    // The reference: log-softmax of one forward over the prompt.
    KVCache cache(model, int64_t(prompt.size()));
    const Tensor logits = compute_logits(model, forward_hidden(model, prompt, cache));
    const int64_t V = model.config().vocab_size;
    for (size_t t = 1; t < prompt.size(); ++t) {
        const float* row = logits.f32() + int64_t(t - 1) * V;
        double mx = row[0], sum = 0;
        for (int64_t v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
        const double want = double(row[prompt[t]]) - mx - std::log(sum);
        EXPECT_NEAR(lp["token_logprobs"][t].get<double>(), want, 1e-3) << "position " << t;
        EXPECT_EQ(lp["tokens"][t], token_text(tok, prompt[t]));
        EXPECT_EQ(lp["top_logprobs"][t].size(), 1u);
    }
    EXPECT_EQ(r.body["usage"]["completion_tokens"], 0);
}

TEST(HttpServer, BadInputIsA4xxAndTheServerKeepsServing) {
    const Tokenizer& tok = tiny().tok;
    ServerOptions o = slots(4, 64);
    o.api_key = "s3cret";
    o.max_body = 64 << 10;
    TestServer server(*tiny().teacher, tok, o);
    const int port = server.port();
    const std::string key = "s3cret";
    struct Case {
        std::string name, path, body, key;
        int status;
        std::string param;
    };
    const std::string big(100 << 10, 'a');
    const std::vector<Case> cases = {
        {"malformed JSON", "/v1/completions", "{\"prompt\": ", key, 400, ""},
        {"not an object", "/v1/completions", "[1, 2]", key, 400, ""},
        {"wrong type", "/v1/completions", R"({"prompt": "ab", "max_tokens": "many"})", key, 400,
         "max_tokens"},
        {"wrong type (chat)", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": 3}]})",
         key, 400, "messages[0].content"},
        {"invalid UTF-8", "/v1/completions", "{\"prompt\": \"a\xff\xfe\"}", key, 400, ""},
        // a value nested 31,000 levels deep (62 KB): printing it into the error once recursed per level
        {"nested too deep", "/v1/completions",
         "{\"prompt\": \"ab\", \"max_tokens\": " + std::string(31000, '[') + std::string(31000, ']') + "}",
         key, 400, ""},
        {"unknown model", "/v1/completions", R"({"model": "gpt-5", "prompt": "ab"})", key, 404, "model"},
        {"oversized body", "/v1/completions", "{\"prompt\": \"" + big + "\"}", key, 413, ""},
        {"max_tokens past the context", "/v1/completions", R"({"prompt": "abc", "max_tokens": 62})", key, 400,
         "max_tokens"},
        {"prompt past the context", "/v1/completions", "{\"prompt\": \"" + std::string(80, 'x') + "\"}", key,
         400, "prompt"},
        {"wrong API key", "/v1/completions", R"({"prompt": "ab"})", "guess", 401, ""},
        {"missing API key", "/v1/completions", R"({"prompt": "ab"})", "", 401, ""},
        {"unknown route", "/v1/embeddings", R"({"input": "ab"})", key, 404, ""},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const Reply r = post(port, c.path, c.body, c.key);
        EXPECT_EQ(r.status, c.status) << r.raw;
        ASSERT_TRUE(r.body.is_object() && r.body.contains("error")) << r.raw;
        EXPECT_TRUE(r.body["error"]["message"].is_string());
        EXPECT_TRUE(r.body["error"]["type"].is_string());
        if (!c.param.empty()) {
            EXPECT_EQ(r.body["error"]["param"], c.param);
        }
        // ... and the server still answers a good request.
        const Reply ok = post(port, "/v1/completions", json{{"prompt", "ab"}, {"max_tokens", 2}}, key);
        EXPECT_EQ(ok.status, 200) << ok.raw;
    }
    // /health stays open without the key; /v1/models needs it.
    httplib::Client cli("127.0.0.1", port);
    EXPECT_EQ(cli.Get("/health")->status, 200);
    EXPECT_EQ(cli.Get("/v1/models")->status, 401);
    const Reply raw_bytes = post(port, "/v1/completions", std::string("\x00\x01\x02", 3), key);
    EXPECT_EQ(raw_bytes.status, 400);
    // a rejected value is not echoed back whole (the 62 KB deep body's message once held all of it)
    const std::string deep = std::string(31000, '[') + std::string(31000, ']');
    for (const std::string& body :
         {"{\"prompt\": \"ab\", \"max_tokens\": " + deep + "}",
          "{\"prompt\": \"ab\", \"max_tokens\": \"" + std::string(60000, '9') + "x\"}"}) {
        const Reply r = post(port, "/v1/completions", body, key);
        EXPECT_EQ(r.status, 400);
        EXPECT_LT(r.raw.size(), 1000u) << r.raw.substr(0, 200);
    }
}

int64_t rss_kib() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
    return 0;
}

TEST(HttpServer, SoakOf200ClientsWithDisconnects) {
    const Tokenizer& tok = tiny().tok;
    // A short queue, so that some clients get the deliberate 503 (with Retry-After).
    TestServer server(*tiny().hybrid, tok, slots(8, 256, 40));
    const int port = server.port();
    constexpr int kClients = 200;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t rss0 = rss_kib();
    std::atomic<int> ok{0}, busy{0}, disconnected{0}, other{0};
    std::mutex mu;
    std::string first_other;
    for (int round = 0; round < 2; ++round) {
        std::vector<std::thread> threads;
        for (int i = 0; i < kClients; ++i)
            threads.emplace_back([&, i] {
                httplib::Client cli("127.0.0.1", port);
                cli.set_read_timeout(30);
                cli.set_connection_timeout(10);
                const bool leave = i % 4 == 1;  // a quarter hang up after the first chunk
                const bool stream = leave || i % 2 == 0;
                httplib::Request req;
                req.method = "POST";
                req.path = "/v1/completions";
                req.headers.emplace("Content-Type", "application/json");
                req.body = json{
                    {"prompt", prompt_ids(8 + i % 23, uint64_t(i))},
                    {"max_tokens", leave ? 200 : 4 + i % 5},
                    {"temperature", i % 3 == 0 ? 0.0 : 0.8},
                    {"stream",
                     stream}}.dump();
                std::string body;
                req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
                    body.append(d, n);
                    return !(leave && body.find("data: ") != std::string::npos);
                };
                // A refused client comes back (a bounded number of times, sooner than Retry-After says).
                for (int attempt = 0; attempt < 200; ++attempt) {
                    body.clear();
                    httplib::Response res;
                    httplib::Error err;
                    const bool sent = cli.send(req, res, err);
                    if (sent && res.status == 503 && res.has_header("Retry-After")) {
                        ++busy;
                        std::this_thread::sleep_for(std::chrono::milliseconds(10 + i % 10));
                        continue;
                    }
                    if (leave && !sent && err == httplib::Error::Canceled) {
                        ++disconnected;
                    } else if (sent && res.status == 200) {
                        ++ok;
                    } else {
                        ++other;
                        std::lock_guard lock(mu);
                        if (first_other.empty())
                            first_other = fmt::format("status {} error {} body {}", sent ? res.status : -1,
                                                      httplib::to_string(err), body.substr(0, 300));
                    }
                    break;
                }
            });
        for (auto& t : threads) t.join();
    }
    EXPECT_EQ(other.load(), 0) << first_other;
    EXPECT_EQ(ok.load() + disconnected.load(), 2 * kClients);  // everyone was served in the end
    EXPECT_GT(disconnected.load(), 0);
    std::printf("soak: %d ok, %d 503, %d disconnected, %d other\n", ok.load(), busy.load(),
                disconnected.load(), other.load());
    // Every slot comes free (cancelled sequences included) and nothing waits.
    SchedulerStats st;
    for (int i = 0; i < 200; ++i) {
        st = server.scheduler().stats();
        if (st.requests_running == 0 && st.requests_waiting == 0 && st.cache.used_slots == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(st.requests_running, 0);
    EXPECT_EQ(st.requests_waiting, 0);
    EXPECT_EQ(st.cache.used_slots, 0);
    EXPECT_LT(rss_kib() - rss0, 512 * 1024) << "RSS grew by more than 512 MiB";
    EXPECT_EQ(server.server().metrics().responses(500), 0);
    // Still serving.
    EXPECT_EQ(post(port, "/v1/completions", json{{"prompt", "ab"}, {"max_tokens", 2}}).status, 200);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 90.0);
}

TEST(HttpServer, ShutdownFinishesTheStreamsInFlight) {
    auto server = std::make_unique<TestServer>(*tiny().teacher, tiny().tok);
    const int port = server->port();
    Reply r;
    std::thread client([&] {
        r = post(
            port, "/v1/completions",
            json{{"prompt", prompt_ids(10, 3)}, {"max_tokens", 100}, {"stream", true}, {"ignore_eos", true}});
    });
    // Wait until the request runs, then shut down while it streams.
    for (int i = 0; i < 400 && server->scheduler().stats().requests_total == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    server->server().shutdown();
    client.join();
    ASSERT_EQ(r.status, 200);
    const std::vector<std::string> chunks = sse_payloads(r.raw);
    ASSERT_FALSE(chunks.empty());
    EXPECT_EQ(chunks.back(), "[DONE]");
    // After the drain new requests are refused or the socket is closed: never a 5xx other than 503.
    const Reply late = post(port, "/v1/completions", json{{"prompt", "ab"}});
    EXPECT_TRUE(late.status == 0 || late.status == 503) << late.status;
}

// --- the default model --------------------------------------------------------------------------------

struct Real {
    LoadedModel m = load_model(test::default_model_path());
    Tokenizer tok{*m.vocab, "default model"};
};

TEST(HttpServerRealModel, GreedyEqualsGenerate) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model absent (tools/setup.sh fetches it)";
    Real real;
    check_greedy_matches_generate(*real.m.model, real.tok,
                                  real.tok.encode_with_bos("The capital of France is"), 8);
    // Text prompts are tokenized as hydra generate does.
    TestServer server(*real.m.model, real.tok, slots(2, 512));
    const std::vector<int32_t> want =
        greedy(*real.m.model, real.tok, real.tok.encode_with_bos("Once upon a time"), 6,
               TestServer::eos_of(*real.m.model, real.tok));
    const Reply r =
        post(server.port(), "/v1/completions",
             json{{"prompt", "Once upon a time"}, {"max_tokens", 6}, {"temperature", 0}, {"logprobs", 0}});
    ASSERT_EQ(r.status, 200) << r.raw;
    expect_completion(r.body["choices"][0], real.tok, want);
    const Reply c = post(server.port(), "/v1/chat/completions",
                         json{{"messages", {{{"role", "user"}, {"content", "Say hi."}}}},
                              {"max_tokens", 8},
                              {"temperature", 0}});
    ASSERT_EQ(c.status, 200) << c.raw;
    EXPECT_FALSE(c.body["choices"][0]["message"]["content"].get<std::string>().empty());
}

}  // namespace
}  // namespace hydra::serve

namespace hydra::serve {
namespace {

// A client that goes away frees its sequence long before max_tokens: streaming (a failed chunk write)
// and non-streaming (the whitespace kept-alive body of a long request fails to write).
TEST(HttpServerRealModel, DisconnectFreesTheSequence) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model absent (tools/setup.sh fetches it)";
    Real real;
    TestServer server(*real.m.model, real.tok, slots(2, 1024));
    constexpr int64_t kMax = 900;
    int64_t before = 0;
    for (bool stream : {true, false}) {
        SCOPED_TRACE(stream ? "streaming" : "non-streaming");
        httplib::Client cli("127.0.0.1", server.port());
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.headers.emplace("Content-Type", "application/json");
        req.body = json{
            {"prompt", "Once upon a time"},
            {"max_tokens", kMax},
            {"ignore_eos", true},
            {"stream",
             stream}}.dump();
        std::string got;
        req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
            got.append(d, n);
            // Leave after the first chunk; without streaming after the first byte of the kept-alive body.
            return !(stream ? got.find("data: ") != std::string::npos : !got.empty());
        };
        httplib::Response res;
        httplib::Error err;
        EXPECT_FALSE(cli.send(req, res, err));
        cli.stop();
        SchedulerStats st;
        for (int i = 0; i < 300; ++i) {
            st = server.scheduler().stats();
            if (st.requests_running == 0 && st.cache.used_slots == 0) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        EXPECT_EQ(st.requests_running, 0);
        EXPECT_EQ(st.cache.used_slots, 0);
        std::printf("%s: %lld tokens generated before the sequence left\n", stream ? "stream" : "non-stream",
                    (long long)(st.generated_tokens_total - before));
        EXPECT_LT(st.generated_tokens_total - before, kMax);
        before = st.generated_tokens_total;
    }
}

}  // namespace
}  // namespace hydra::serve
