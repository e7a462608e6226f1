// Continuous batching (see scheduler.h). One thread owns the backend and every running Sequence; the
// mutex guards only the waiting queue, the flags and the counters that other threads read.
//
// A step: admit waiting requests in FIFO order (a slot, then the reservation for prompt + max_tokens;
// the first that does not fit blocks the ones behind it, so a long request is not starved), drop
// cancelled ones, then one decode row per decoding sequence and prompt chunks (at most prefill_chunk
// per sequence) in the remaining token budget, oldest first; a chunk the budget would cut waits for the
// next step unless no prompt chunk is in this one. Decode rows go first so that a long prompt never
// stalls the streams already decoding.
#include "serve/scheduler.h"

#include <algorithm>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "serve/prefix_cache.h"
#include "serve/sequence.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra::serve {

// --- RequestStream ---------------------------------------------------------------------------------

bool RequestStream::next(GenerationEvent& event, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    event = std::move(events_.front());
    events_.pop_front();
    return true;
}

void RequestStream::cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
}

bool RequestStream::cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
}

void RequestStream::push(GenerationEvent event) {
    {
        std::lock_guard lock(mu_);
        events_.push_back(std::move(event));
    }
    cv_.notify_all();
}

// --- Scheduler -------------------------------------------------------------------------------------

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kRateWindowSeconds = 5.0;

GenerationEvent error_event(int status, std::string message) {
    GenerationEvent e;
    e.kind = GenerationEvent::Kind::Error;
    e.http_status = status;
    e.error = std::move(message);
    return e;
}

struct Waiting {
    GenerationRequest request;
    std::shared_ptr<RequestStream> stream;
    uint64_t seed = 0;
};

}  // namespace

struct Scheduler::Impl {
    Impl(BatchBackend& b, const Tokenizer& t, SchedulerConfig c)
        : backend(b), tokenizer(t), config(c), prefix(c.prefix_cache_bytes), seeds(std::random_device{}()) {}

    BatchBackend& backend;
    const Tokenizer& tokenizer;
    const SchedulerConfig config;
    PrefixCache prefix;

    // Guarded by mu.
    mutable std::mutex mu;
    std::condition_variable wake;  // the scheduler thread: work arrived, or stop
    std::condition_variable idle;  // drain(): queue and batch are empty
    std::deque<Waiting> waiting;
    bool draining = false, stopping = false;
    int64_t running_count = 0;
    SchedulerStats counters;                                 // the counters part of stats()
    std::deque<std::pair<Clock::time_point, int64_t>> rate;  // (step end, tokens generated)
    Rng seeds;

    // Scheduler thread only.
    std::vector<std::unique_ptr<Sequence>> running;  // admission order
    std::vector<float> logits;
    std::thread thread;

    void loop();
    void admit();
    void drop_cancelled();
    void run_step();
    void consume(Sequence& s, const StepRow& row, const float* logits);
    void end(Sequence& s);  // releases the slot; the sequence is removed by the caller
    void fail_running(int status, const std::string& message);
    void fail_all(int status, const std::string& message);  // running and waiting
    void plan_prefix(Sequence& s);
};

void Scheduler::Impl::loop() {
    for (;;) {
        {
            std::unique_lock lock(mu);
            wake.wait(lock, [&] { return stopping || !waiting.empty() || !running.empty(); });
            if (stopping) break;
        }
        try {
            admit();
            drop_cancelled();
            if (!running.empty()) run_step();
        } catch (const std::exception& e) {
            // A bug or an allocation failure outside the model step: fail what runs, keep serving.
            fail_running(500, fmt::format("internal error: {}", e.what()));
        }
        const CacheUsage usage = backend.usage();
        std::lock_guard lock(mu);
        counters.cache = usage;
        running_count = int64_t(running.size());
        counters.requests_running = running_count;
        counters.requests_waiting = int64_t(waiting.size());
        if (waiting.empty() && running.empty()) idle.notify_all();
    }
    fail_all(503, "the server is shutting down");
}

// Where the prompt's prefill pauses for a snapshot: the largest multiple of the backend's granularity
// that leaves at least one prompt token to run (its logits start the generation).
void Scheduler::Impl::plan_prefix(Sequence& s) {
    const int64_t n = s.prompt_len();
    if (!config.prefix_cache) return;
    if (!s.request().prompt_logprobs) {
        PrefixCache::Hit hit = prefix.lookup(s.request().prompt, n - 1);
        if (hit.snapshot) {
            backend.restore(s.slot, *hit.snapshot);
            s.prefilled = s.cached = hit.tokens;
        }
    }
    const int64_t g = backend.snapshot_granularity();
    const int64_t p = g > 0 ? (n - 1) / g * g : 0;
    if (p > s.prefilled) s.snapshot_at = p;
}

void Scheduler::Impl::admit() {
    {
        // Cancelled waiting requests leave the queue without ever taking a slot.
        std::lock_guard lock(mu);
        std::erase_if(waiting, [](const Waiting& w) {
            if (!w.stream->cancelled()) return false;
            w.stream->push(error_event(499, "cancelled"));
            return true;
        });
    }
    for (;;) {
        Waiting* front = nullptr;
        {
            // Only this thread removes from the queue and submit() only appends, which keeps references
            // to the elements valid, so the front is read without the lock.
            std::lock_guard lock(mu);
            if (waiting.empty()) return;
            front = &waiting.front();
        }
        const GenerationRequest& r = front->request;
        const int64_t need = int64_t(r.prompt.size()) + std::max<int64_t>(r.max_tokens, 1);
        bool taken = false, never = false;
        const int32_t slot = backend.acquire();
        if (slot < 0) {
            // Every slot is free when nothing runs; a backend that still has none can never serve it.
            never = running.empty();
        } else {
            try {
                taken = backend.reserve(slot, std::min(need, backend.context()));
            } catch (const std::exception&) {
                taken = false;
            }
            if (!taken) {
                backend.release(slot);
                // Nothing else holds memory, so it will never fit: refuse instead of waiting forever.
                never = running.empty();
            }
        }
        if (!taken && !never) return;  // FIFO: it waits, and so do the ones behind it
        Waiting w;
        {
            // Counted as running before it leaves the queue, so drain() never sees it in neither.
            std::lock_guard lock(mu);
            w = std::move(waiting.front());
            waiting.pop_front();
            ++running_count;
        }
        if (never) {
            w.stream->push(error_event(
                503,
                fmt::format("the request needs a cache of {} positions, more than the server's cache memory "
                            "or sequence slots hold",
                            need)));
            continue;
        }
        auto s = std::make_unique<Sequence>(std::move(w.request), std::move(w.stream), w.seed, tokenizer);
        s->slot = slot;
        try {
            plan_prefix(*s);
        } catch (const std::exception& e) {
            s->stream().push(
                error_event(500, fmt::format("restoring the prefix cache failed: {}", e.what())));
            backend.release(slot);
            continue;
        }
        {
            std::lock_guard lock(mu);
            counters.prompt_tokens_total += s->prompt_len();
            counters.cached_prompt_tokens_total += s->cached;
        }
        running.push_back(std::move(s));
    }
}

void Scheduler::Impl::end(Sequence& s) {
    if (s.slot >= 0) backend.release(s.slot);
    s.slot = -1;
}

void Scheduler::Impl::drop_cancelled() {
    std::erase_if(running, [&](const std::unique_ptr<Sequence>& s) {
        if (!s->stream().cancelled()) return false;
        end(*s);
        s->stream().push(error_event(499, "cancelled"));
        return true;
    });
}

// One row's logits: prompt logprobs, the snapshot at the planned position, the next token.
void Scheduler::Impl::consume(Sequence& s, const StepRow& row, const float* l) {
    const int64_t V = backend.vocab_size();
    const int64_t T = int64_t(row.tokens.size());
    if (!s.prompt_done()) {
        // Logit j of the row belongs to prompt position prefilled + T - n_logits + j.
        const int64_t first = s.prefilled + T - row.n_logits;
        for (int64_t j = 0; j < row.n_logits; ++j) {
            const int64_t p = first + j;
            std::span<const float> lj(l + j * V, size_t(V));
            if (p + 1 < s.prompt_len()) s.prompt_logits(p, lj);
        }
        s.prefilled += T;
        if (s.prefilled == s.snapshot_at) {
            try {
                prefix.insert(std::span(s.request().prompt).first(size_t(s.snapshot_at)),
                              backend.snapshot(s.slot));
            } catch (const std::exception&) {
                // A snapshot that cannot be made only costs a later cache miss.
            }
        }
        if (s.prompt_done()) s.next_logits({l + (row.n_logits - 1) * V, size_t(V)});
    } else {
        s.next_logits({l, size_t(V)});
    }
}

void Scheduler::Impl::run_step() {
    // Build the rows: decode rows first (one token each), then prompt chunks in the remaining budget.
    std::vector<StepRow> rows;
    std::vector<Sequence*> owners;
    int64_t budget = config.step_token_budget;
    for (auto& s : running)
        if (s->prompt_done()) {
            rows.push_back({s->slot, std::span<const int32_t>(&s->next_input, 1), 1});
            owners.push_back(s.get());
            --budget;
        }
    bool prompt_row = false;
    for (auto& s : running) {
        if (s->prompt_done() || budget <= 0) continue;
        int64_t chunk = std::min(config.prefill_chunk, s->prompt_len() - s->prefilled);
        // A chunk the budget would cut waits for the next step, unless it is the step's first: prompt
        // chunks then stay whole multiples of prefill_chunk, so a backend sees few distinct chunk shapes
        // and few continued prompts (both cost more than the chunk itself on the GPU).
        if (chunk > budget) {
            if (prompt_row) continue;
            chunk = budget;
        }
        prompt_row = true;
        if (s->snapshot_at > s->prefilled) chunk = std::min(chunk, s->snapshot_at - s->prefilled);
        const bool last = s->prefilled + chunk == s->prompt_len();
        const int64_t n_logits = s->request().prompt_logprobs ? chunk : (last ? 1 : 0);
        rows.push_back(
            {s->slot, std::span(s->request().prompt).subspan(size_t(s->prefilled), size_t(chunk)), n_logits});
        owners.push_back(s.get());
        budget -= chunk;
    }
    if (rows.empty()) return;

    try {
        backend.step(rows, logits);
    } catch (const std::exception& e) {
        // The caches of this step's sequences are in an unknown state: those requests fail, the rest go on.
        for (Sequence* s : owners) {
            s->stream().push(error_event(500, fmt::format("the model step failed: {}", e.what())));
            end(*s);
        }
        std::erase_if(running, [](const std::unique_ptr<Sequence>& s) { return s->slot < 0; });
        std::lock_guard lock(mu);
        ++counters.steps_total;
        return;
    }

    const int64_t V = backend.vocab_size();
    const float* l = logits.data();
    int64_t generated = 0;
    std::vector<char> failed(rows.size(), 0);
    for (size_t i = 0; i < rows.size(); ++i) {
        Sequence& s = *owners[i];
        const int64_t before = s.generated();
        try {
            consume(s, rows[i], l);
        } catch (const std::exception& e) {
            s.stream().push(error_event(500, fmt::format("generation failed: {}", e.what())));
            failed[i] = 1;
        }
        l += rows[i].n_logits * V;
        generated += s.generated() - before;
    }
    // Finished sequences give their slots back, and the counters are updated, before the events go
    // out: a client that sees Done also sees its tokens and its freed slot in stats().
    for (size_t i = 0; i < owners.size(); ++i)
        if (owners[i]->finished() || failed[i]) end(*owners[i]);
    const CacheUsage usage = backend.usage();
    const Clock::time_point now = Clock::now();
    {
        std::lock_guard lock(mu);
        counters.cache = usage;
        ++counters.steps_total;
        counters.generated_tokens_total += generated;
        rate.emplace_back(now, generated);
        while (!rate.empty() && now - rate.front().first > std::chrono::duration<double>(kRateWindowSeconds))
            rate.pop_front();
    }
    for (size_t i = 0; i < owners.size(); ++i)
        if (!failed[i]) owners[i]->publish();
    std::erase_if(running, [](const std::unique_ptr<Sequence>& s) { return s->finished() || s->slot < 0; });
}

void Scheduler::Impl::fail_running(int status, const std::string& message) {
    for (auto& s : running) {
        end(*s);
        s->stream().push(error_event(status, message));
    }
    running.clear();
}

void Scheduler::Impl::fail_all(int status, const std::string& message) {
    fail_running(status, message);
    std::lock_guard lock(mu);
    for (Waiting& w : waiting) w.stream->push(error_event(status, message));
    waiting.clear();
    running_count = 0;
    idle.notify_all();
}

Scheduler::Scheduler(BatchBackend& backend, const Tokenizer& tokenizer, SchedulerConfig config)
    : impl_(std::make_unique<Impl>(backend, tokenizer, config)) {
    HYDRA_CHECK(config.max_queue >= 0, "the queue bound must be >= 0 (got {})", config.max_queue);
    HYDRA_CHECK(config.prefill_chunk > 0, "the prefill chunk must be positive (got {})",
                config.prefill_chunk);
    HYDRA_CHECK(config.step_token_budget > 0, "the step token budget must be positive (got {})",
                config.step_token_budget);
    HYDRA_CHECK(tokenizer.vocab_size() <= backend.vocab_size(),
                "the tokenizer has {} tokens but the model only {}", tokenizer.vocab_size(),
                backend.vocab_size());
    impl_->thread = std::thread([this] { impl_->loop(); });
}

Scheduler::~Scheduler() {
    {
        std::lock_guard lock(impl_->mu);
        impl_->stopping = true;
    }
    impl_->wake.notify_all();
    impl_->thread.join();
}

std::shared_ptr<RequestStream> Scheduler::submit(GenerationRequest request) {
    Impl& m = *impl_;
    auto refuse = [&](int status, const std::string& message) {
        {
            std::lock_guard lock(m.mu);
            ++m.counters.requests_rejected;
        }
        throw AdmissionError(status, message);
    };
    const int64_t n = int64_t(request.prompt.size());
    const int64_t ctx = m.backend.context(), vocab = m.tokenizer.vocab_size();
    if (n == 0) refuse(400, "the prompt is empty");
    for (size_t i = 0; i < request.prompt.size(); ++i)
        if (request.prompt[i] < 0 || request.prompt[i] >= vocab)
            refuse(400, fmt::format("prompt token {} (id {}) is outside the vocabulary of {} tokens", i,
                                    request.prompt[i], vocab));
    if (request.max_tokens < 0)
        refuse(400, fmt::format("max_tokens must be >= 0 (got {})", request.max_tokens));
    if (n + request.max_tokens > ctx)
        refuse(400, fmt::format(
                        "the prompt has {} tokens and max_tokens is {}: {} exceeds the context of {} tokens",
                        n, request.max_tokens, n + request.max_tokens, ctx));
    if (request.top_logprobs < -1 || request.top_logprobs > 20)
        refuse(400, fmt::format("logprobs must be between 0 and 20 (got {})", request.top_logprobs));
    for (const std::string& s : request.stop_strings)
        if (s.empty()) refuse(400, "a stop string is empty");
    try {
        Sampler check({request.sampling.temperature, request.sampling.top_k, request.sampling.top_p, 0});
    } catch (const Error& e) {
        refuse(400, e.what());
    }

    auto stream = std::make_shared<RequestStream>();
    {
        std::lock_guard lock(m.mu);
        if (m.draining || m.stopping) {
            ++m.counters.requests_rejected;
            throw AdmissionError(503, "the server is shutting down");
        }
        if (int64_t(m.waiting.size()) >= m.config.max_queue) {
            ++m.counters.requests_rejected;
            throw AdmissionError(503,
                                 fmt::format("the queue is full ({} requests waiting)", m.waiting.size()));
        }
        ++m.counters.requests_total;
        if (request.max_tokens == 0 && !request.prompt_logprobs) {
            // Nothing to compute: the answer is an empty completion.
            GenerationEvent done;
            done.kind = GenerationEvent::Kind::Done;
            done.finish_reason = "length";
            done.prompt_tokens = n;
            stream->push(std::move(done));
            return stream;
        }
        const uint64_t seed = request.sampling.seed ? *request.sampling.seed : m.seeds.next_u64();
        m.waiting.push_back({std::move(request), stream, seed});
        m.counters.requests_waiting = int64_t(m.waiting.size());
    }
    m.wake.notify_all();
    return stream;
}

void Scheduler::drain() {
    Impl& m = *impl_;
    std::unique_lock lock(m.mu);
    m.draining = true;
    m.wake.notify_all();
    m.idle.wait(lock, [&] { return m.stopping || (m.waiting.empty() && m.running_count == 0); });
}

SchedulerStats Scheduler::stats() const {
    Impl& m = *impl_;
    SchedulerStats s;
    {
        std::lock_guard lock(m.mu);
        s = m.counters;
        s.requests_waiting = int64_t(m.waiting.size());
        int64_t tokens = 0;
        for (const auto& [t, n] : m.rate) tokens += n;
        if (!m.rate.empty()) {
            const double span =
                std::max(std::chrono::duration<double>(Clock::now() - m.rate.front().first).count(), 1.0);
            s.generated_tokens_per_second = double(tokens) / std::min(span, kRateWindowSeconds);
        }
    }
    s.prefix_cache_bytes = m.prefix.bytes();
    s.prefix_cache_entries = m.prefix.entries();
    return s;
}

}  // namespace hydra::serve
