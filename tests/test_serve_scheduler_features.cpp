// The serving scheduler's features on the tiny models: prefix-cache hits (identical output, cached
// tokens reported; the hybrid's GDN state comes from the snapshot), cancellation frees the slot, the
// queue bound (503) and impossible requests (400), stop strings (also one split across tokens) and
// stop ids, logprobs against a direct log-softmax, drain, and a failing backend step.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "serve_fixtures.h"

namespace hydra {
namespace {

using serve::AdmissionError;
using serve::CpuBatchBackend;
using serve::GenerationEvent;
using serve::Scheduler;
using serve::SchedulerConfig;

constexpr size_t kCacheBytes = size_t(64) << 20;

const LlamaModel& teacher() {
    static const std::unique_ptr<LlamaModel> m = test::tiny_teacher();
    return *m;
}

const LlamaModel& hybrid() {
    static const std::unique_ptr<LlamaModel> m = test::tiny_hybrid(teacher());
    return *m;
}

// A CPU backend that sleeps in every step (so a test can act while a request runs) and fails any step
// that feeds `poison`.
class SlowBackend : public CpuBatchBackend {
  public:
    SlowBackend(const LlamaModel& m, int64_t slots, std::chrono::milliseconds delay, int32_t poison = -1)
        : CpuBatchBackend(m, slots, 128, kCacheBytes), delay_(delay), poison_(poison) {}
    void step(std::span<const serve::StepRow> rows, std::vector<float>& logits) override {
        std::this_thread::sleep_for(delay_);
        for (const serve::StepRow& r : rows)
            for (int32_t t : r.tokens)
                if (t == poison_) throw Error("poisoned token");
        CpuBatchBackend::step(rows, logits);
    }

  private:
    std::chrono::milliseconds delay_;
    int32_t poison_;
};

int admission_status(Scheduler& s, const serve::GenerationRequest& r, std::string* message = nullptr) {
    try {
        s.submit(r);
    } catch (const AdmissionError& e) {
        if (message) *message = e.what();
        return e.http_status;
    }
    return 0;
}

TEST(ServeSchedulerPrefix, HitGivesIdenticalOutputAndCountsCachedTokens) {
    const Tokenizer& tok = test::ascii_tokenizer();
    for (const LlamaModel* model : {&teacher(), &hybrid()}) {
        SCOPED_TRACE(model == &teacher() ? "teacher" : "hybrid");
        CpuBatchBackend backend(*model, 2, 128, kCacheBytes);
        SchedulerConfig cfg;
        cfg.prefill_chunk = 8;  // the snapshot position (29) is not a chunk boundary by itself
        Scheduler scheduler(backend, tok, cfg);
        const auto a = test::random_tokens(30, tok.vocab_size(), 11);
        auto b = a;
        for (int32_t t : test::random_tokens(9, tok.vocab_size(), 12)) b.push_back(t);

        const test::Outcome first = test::collect(*scheduler.submit(test::greedy_request(a, 12)));
        ASSERT_EQ(first.last.kind, GenerationEvent::Kind::Done) << first.last.error;
        EXPECT_EQ(first.last.cached_prompt_tokens, 0);
        EXPECT_EQ(first.tokens, test::reference(*model, tok, a, 12).tokens);
        EXPECT_EQ(scheduler.stats().prefix_cache_entries, 1);

        const test::Outcome again = test::collect(*scheduler.submit(test::greedy_request(a, 12)));
        EXPECT_EQ(again.last.cached_prompt_tokens, 29);  // all but the last prompt token
        EXPECT_EQ(again.tokens, first.tokens);
        EXPECT_EQ(again.text, first.text);

        const test::Outcome longer = test::collect(*scheduler.submit(test::greedy_request(b, 12)));
        EXPECT_EQ(longer.last.cached_prompt_tokens, 29);
        EXPECT_EQ(longer.tokens, test::reference(*model, tok, b, 12).tokens);

        // Prompt logprobs need every prompt position computed: no cache.
        serve::GenerationRequest scored = test::greedy_request(a, 2);
        scored.prompt_logprobs = true;
        scored.top_logprobs = 0;
        const test::Outcome s = test::collect(*scheduler.submit(scored));
        EXPECT_EQ(s.last.cached_prompt_tokens, 0);

        const serve::SchedulerStats st = scheduler.stats();
        EXPECT_EQ(st.cached_prompt_tokens_total, 58);
        EXPECT_EQ(st.prefix_cache_entries, 2);  // a[0, 29) and b[0, 38)
        EXPECT_GT(st.prefix_cache_bytes, 0u);
    }
}

// A backend whose snapshots exist only at multiples of 4 (as paged KV blocks allow): the scheduler
// ends a prefill chunk at the largest such position that leaves a prompt token to run, snapshots
// there, and a later hit restores exactly that many tokens.
class BlockBackend : public CpuBatchBackend {
  public:
    explicit BlockBackend(const LlamaModel& m) : CpuBatchBackend(m, 2, 128, kCacheBytes) {}
    int64_t snapshot_granularity() const override { return 4; }
    std::shared_ptr<const serve::PrefixSnapshot> snapshot(int32_t slot) override {
        taken.push_back(pos(slot));
        return CpuBatchBackend::snapshot(slot);
    }
    std::vector<int64_t> taken;
};

TEST(ServeSchedulerPrefix, SnapshotsFollowTheBackendGranularity) {
    const Tokenizer& tok = test::ascii_tokenizer();
    BlockBackend backend(hybrid());
    SchedulerConfig cfg;
    cfg.prefill_chunk = 7;
    Scheduler scheduler(backend, tok, cfg);
    const auto a = test::random_tokens(31, tok.vocab_size(), 14);
    const auto b = test::random_tokens(29, tok.vocab_size(), 15);
    const test::Outcome first = test::collect(*scheduler.submit(test::greedy_request(a, 6)));
    const test::Outcome other = test::collect(*scheduler.submit(test::greedy_request(b, 6)));
    EXPECT_EQ(backend.taken, (std::vector<int64_t>{28, 28}));  // (31 - 1) and (29 - 1) rounded down to 4
    const test::Outcome again = test::collect(*scheduler.submit(test::greedy_request(a, 6)));
    EXPECT_EQ(again.last.cached_prompt_tokens, 28);
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(again.tokens, test::reference(hybrid(), tok, a, 6).tokens);
    EXPECT_EQ(other.tokens, test::reference(hybrid(), tok, b, 6).tokens);
    EXPECT_EQ(backend.taken.size(), 2u);  // the hit took no new snapshot: its prefix is cached
}

TEST(ServeSchedulerPrefix, DisabledCacheNeverHits) {
    const Tokenizer& tok = test::ascii_tokenizer();
    CpuBatchBackend backend(hybrid(), 2, 128, kCacheBytes);
    SchedulerConfig cfg;
    cfg.prefix_cache = false;
    Scheduler scheduler(backend, tok, cfg);
    const auto a = test::random_tokens(20, tok.vocab_size(), 13);
    test::collect(*scheduler.submit(test::greedy_request(a, 3)));
    EXPECT_EQ(test::collect(*scheduler.submit(test::greedy_request(a, 3))).last.cached_prompt_tokens, 0);
    EXPECT_EQ(scheduler.stats().prefix_cache_entries, 0);
}

TEST(ServeSchedulerAdmission, CancelFreesTheSlot) {
    const Tokenizer& tok = test::ascii_tokenizer();
    SlowBackend backend(teacher(), 1, std::chrono::milliseconds(3));
    Scheduler scheduler(backend, tok);
    auto a = scheduler.submit(test::greedy_request(test::random_tokens(5, tok.vocab_size(), 1), 120));
    GenerationEvent e;
    ASSERT_TRUE(a->next(e, std::chrono::seconds(30)));  // running: it holds the only slot
    auto b = scheduler.submit(test::greedy_request(test::random_tokens(6, tok.vocab_size(), 2), 4));
    a->cancel();
    const test::Outcome ob = test::collect(*b);
    EXPECT_EQ(ob.last.kind, GenerationEvent::Kind::Done) << ob.last.error;
    EXPECT_EQ(ob.tokens.size(), 4u);
    const test::Outcome oa = test::collect(*a);
    EXPECT_EQ(oa.last.kind, GenerationEvent::Kind::Error);
    EXPECT_LT(int64_t(oa.tokens.size()), 119);
    EXPECT_EQ(scheduler.stats().cache.used_slots, 0);
}

TEST(ServeSchedulerAdmission, QueueBoundIs503AndImpossibleRequestsAre400) {
    const Tokenizer& tok = test::ascii_tokenizer();
    SlowBackend backend(teacher(), 1, std::chrono::milliseconds(3));
    SchedulerConfig cfg;
    cfg.max_queue = 1;
    Scheduler scheduler(backend, tok, cfg);
    const auto p = test::random_tokens(5, tok.vocab_size(), 1);
    auto a = scheduler.submit(test::greedy_request(p, 100));
    GenerationEvent e;
    ASSERT_TRUE(a->next(e, std::chrono::seconds(30)));
    auto b = scheduler.submit(test::greedy_request(p, 3));  // waits for the slot
    EXPECT_EQ(admission_status(scheduler, test::greedy_request(p, 3)), 503);

    std::string message;
    EXPECT_EQ(
        admission_status(scheduler, test::greedy_request(test::random_tokens(100, 10, 1), 29), &message),
        400);
    EXPECT_NE(message.find("100"), std::string::npos) << message;
    EXPECT_NE(message.find("29"), std::string::npos) << message;
    EXPECT_NE(message.find("128"), std::string::npos) << message;
    EXPECT_EQ(admission_status(scheduler, test::greedy_request({}, 3)), 400);
    EXPECT_EQ(admission_status(scheduler, test::greedy_request({1, tok.vocab_size()}, 3), &message), 400);
    EXPECT_NE(message.find("vocabulary"), std::string::npos) << message;
    serve::GenerationRequest bad = test::greedy_request(p, 3);
    bad.sampling.top_p = 0;
    EXPECT_EQ(admission_status(scheduler, bad), 400);
    EXPECT_GE(scheduler.stats().requests_rejected, 5);

    a->cancel();
    EXPECT_EQ(test::collect(*b).last.kind, GenerationEvent::Kind::Done);
}

TEST(ServeSchedulerAdmission, DrainFinishesQueuedWork) {
    const Tokenizer& tok = test::ascii_tokenizer();
    CpuBatchBackend backend(hybrid(), 2, 128, kCacheBytes);
    Scheduler scheduler(backend, tok);
    std::vector<std::shared_ptr<serve::RequestStream>> streams;
    for (int i = 0; i < 5; ++i)
        streams.push_back(
            scheduler.submit(test::greedy_request(test::random_tokens(8 + i, tok.vocab_size(), 40 + i), 10)));
    scheduler.drain();
    for (auto& s : streams) {
        // Everything is already there: drain() returned after the last Done.
        const test::Outcome o = test::collect(*s, std::chrono::seconds(1));
        EXPECT_EQ(o.last.kind, GenerationEvent::Kind::Done);
        EXPECT_EQ(o.tokens.size(), 10u);
    }
    EXPECT_EQ(admission_status(scheduler, test::greedy_request({1, 2}, 3)), 503);
}

TEST(ServeSchedulerAdmission, AFailingStepFailsItsRequestsAndServingGoesOn) {
    const Tokenizer& tok = test::ascii_tokenizer();
    SlowBackend backend(teacher(), 2, std::chrono::milliseconds(0), /*poison=*/7);
    Scheduler scheduler(backend, tok);
    const test::Outcome bad = test::collect(*scheduler.submit(test::greedy_request({1, 2, 7, 3}, 5)));
    EXPECT_EQ(bad.last.kind, GenerationEvent::Kind::Error);
    EXPECT_EQ(bad.last.http_status, 500);
    EXPECT_NE(bad.last.error.find("poisoned"), std::string::npos);
    const auto p = test::random_tokens(6, 7, 3);  // ids below the poison
    serve::GenerationRequest good = test::greedy_request(p, 5);
    good.stop_ids = {7};
    const test::Outcome ok = test::collect(*scheduler.submit(good));
    EXPECT_EQ(ok.last.kind, GenerationEvent::Kind::Done) << ok.last.error;
    EXPECT_EQ(ok.tokens, test::reference(teacher(), tok, p, 5, {7}).tokens);
    EXPECT_EQ(scheduler.stats().cache.used_slots, 0);
}

// Clients on several threads submit requests with shared prefixes, some cancel after the first event:
// every stream ends with exactly one Done or Error, every completed greedy output is the one
// generate() gives, and all slots come back.
TEST(ServeSchedulerAdmission, ManyClientsWithCancelsAllEndCorrectly) {
    const Tokenizer& tok = test::ascii_tokenizer();
    CpuBatchBackend backend(hybrid(), 3, 128, kCacheBytes);
    SchedulerConfig cfg;
    cfg.prefill_chunk = 5;
    Scheduler scheduler(backend, tok, cfg);
    struct Result {
        std::vector<int32_t> prompt, tokens;
        int64_t max_tokens = 0;
        bool done = false;
    };
    std::vector<std::vector<Result>> results(4);
    std::vector<std::thread> clients;
    for (int t = 0; t < 4; ++t)
        clients.emplace_back([&, t] {
            std::mt19937 g{uint32_t(t)};
            for (int i = 0; i < 12; ++i) {
                Result r;
                r.prompt = test::random_tokens(3 + int64_t(g() % 12), 4, g());  // 4 ids: shared prefixes
                r.max_tokens = 1 + int64_t(g() % 8);
                auto stream = scheduler.submit(test::greedy_request(r.prompt, r.max_tokens));
                const bool cancel = g() % 3 == 0;
                GenerationEvent e;
                int events = 0, ends = 0;
                while (stream->next(e, std::chrono::seconds(30))) {
                    if (cancel && ++events == 1) stream->cancel();
                    if (e.kind == GenerationEvent::Kind::Tokens) {
                        r.tokens.insert(r.tokens.end(), e.tokens.begin(), e.tokens.end());
                        continue;
                    }
                    ++ends;
                    r.done = e.kind == GenerationEvent::Kind::Done;
                    break;
                }
                EXPECT_EQ(ends, 1);
                EXPECT_FALSE(stream->next(e, std::chrono::milliseconds(0)));  // nothing after the end
                results[size_t(t)].push_back(std::move(r));
            }
        });
    for (auto& c : clients) c.join();
    int completed = 0;
    for (const auto& per_client : results)
        for (const Result& r : per_client) {
            if (!r.done) continue;
            ++completed;
            EXPECT_EQ(r.tokens, test::reference(hybrid(), tok, r.prompt, r.max_tokens).tokens);
        }
    EXPECT_GT(completed, 24);
    scheduler.drain();
    const serve::SchedulerStats st = scheduler.stats();
    EXPECT_EQ(st.requests_total, 48);
    EXPECT_EQ(st.cache.used_slots, 0);
    EXPECT_GT(st.cached_prompt_tokens_total, 0);
}

TEST(ServeSchedulerOutput, StopStringSplitAcrossTokensIsNeverEmitted) {
    const Tokenizer& tok = test::ascii_tokenizer();
    CpuBatchBackend backend(teacher(), 2, 128, kCacheBytes);
    Scheduler scheduler(backend, tok);
    const auto prompt = test::random_tokens(9, tok.vocab_size(), 21);
    const test::Outcome free = test::collect(*scheduler.submit(test::greedy_request(prompt, 40)));
    const std::string& text = free.text;
    // A two-character stop string made of the last character of token k-1 and the first of token k,
    // whose first occurrence in the output is exactly there.
    size_t end_of_prev = 0;
    std::string stop;
    size_t k = 0;
    for (size_t i = 0; i < free.tokens.size(); ++i) {
        const std::string& bytes = tok.token_bytes(free.tokens[i]);
        if (i >= 2 && end_of_prev > 0) {
            const std::string s = text.substr(end_of_prev - 1, 1) + bytes.substr(0, 1);
            if (text.find(s) == end_of_prev - 1) {
                stop = s;
                k = i;
                break;
            }
        }
        end_of_prev += bytes.size();
    }
    ASSERT_FALSE(stop.empty()) << "no suitable stop string in " << text;
    serve::GenerationRequest r = test::greedy_request(prompt, 40);
    r.stop_strings = {"never in this output \x01", stop};
    auto stream = scheduler.submit(r);
    test::Outcome got;
    GenerationEvent e;
    while (stream->next(e, std::chrono::seconds(30))) {
        EXPECT_EQ(e.text.find(stop), std::string::npos);
        if (e.kind != GenerationEvent::Kind::Tokens) {
            got.last = e;
            break;
        }
        got.tokens.insert(got.tokens.end(), e.tokens.begin(), e.tokens.end());
        got.text += e.text;
    }
    EXPECT_EQ(got.last.finish_reason, "stop");
    EXPECT_EQ(got.text, text.substr(0, end_of_prev - 1));
    EXPECT_EQ(got.tokens, std::vector<int32_t>(free.tokens.begin(), free.tokens.begin() + ptrdiff_t(k + 1)));
    EXPECT_EQ(got.last.completion_tokens, int64_t(k + 1));
}

TEST(ServeSchedulerOutput, StopIdEndsBeforeTheToken) {
    const Tokenizer& tok = test::ascii_tokenizer();
    CpuBatchBackend backend(hybrid(), 2, 128, kCacheBytes);
    Scheduler scheduler(backend, tok);
    const auto prompt = test::random_tokens(9, tok.vocab_size(), 22);
    const test::Outcome free = test::collect(*scheduler.submit(test::greedy_request(prompt, 30)));
    const int32_t stop_id = free.tokens[6];
    serve::GenerationRequest r = test::greedy_request(prompt, 30);
    r.stop_ids = {stop_id};
    const test::Outcome got = test::collect(*scheduler.submit(r));
    const test::Reference want = test::reference(hybrid(), tok, prompt, 30, {stop_id});
    EXPECT_EQ(got.last.finish_reason, "stop");
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.text, want.text);
    EXPECT_LE(got.tokens.size(), 6u);
}

TEST(ServeSchedulerOutput, LogprobsEqualADirectLogSoftmax) {
    const Tokenizer& tok = test::ascii_tokenizer();
    CpuBatchBackend backend(teacher(), 2, 128, kCacheBytes);
    SchedulerConfig cfg;
    cfg.prefill_chunk = 4;  // prompt logprobs gathered over several chunks
    Scheduler scheduler(backend, tok, cfg);
    const auto prompt = test::random_tokens(11, tok.vocab_size(), 23);
    serve::GenerationRequest r = test::greedy_request(prompt, 6);
    r.top_logprobs = 3;
    r.prompt_logprobs = true;
    const test::Outcome got = test::collect(*scheduler.submit(r));
    ASSERT_EQ(got.last.kind, GenerationEvent::Kind::Done) << got.last.error;
    ASSERT_EQ(got.tokens.size(), 6u);
    ASSERT_EQ(got.logprobs.size(), 6u);
    ASSERT_EQ(got.prompt_logprobs.size(), prompt.size());

    // Every position's log-softmax from one forward over prompt + output.
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), got.tokens.begin(), got.tokens.end());
    KVCache cache(teacher(), int64_t(all.size()));
    ForwardOptions fo;
    fo.quantized_decode = false;
    const Tensor logits = compute_logits(teacher(), forward_hidden(teacher(), all, cache, fo));
    const int64_t V = teacher().config().vocab_size;
    auto logprob = [&](int64_t pos, int32_t token) {
        const float* row = logits.f32() + pos * V;
        double mx = row[0], sum = 0;
        for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(row[v]));
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - mx);
        return double(row[token]) - mx - std::log(sum);
    };
    EXPECT_TRUE(std::isnan(got.prompt_logprobs[0].logprob));
    EXPECT_EQ(got.prompt_logprobs[0].token, prompt[0]);
    for (size_t i = 1; i < prompt.size(); ++i) {
        EXPECT_EQ(got.prompt_logprobs[i].token, prompt[i]);
        EXPECT_NEAR(got.prompt_logprobs[i].logprob, logprob(int64_t(i) - 1, prompt[i]), 1e-4) << i;
        ASSERT_EQ(got.prompt_logprobs[i].top.size(), 3u);
    }
    for (size_t j = 0; j < 6; ++j) {
        const int64_t pos = int64_t(prompt.size() + j) - 1;
        const serve::TokenLogprob& lp = got.logprobs[j];
        EXPECT_EQ(lp.token, got.tokens[j]);
        EXPECT_NEAR(lp.logprob, logprob(pos, got.tokens[j]), 1e-4) << j;
        ASSERT_EQ(lp.top.size(), 3u);
        EXPECT_EQ(lp.top[0].first, got.tokens[j]);  // greedy picks the most likely
        EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
        EXPECT_GE(lp.top[0].second, lp.top[1].second);
        EXPECT_GE(lp.top[1].second, lp.top[2].second);
        EXPECT_NEAR(lp.top[2].second, logprob(pos, lp.top[2].first), 1e-4);
    }

    // max_tokens 0 with prompt logprobs scores the prompt only.
    r.max_tokens = 0;
    const test::Outcome scored = test::collect(*scheduler.submit(r));
    EXPECT_EQ(scored.last.kind, GenerationEvent::Kind::Done);
    EXPECT_EQ(scored.last.completion_tokens, 0);
    EXPECT_TRUE(scored.tokens.empty());
    ASSERT_EQ(scored.prompt_logprobs.size(), prompt.size());
    EXPECT_NEAR(scored.prompt_logprobs[5].logprob, got.prompt_logprobs[5].logprob, 1e-5);

    // max_tokens 0 without prompt logprobs: an empty completion, nothing runs.
    r.prompt_logprobs = false;
    const test::Outcome empty = test::collect(*scheduler.submit(r));
    EXPECT_EQ(empty.last.kind, GenerationEvent::Kind::Done);
    EXPECT_EQ(empty.last.prompt_tokens, int64_t(prompt.size()));
    EXPECT_EQ(empty.last.completion_tokens, 0);
    EXPECT_TRUE(empty.tokens.empty());
}

}  // namespace
}  // namespace hydra
