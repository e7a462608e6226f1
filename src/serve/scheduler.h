// Scheduler: continuous batching over a BatchBackend. Requests wait in a bounded queue; at every step
// sequences join (a free slot and reserved memory) and leave (finished, cancelled), decoding sequences
// advance one token each, and prompts are prefilled in chunks under a per-step token budget, so that a
// long prompt never stalls the streams already decoding. Each sequence samples with its own seeded
// sampler, detokenizes incrementally, applies stop ids / stop strings, and streams GenerationEvents into
// its RequestStream. A shared prompt prefix reuses a cached snapshot (KV rows + GDN state) when the
// backend's snapshots allow (serve/prefix_cache.h); the output is the same with and without it.
//
// One scheduler thread runs the backend; submit() and the streams are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "serve/batch_backend.h"
#include "serve/generation_request.h"

namespace hydra {
class Tokenizer;
}

namespace hydra::serve {

struct SchedulerConfig {
    int64_t max_queue = 256;          // waiting requests beyond which submit() refuses with 503
    int64_t prefill_chunk = 512;      // prompt tokens one sequence prefills per step at most
    int64_t step_token_budget = 2048; // tokens of one step (decode rows + prefill chunks) at most
    bool prefix_cache = true;
    size_t prefix_cache_bytes = size_t(1) << 30;  // snapshots kept alive at most (LRU beyond)
};

// submit() refuses a request with this: 400 (it can never run: prompt + max_tokens over the context,
// empty prompt, ...) or 503 (queue full, or draining).
struct AdmissionError : std::runtime_error {
    AdmissionError(int status, const std::string& message) : std::runtime_error(message), http_status(status) {}
    int http_status;
};

// The events of one request, in order; ends with one Done or Error event.
class RequestStream {
public:
    // Waits up to `timeout` for the next event; false on timeout (the request may still be running).
    bool next(GenerationEvent& event, std::chrono::milliseconds timeout);
    // The client went away: the sequence leaves the batch at the next step and its slot is freed.
    void cancel();
    bool cancelled() const;

    // Used by the scheduler.
    void push(GenerationEvent event);

private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<GenerationEvent> events_;
    bool cancelled_ = false;
};

struct SchedulerStats {
    int64_t requests_total = 0, requests_running = 0, requests_waiting = 0, requests_rejected = 0;
    int64_t prompt_tokens_total = 0, generated_tokens_total = 0, cached_prompt_tokens_total = 0;
    int64_t steps_total = 0;
    double generated_tokens_per_second = 0;  // over the last few seconds
    CacheUsage cache;
    size_t prefix_cache_bytes = 0;
    int64_t prefix_cache_entries = 0;
};

class Scheduler {
public:
    // The backend and tokenizer must outlive the scheduler. Starts the scheduler thread.
    Scheduler(BatchBackend& backend, const Tokenizer& tokenizer, SchedulerConfig config = {});
    ~Scheduler();  // stops the thread; requests still running end with an Error event
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Validates and queues a request (throws AdmissionError).
    std::shared_ptr<RequestStream> submit(GenerationRequest request);
    // Stops admitting (submit() answers 503), lets running and queued requests finish, then returns.
    void drain();
    SchedulerStats stats() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace hydra::serve
