// `hydra serve [MODEL] [--host H] [--port P] [--device cpu|cuda] [--max-seqs N] [--ctx N] [--api-key K] ...`:
// an OpenAI-compatible HTTP server (serve/http_server.h) over the continuous-batching scheduler, on the
// CPU batch backend or the GPU one. SIGTERM / SIGINT stop admitting, let the requests in flight finish,
// and exit 0.
#include <pthread.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/gpu_serve_backend.h"
#include "cli/model_load_report.h"
#include "core/error.h"
#include "serve/cpu_batch_backend.h"
#include "serve/http_server.h"
#include "serve/openai_api.h"
#include "serve/scheduler.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra::cli {

namespace {

struct ServeOptions {
    std::string model = default_model_path();
    std::string host = "127.0.0.1";
    int port = 8080;
    std::string device = "cpu";
    int64_t max_seqs = 0;  // 0: 8 on the CPU, 64 on the GPU
    int64_t ctx = 0;       // 0: the model's context, at most 8192
    std::string api_key;
    int64_t prefill_chunk = 0;  // 0: 512 on the CPU, the whole context on the GPU
    int64_t step_tokens = 0;  // 0: prefill_chunk + max_seqs (decode rows never shorten a prefill chunk)
    int64_t max_queue = 256;
    int64_t prefix_cache_mb = 1024;
    std::string served_name;
    int64_t cache_mb = 0;
    int64_t max_body_mb = 8;
    int threads = 0;
    std::string quantize_weights = "none";
};

// The name clients use in "model": the file name without .gguf, or the model directory's name.
std::string default_served_name(const std::string& path) {
    std::filesystem::path p(path);
    while (!p.empty() && !p.has_filename()) p = p.parent_path();
    std::string name = p.filename().string();
    if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
    return name.empty() ? "hydra" : name;
}

void serve(const ServeOptions& o) {
    // Signals go to one thread (sigwait), so that the shutdown runs as ordinary code. Blocked first of
    // all, before OpenMP, the scheduler and the server start threads, which inherit the mask (a signal
    // sent to the process is delivered to any thread that does not block it). A signal during the model
    // load waits until the server is up, then stops it.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    apply_threads(o.threads);
    HYDRA_CHECK(o.device == "cpu" || o.device == "cuda", "--device must be cpu or cuda, got '{}'", o.device);
    HYDRA_CHECK(o.port >= 0 && o.port <= 65535, "--port must be in [0, 65535], got {}", o.port);
    const std::string api_key =
        o.api_key.empty() && std::getenv("HYDRA_API_KEY") ? std::getenv("HYDRA_API_KEY") : o.api_key;
    LoadedModel m = load_model_reported(o.model);
    if (o.device == "cpu") apply_weight_quantization(*m.model, o.quantize_weights);
    HYDRA_CHECK(m.vocab.has_value(), "{}: the model has no tokenizer, which hydra serve needs", o.model);
    Tokenizer tok(*m.vocab, o.model);
    const ModelConfig& cfg = m.model->config();
    const int64_t model_ctx = cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 8192;
    const int64_t ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(model_ctx, 8192);
    HYDRA_CHECK(ctx >= 2, "--ctx must be at least 2, got {}", ctx);
    const int64_t max_seqs = o.max_seqs > 0 ? o.max_seqs : (o.device == "cuda" ? 64 : 8);

    std::unique_ptr<serve::BatchBackend> backend;
    if (o.device == "cuda") {
        GpuServeOptions g;
        g.max_slots = max_seqs;
        g.context = ctx;
        g.cache_bytes = size_t(o.cache_mb) << 20;
        backend = make_gpu_batch_backend(*m.model, g);
    } else {
        size_t bytes = size_t(o.cache_mb) << 20;
        if (bytes == 0) {
            // Every slot at full context, up to 4 GiB (beyond, requests wait for memory); at least one.
            const size_t full = serve::CpuBatchBackend(*m.model, 1, ctx, SIZE_MAX).bytes_for(ctx);
            bytes = std::max(full, std::min(full * size_t(max_seqs), size_t(4) << 30));
        }
        backend = std::make_unique<serve::CpuBatchBackend>(*m.model, max_seqs, ctx, bytes);
    }

    std::vector<int32_t> eos = cfg.eos_token_ids;
    if (tok.eos_id() >= 0) eos.push_back(tok.eos_id());
    const serve::ServedModel served = serve::make_served_model(
        o.served_name.empty() ? default_served_name(o.model) : o.served_name, tok, backend->context(), eos);

    serve::SchedulerConfig sc;
    sc.max_queue = o.max_queue;
    // On the GPU a prompt continued after cached tokens runs its attention as one decode launch per query
    // row (gpu/prefill_attention.h), an order of magnitude slower than a prefill from position 0, so whole
    // prompts prefill in one chunk unless asked otherwise.
    sc.prefill_chunk =
        o.prefill_chunk > 0 ? o.prefill_chunk : (o.device == "cuda" ? backend->context() : 512);
    // A full chunk fits next to every decode row, so chunks keep one length: on the GPU each new
    // (chunk, keys) shape of the prefill attention builds a cuDNN plan.
    sc.step_token_budget = o.step_tokens > 0 ? o.step_tokens : sc.prefill_chunk + max_seqs;
    sc.prefix_cache = o.prefix_cache_mb > 0;
    sc.prefix_cache_bytes = size_t(o.prefix_cache_mb) << 20;
    serve::Scheduler scheduler(*backend, tok, sc);

    serve::HttpServerConfig hc;
    hc.host = o.host;
    hc.port = o.port;
    hc.api_key = api_key;
    hc.max_body_bytes = size_t(o.max_body_mb) << 20;
    hc.worker_threads = int(std::max<int64_t>(256, o.max_queue + max_seqs + 64));
    serve::HttpServer server(scheduler, served, hc);
    const int port = server.bind();

    std::thread signal_thread([&] {
        int sig = 0;
        sigwait(&stop_signals, &sig);
        server.shutdown();
    });
    const char* h = o.host.find(':') != std::string::npos ? "[{}]" : "{}";
    fmt::print("hydra serve: {} ({}, {} sequences x {} positions) listening on http://{}:{}/v1{}\n",
               served.name, o.device, backend->max_slots(), backend->context(),
               fmt::format(fmt::runtime(h), o.host), port, api_key.empty() ? "" : " (API key required)");
    std::fflush(stdout);
    server.run();
    // run() also returns when the server stops on its own: wake the signal thread so it can be joined.
    pthread_kill(signal_thread.native_handle(), SIGTERM);
    signal_thread.join();  // it ran shutdown(): the scheduler is drained
    fmt::print(stderr, "hydra serve: stopped\n");
}

}  // namespace

void register_serve(CLI::App& app) {
    auto* o = new ServeOptions;
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
    cmd->add_option("MODEL", o->model, "a .gguf file or a model directory")->capture_default_str();
    cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
    cmd->add_option("--port", o->port, "port to listen on (0: any free port)")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    cmd->add_option("--device", o->device, "cpu | cuda")
        ->capture_default_str()
        ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd->add_option("--max-seqs", o->max_seqs, "sequences decoded at once (default: 8 on cpu, 64 on cuda)")
        ->check(at_least(1));
    cmd->add_option("--ctx", o->ctx,
                    "positions per sequence, prompt + completion (default: the model's, <= 8192)")
        ->check(at_least(2));
    cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' (default: $HYDRA_API_KEY)");
    cmd->add_option("--prefill-chunk", o->prefill_chunk,
                    "prompt tokens one sequence prefills per step at most (default: 512 on cpu, the whole "
                    "context on cuda)")
        ->check(at_least(1));
    cmd->add_option("--step-tokens", o->step_tokens,
                    "tokens of one scheduler step at most, decode rows + prefill chunks (default: "
                    "--prefill-chunk + --max-seqs)")
        ->check(at_least(1));
    cmd->add_option("--max-queue", o->max_queue, "waiting requests beyond which new ones get 503")
        ->capture_default_str()
        ->check(at_least(0));
    cmd->add_option("--prefix-cache-mb", o->prefix_cache_mb, "memory for prefix-cache snapshots; 0 = off")
        ->capture_default_str()
        ->check(at_least(0));
    cmd->add_option("--served-name", o->served_name,
                    "the model name clients send (default: the file's name)");
    cmd->add_option("--cache-mb", o->cache_mb,
                    "KV + state memory for the sequences; 0 = the backend's default")
        ->capture_default_str()
        ->check(at_least(0));
    cmd->add_option("--max-body-mb", o->max_body_mb, "largest request body accepted (413 beyond)")
        ->capture_default_str()
        ->check(at_least(1));
    add_threads_option(*cmd, o->threads);
    add_weight_quantization_option(*cmd, o->quantize_weights);
    cmd->callback([o] { serve(*o); });
}

}  // namespace hydra::cli
