// The serving scheduler over the CPU batch backend on tiny models: greedy output equals
// hydra::generate() token for token (teacher and hybrid), concurrent requests each get what they get
// alone, chunked prefill changes nothing, seeded sampling is reproducible and equals generate()'s.
#include <gtest/gtest.h>

#include "model/model_loader.h"
#include "model_paths.h"
#include "serve_fixtures.h"

namespace hydra {
namespace {

using serve::CpuBatchBackend;
using serve::GenerationEvent;
using serve::Scheduler;
using serve::SchedulerConfig;

struct Models {
    std::unique_ptr<LlamaModel> teacher = test::tiny_teacher();
    std::unique_ptr<LlamaModel> hybrid = test::tiny_hybrid(*teacher);
    std::vector<std::pair<const char*, const LlamaModel*>> both() const {
        return {{"teacher", teacher.get()}, {"hybrid", hybrid.get()}};
    }
};

const Models& models() {
    static const Models m;
    return m;
}

constexpr size_t kCacheBytes = size_t(64) << 20;

TEST(ServeScheduler, GreedyEqualsGenerate) {
    const Tokenizer& tok = test::ascii_tokenizer();
    for (auto [name, model] : models().both()) {
        SCOPED_TRACE(name);
        CpuBatchBackend backend(*model, 4, 128, kCacheBytes);
        Scheduler scheduler(backend, tok);
        const auto prompt = test::random_tokens(21, tok.vocab_size(), 1);
        const test::Reference want = test::reference(*model, tok, prompt, 30);
        const test::Outcome got = test::collect(*scheduler.submit(test::greedy_request(prompt, 30)));
        ASSERT_EQ(got.last.kind, GenerationEvent::Kind::Done) << got.last.error;
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_EQ(got.text, want.text);
        EXPECT_EQ(got.last.finish_reason, "length");
        EXPECT_EQ(got.last.prompt_tokens, 21);
        EXPECT_EQ(got.last.completion_tokens, 30);
        const serve::SchedulerStats st = scheduler.stats();
        EXPECT_EQ(st.generated_tokens_total, 30);
        EXPECT_EQ(st.prompt_tokens_total, 21);
        EXPECT_EQ(st.requests_total, 1);
        EXPECT_GT(st.generated_tokens_per_second, 0);
        EXPECT_GT(st.steps_total, 0);
    }
}

TEST(ServeScheduler, ConcurrentRequestsGetWhatTheyGetAlone) {
    const Tokenizer& tok = test::ascii_tokenizer();
    for (auto [name, model] : models().both()) {
        SCOPED_TRACE(name);
        // Three slots for six requests: some wait, all join and leave the batch at different steps.
        CpuBatchBackend backend(*model, 3, 128, kCacheBytes);
        SchedulerConfig cfg;
        cfg.prefill_chunk = 8;
        cfg.step_token_budget = 12;
        cfg.prefix_cache = false;
        Scheduler scheduler(backend, tok, cfg);
        std::vector<std::vector<int32_t>> prompts;
        std::vector<int64_t> lengths;
        std::vector<std::shared_ptr<serve::RequestStream>> streams;
        for (int i = 0; i < 6; ++i) {
            prompts.push_back(test::random_tokens(5 + 7 * i, tok.vocab_size(), 100 + i));
            lengths.push_back(4 + 5 * ((i * 7) % 6));
            streams.push_back(scheduler.submit(test::greedy_request(prompts.back(), lengths.back())));
        }
        for (int i = 0; i < 6; ++i) {
            SCOPED_TRACE(i);
            const test::Outcome got = test::collect(*streams[size_t(i)]);
            ASSERT_EQ(got.last.kind, GenerationEvent::Kind::Done) << got.last.error;
            const test::Reference want = test::reference(*model, tok, prompts[size_t(i)], lengths[size_t(i)]);
            EXPECT_EQ(got.tokens, want.tokens);
            EXPECT_EQ(got.text, want.text);
        }
        EXPECT_EQ(scheduler.stats().cache.used_slots, 0);
    }
}

TEST(ServeScheduler, ChunkedPrefillGivesTheSameTokens) {
    const Tokenizer& tok = test::ascii_tokenizer();
    const auto prompt = test::random_tokens(40, tok.vocab_size(), 7);
    for (auto [name, model] : models().both()) {
        SCOPED_TRACE(name);
        std::vector<int32_t> whole;
        for (int64_t chunk : {512, 3, 7}) {
            SCOPED_TRACE(chunk);
            CpuBatchBackend backend(*model, 2, 128, kCacheBytes);
            SchedulerConfig cfg;
            cfg.prefill_chunk = chunk;
            cfg.prefix_cache = false;
            Scheduler scheduler(backend, tok, cfg);
            const test::Outcome got = test::collect(*scheduler.submit(test::greedy_request(prompt, 20)));
            ASSERT_EQ(got.last.kind, GenerationEvent::Kind::Done) << got.last.error;
            if (whole.empty()) whole = got.tokens;
            EXPECT_EQ(got.tokens, whole);
        }
        EXPECT_EQ(whole, test::reference(*model, tok, prompt, 20).tokens);
    }
}

// Records the prompt chunks (rows of more than one token) that the scheduler hands the backend.
class ChunkRecorder final : public serve::BatchBackend {
  public:
    explicit ChunkRecorder(serve::BatchBackend& inner) : inner_(inner) {}
    struct Chunk {
        int32_t slot;
        int64_t pos, len;
    };
    std::vector<Chunk> chunks;  // scheduler thread only; read after the requests are done

    int64_t vocab_size() const override { return inner_.vocab_size(); }
    int64_t max_slots() const override { return inner_.max_slots(); }
    int64_t context() const override { return inner_.context(); }
    int32_t acquire() override { return inner_.acquire(); }
    void release(int32_t slot) override { inner_.release(slot); }
    int64_t pos(int32_t slot) const override { return inner_.pos(slot); }
    bool reserve(int32_t slot, int64_t positions) override { return inner_.reserve(slot, positions); }
    void step(std::span<const serve::StepRow> rows, std::vector<float>& logits) override {
        for (const serve::StepRow& r : rows)
            if (r.tokens.size() > 1) chunks.push_back({r.slot, inner_.pos(r.slot), int64_t(r.tokens.size())});
        inner_.step(rows, logits);
    }
    int64_t snapshot_granularity() const override { return inner_.snapshot_granularity(); }
    std::shared_ptr<const serve::PrefixSnapshot> snapshot(int32_t slot) override {
        return inner_.snapshot(slot);
    }
    void restore(int32_t slot, const serve::PrefixSnapshot& s) override { inner_.restore(slot, s); }
    serve::CacheUsage usage() const override { return inner_.usage(); }

  private:
    serve::BatchBackend& inner_;
};

// A step's token budget never cuts a prompt chunk short when another prompt chunk already runs in that step:
// chunks start at multiples of prefill_chunk, so a GPU backend sees few shapes and few continued prompts.
TEST(ServeScheduler, PromptChunksStayWholeMultiplesOfTheChunk) {
    const Tokenizer& tok = test::ascii_tokenizer();
    const LlamaModel& model = *models().hybrid;
    CpuBatchBackend cpu(model, 4, 128, kCacheBytes);
    ChunkRecorder backend(cpu);
    SchedulerConfig cfg;
    cfg.prefill_chunk = 8;
    cfg.step_token_budget = 12;  // 8 + 4: a second prompt's chunk would be cut to 4 before
    cfg.prefix_cache = false;
    Scheduler scheduler(backend, tok, cfg);
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::shared_ptr<serve::RequestStream>> streams;
    for (int i = 0; i < 6; ++i) {
        prompts.push_back(test::random_tokens(9 + 5 * i, tok.vocab_size(), 300 + i));
        streams.push_back(scheduler.submit(test::greedy_request(prompts.back(), 6)));
    }
    for (int i = 0; i < 6; ++i) {
        const test::Outcome got = test::collect(*streams[size_t(i)]);
        ASSERT_EQ(got.last.kind, GenerationEvent::Kind::Done) << got.last.error;
        EXPECT_EQ(got.tokens, test::reference(model, tok, prompts[size_t(i)], 6).tokens) << "request " << i;
    }
    ASSERT_FALSE(backend.chunks.empty());
    for (const ChunkRecorder::Chunk& c : backend.chunks) {
        EXPECT_EQ(c.pos % cfg.prefill_chunk, 0) << "a chunk of " << c.len << " at position " << c.pos;
        EXPECT_LE(c.len, cfg.prefill_chunk);
    }
}

TEST(ServeScheduler, SeededSamplingIsReproducibleAndEqualsGenerate) {
    const Tokenizer& tok = test::ascii_tokenizer();
    const LlamaModel& model = *models().teacher;
    CpuBatchBackend backend(model, 4, 128, kCacheBytes);
    Scheduler scheduler(backend, tok);
    const auto prompt = test::random_tokens(12, tok.vocab_size(), 3);
    serve::GenerationRequest r = test::greedy_request(prompt, 25);
    r.sampling = {0.9f, 20, 0.95f, 1234};
    auto a = scheduler.submit(r), b = scheduler.submit(r);
    r.sampling.seed = 99;
    auto c = scheduler.submit(r);
    const test::Outcome oa = test::collect(*a), ob = test::collect(*b), oc = test::collect(*c);
    EXPECT_EQ(oa.tokens, ob.tokens);
    EXPECT_EQ(oa.tokens, test::reference(model, tok, prompt, 25, {}, 0.9f, 1234, 20, 0.95f).tokens);
    EXPECT_NE(oa.tokens, oc.tokens);
}

// The default model (quantized decode weights): two different prompts batched together each give
// `hydra generate`'s tokens, and a prefix-cache hit gives them again.
TEST(ServeScheduler, DefaultModelEqualsGenerate) {
    if (!test::default_model_present()) GTEST_SKIP() << "default model not fetched (tools/setup.sh)";
    const LoadedModel loaded = load_model(test::default_model_path());
    ASSERT_TRUE(loaded.vocab.has_value());
    const Tokenizer tok(*loaded.vocab);
    const LlamaModel& model = *loaded.model;
    CpuBatchBackend backend(model, 2, 64, size_t(64) << 20);
    Scheduler scheduler(backend, tok);
    const std::vector<int32_t> stop = {tok.eos_id()};
    std::vector<std::vector<int32_t>> prompts = {tok.encode_with_bos("The capital of France is"),
                                                 tok.encode_with_bos("Once upon a time, there")};
    std::vector<std::shared_ptr<serve::RequestStream>> streams;
    for (const auto& p : prompts) {
        serve::GenerationRequest r = test::greedy_request(p, 8);
        r.stop_ids = stop;
        streams.push_back(scheduler.submit(r));
    }
    std::vector<test::Outcome> got;
    for (auto& s : streams) got.push_back(test::collect(*s));
    for (size_t i = 0; i < prompts.size(); ++i) {
        SCOPED_TRACE(i);
        const test::Reference want = test::reference(model, tok, prompts[i], 8, stop);
        ASSERT_EQ(got[i].last.kind, GenerationEvent::Kind::Done) << got[i].last.error;
        EXPECT_EQ(got[i].tokens, want.tokens);
        EXPECT_EQ(got[i].text, want.text);
    }
    serve::GenerationRequest again = test::greedy_request(prompts[0], 8);
    again.stop_ids = stop;
    const test::Outcome hit = test::collect(*scheduler.submit(again));
    EXPECT_EQ(hit.last.cached_prompt_tokens, int64_t(prompts[0].size()) - 1);
    EXPECT_EQ(hit.tokens, got[0].tokens);
}

}  // namespace
}  // namespace hydra
