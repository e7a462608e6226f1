// HttpServer: `hydra serve`'s HTTP front over cpp-httplib. Routes POST /v1/completions and
// /v1/chat/completions into the Scheduler (openai_api.h parses and formats), GET /v1/models, /health and
// /metrics. Streaming responses go out as server-sent events through chunked content providers; a
// failed write (the client went away) cancels the request's sequences so that their slots are freed at
// the next step. Bodies are size-limited (413), an API key is checked in constant time (401), and every
// error is an OpenAI error object: no input makes the server fail.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "serve/openai_api.h"
#include "serve/scheduler.h"
#include "serve/serve_metrics.h"

namespace hydra::serve {

struct HttpServerConfig {
    std::string host = "127.0.0.1";
    int port = 8080;                          // 0: any free port (see bind())
    std::string api_key;                      // "": no authentication
    size_t max_body_bytes = size_t(8) << 20;  // larger request bodies get 413
    int worker_threads = 0;                   // 0: enough for the scheduler's queue + slots + slack (>= 256)
};

class HttpServer {
  public:
    // The scheduler and the model (its tokenizer) must outlive the server.
    HttpServer(Scheduler& scheduler, const ServedModel& model, HttpServerConfig config);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds the listening socket (throws hydra::Error when it cannot); returns the port.
    int bind();
    // Serves until stop() / shutdown(); returns once every connection's handler has returned.
    void run();
    // Graceful end, from any thread: the scheduler stops admitting (new generations get 503), the
    // requests in flight finish and their responses are written, then the server stops listening.
    void shutdown();
    // Stops listening at once (streams still open are cut).
    void stop();

    int port() const;
    const ServeMetrics& metrics() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// True when `header` is exactly "Bearer <key>"; the time taken does not depend on where they differ.
bool bearer_matches(const std::string& header, const std::string& key);

}  // namespace hydra::serve
