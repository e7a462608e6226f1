// cpp-httplib wiring of hydra serve (see http_server.h).
#include "serve/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>

#include "core/error.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra::serve {

using nlohmann::json;

bool bearer_matches(const std::string& header, const std::string& key) {
    const std::string expected = "Bearer " + key;
    // Every byte of the longer string is compared; the length difference counts as a mismatch too.
    const size_t n = std::max(header.size(), expected.size());
    volatile unsigned diff = unsigned(header.size() ^ expected.size());
    for (size_t i = 0; i < n; ++i) {
        const unsigned a = i < header.size() ? uint8_t(header[i]) : 0u;
        const unsigned b = i < expected.size() ? uint8_t(expected[i]) : 0u;
        diff = diff | (a ^ b);
    }
    return diff == 0;
}

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);
constexpr int kRetryAfterSeconds = 1;
// A non-streaming request answers normally when done within kCommitAfter; beyond, see generate().
constexpr auto kCommitAfter = std::chrono::milliseconds(1000);
constexpr auto kKeepalive = std::chrono::milliseconds(1000);

void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status;
    if (e.status == 503) res.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
    res.set_content(error_body(e), "application/json");
}

// The events of a request's streams, polled without busy-waiting: drains whatever is ready on every
// unfinished stream, and when nothing was, waits a little on the first unfinished one.
template <typename F>
bool poll_events(std::vector<std::shared_ptr<RequestStream>>& streams, std::vector<bool>& done,
                 F&& on_event) {
    bool any = false;
    GenerationEvent e;
    for (size_t i = 0; i < streams.size(); ++i) {
        while (!done[i] && streams[i]->next(e, std::chrono::milliseconds(0))) {
            any = true;
            if (e.kind != GenerationEvent::Kind::Tokens) done[i] = true;
            on_event(i, e);
        }
    }
    if (any) return true;
    for (size_t i = 0; i < streams.size(); ++i) {
        if (done[i]) continue;
        if (streams[i]->next(e, kPoll)) {
            if (e.kind != GenerationEvent::Kind::Tokens) done[i] = true;
            on_event(i, e);
            return true;
        }
        break;
    }
    return false;
}

bool all_done(const std::vector<bool>& done) {
    return std::all_of(done.begin(), done.end(), [](bool d) { return d; });
}

void cancel_all(std::vector<std::shared_ptr<RequestStream>>& streams) {
    for (auto& s : streams) s->cancel();
}

}  // namespace

struct HttpServer::Impl {
    Scheduler& scheduler;
    const ServedModel& model;
    HttpServerConfig config;
    httplib::Server server;
    ServeMetrics metrics;
    int port = -1;
    std::atomic<int> listen_fd{-1};
    std::atomic<int> in_flight{0};  // generation handlers and streams not yet finished
    std::atomic<bool> draining{false};
    std::mutex shutdown_mu;

    Impl(Scheduler& s, const ServedModel& m, HttpServerConfig c)
        : scheduler(s), model(m), config(std::move(c)) {}

    bool authorized(const httplib::Request& req) const {
        return config.api_key.empty() ||
               bearer_matches(req.get_header_value("Authorization"), config.api_key);
    }

    void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
    void routes();
};

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    metrics.count_request(endpoint == Endpoint::Completions ? "/v1/completions" : "/v1/chat/completions");
    if (!authorized(req))
        throw ApiError(401, "missing or invalid API key (Authorization: Bearer <key>)", "", "",
                       "invalid_api_key");
    const json body = parse_json_body(req.body);
    auto api =
        std::make_shared<ApiRequest>(endpoint == Endpoint::Completions ? parse_completion_request(body, model)
                                                                       : parse_chat_request(body, model));
    auto streams = std::make_shared<std::vector<std::shared_ptr<RequestStream>>>();
    try {
        // A copy: the prompts stay with the request for the response's text offsets.
        for (const GenerationRequest& g : api->generations) streams->push_back(scheduler.submit(g));
    } catch (const AdmissionError& e) {
        cancel_all(*streams);
        throw ApiError(e.http_status, e.what(), "", "", e.http_status == 503 ? "overloaded" : "");
    }
    const ResponseMeta meta = new_response_meta(endpoint, model.name);

    if (!api->stream) {
        struct Pending {
            std::shared_ptr<ApiRequest> api;
            std::shared_ptr<std::vector<std::shared_ptr<RequestStream>>> streams;
            std::vector<ChoiceResult> choices;
            std::vector<bool> done;
        };
        auto p = std::make_shared<Pending>(Pending{api, streams, std::vector<ChoiceResult>(streams->size()),
                                                   std::vector<bool>(streams->size(), false)});
        auto collect = [p] {
            poll_events(*p->streams, p->done,
                        [&](size_t i, const GenerationEvent& e) { accumulate(p->choices[i], e); });
        };
        // The final body: the response, or the first choice's error.
        auto body_of = [this, p, meta]() -> std::pair<int, std::string> {
            for (const ChoiceResult& c : p->choices)
                if (!c.error.empty()) {
                    const ApiError e(c.error_status, c.error);
                    return {e.status, error_body(e)};
                }
            return {200, format_response(*p->api, p->choices, meta, *model.tokenizer).dump()};
        };
        {
            ++in_flight;
            struct Leave {
                std::atomic<int>& n;
                ~Leave() { --n; }
            } leave{in_flight};
            const auto commit_at = std::chrono::steady_clock::now() + kCommitAfter;
            while (!all_done(p->done) && std::chrono::steady_clock::now() < commit_at) collect();
        }
        if (all_done(p->done)) {
            auto [status, body] = body_of();
            res.status = status;
            res.set_content(body, "application/json");
            return;
        }
        // A long request. httplib 0.11 tells a handler nothing about its client (no is_connection_closed;
        // DataSink::is_writable only select()s for writability), and only a failed write shows that the
        // client is gone. So the response commits to 200 and sends JSON-legal leading whitespace now and
        // then until the body is ready; a write that fails cancels the request and frees its slots.
        // (An error after this point comes as an error object with status 200.)
        ++in_flight;
        res.status = 200;
        res.set_chunked_content_provider(
            "application/json",
            [p, collect, body_of](size_t, httplib::DataSink& sink) -> bool {
                try {
                    const auto ping_at = std::chrono::steady_clock::now() + kKeepalive;
                    while (!all_done(p->done) && std::chrono::steady_clock::now() < ping_at) collect();
                    if (!all_done(p->done)) {
                        if (sink.write(" ", 1)) return true;
                        cancel_all(*p->streams);
                        return false;
                    }
                    const std::string body = body_of().second;
                    if (!sink.write(body.data(), body.size())) return false;
                    sink.done();
                    return true;
                } catch (...) {
                    cancel_all(*p->streams);
                    return false;
                }
            },
            [this, p](bool success) {
                if (!success || !all_done(p->done)) cancel_all(*p->streams);
                --in_flight;
            });
        return;
    }

    struct StreamState {
        std::shared_ptr<ApiRequest> api;
        std::shared_ptr<std::vector<std::shared_ptr<RequestStream>>> streams;
        StreamFormatter formatter;
        std::vector<bool> done;
        bool begun = false;
        StreamState(std::shared_ptr<ApiRequest> a,
                    std::shared_ptr<std::vector<std::shared_ptr<RequestStream>>> s, ResponseMeta m,
                    const Tokenizer& tok)
            : api(std::move(a)),
              streams(std::move(s)),
              formatter(*api, std::move(m), tok),
              done(streams->size()) {}
    };
    auto state = std::make_shared<StreamState>(api, streams, meta, *model.tokenizer);
    ++in_flight;
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [state](size_t, httplib::DataSink& sink) -> bool {
            // An exception must not leave the provider (it would end the worker thread).
            try {
                std::string out;
                if (!state->begun) {
                    state->begun = true;
                    out = state->formatter.begin();
                }
                poll_events(*state->streams, state->done, [&](size_t i, const GenerationEvent& e) {
                    out += state->formatter.on_event(i, e);
                });
                const bool finished = all_done(state->done);
                if (finished) out += state->formatter.end();
                // An empty write would end the chunked body in httplib: only write something.
                if (!out.empty() && !sink.write(out.data(), out.size())) {
                    cancel_all(*state->streams);
                    return false;
                }
                if (finished) sink.done();
                return true;
            } catch (...) {
                cancel_all(*state->streams);
                return false;
            }
        },
        [this, state](bool success) {
            // Also reached when the server stops or the write timed out: the sequences must go.
            if (!success || !all_done(state->done)) cancel_all(*state->streams);
            --in_flight;
        });
}

void HttpServer::Impl::routes() {
    auto guarded = [this](Endpoint endpoint) {
        return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
            try {
                generate(req, res, endpoint);
            } catch (const ApiError& e) {
                send_error(res, e);
            } catch (const std::bad_alloc&) {
                send_error(res, ApiError(503, "out of memory; try again later"));
            } catch (const std::exception& e) {
                send_error(res, ApiError(500, fmt::format("internal error: {}", e.what())));
            }
        };
    };
    server.Post("/v1/completions", guarded(Endpoint::Completions));
    server.Post("/v1/chat/completions", guarded(Endpoint::ChatCompletions));
    server.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
        metrics.count_request("/v1/models");
        if (!authorized(req))
            return send_error(res, ApiError(401, "missing or invalid API key", "", "", "invalid_api_key"));
        json m = {{"id", model.name},
                  {"object", "model"},
                  {"created", 0},
                  {"owned_by", "hydra"},
                  {"max_model_len", model.context}};
        res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(), "application/json");
    });
    // /health and /metrics stay open with an API key, as in vLLM: load balancers and Prometheus probe them
    // without credentials, and they reveal no prompt or output.
    server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        metrics.count_request("/health");
        res.status = draining ? 503 : 200;
        res.set_content(json{{"status", draining ? "draining" : "ok"}}.dump(), "application/json");
    });
    server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        metrics.count_request("/metrics");
        res.set_content(metrics.render(scheduler.stats()), "text/plain; version=0.0.4");
    });
    // Every 4xx/5xx without a body (404 route, 413 from the size limit, 400 from httplib's own parser)
    // gets an OpenAI error object.
    server.set_error_handler(
        httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            std::string msg;
            switch (res.status) {
                case 404:
                    msg = fmt::format("no route {} {}", req.method, req.path);
                    break;
                case 405:
                    msg = "method not allowed";
                    break;
                case 413:
                    msg = "the request body is too large";
                    break;
                case 414:
                    msg = "the request URI is too long";
                    break;
                default:
                    msg = fmt::format("HTTP error {}", res.status);
                    break;
            }
            res.set_content(error_body(ApiError(res.status, msg)), "application/json");
            return httplib::Server::HandlerResponse::Handled;
        }));
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, fmt::format("internal error: {}", what)));
    });
    server.set_logger([this](const httplib::Request&, const httplib::Response& res) {
        metrics.count_response(res.status);
    });
}

HttpServer::HttpServer(Scheduler& scheduler, const ServedModel& model, HttpServerConfig config)
    : impl_(std::make_unique<Impl>(scheduler, model, std::move(config))) {
    HYDRA_CHECK(model.tokenizer != nullptr, "hydra serve: the served model has no tokenizer");
    // A client that vanishes mid-write must be an error return, not a SIGPIPE that ends the process.
    std::signal(SIGPIPE, SIG_IGN);
    Impl& im = *impl_;
    const int threads = im.config.worker_threads > 0 ? im.config.worker_threads : 512;
    im.server.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
    im.server.set_payload_max_length(im.config.max_body_bytes);
    im.server.set_keep_alive_max_count(1000);
    im.server.set_keep_alive_timeout(5);
    im.server.set_read_timeout(30);
    im.server.set_write_timeout(10);
    im.server.set_socket_options([&im](socket_t sock) {
        int yes = 1;
        setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        im.listen_fd = int(sock);
    });
    im.routes();
}

HttpServer::~HttpServer() {
    stop();
}

int HttpServer::bind() {
    Impl& im = *impl_;
    if (im.config.port == 0) {
        im.port = im.server.bind_to_any_port(im.config.host);
        HYDRA_CHECK(im.port > 0, "hydra serve: cannot listen on {} (any port)", im.config.host);
    } else {
        HYDRA_CHECK(im.server.bind_to_port(im.config.host, im.config.port),
                    "hydra serve: cannot listen on {}:{} (address in use or not available)", im.config.host,
                    im.config.port);
        im.port = im.config.port;
    }
    // httplib 0.11 listens with a backlog of 5, which drops connections when hundreds of clients connect
    // at once; listen() on a listening socket only changes its backlog.
    if (im.listen_fd >= 0) ::listen(im.listen_fd, 1024);
    return im.port;
}

void HttpServer::run() {
    HYDRA_CHECK(impl_->port > 0, "HttpServer::run: bind() first");
    impl_->server.listen_after_bind();
}

void HttpServer::shutdown() {
    Impl& im = *impl_;
    std::lock_guard lock(im.shutdown_mu);
    im.draining = true;
    im.scheduler.drain();
    // The scheduler is done; give the last chunks ([DONE]) time to be written before the server stops.
    for (int i = 0; i < 200 && im.in_flight > 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    im.server.stop();
}

void HttpServer::stop() {
    impl_->server.stop();
}

int HttpServer::port() const {
    return impl_->port;
}

const ServeMetrics& HttpServer::metrics() const {
    return impl_->metrics;
}

}  // namespace hydra::serve
