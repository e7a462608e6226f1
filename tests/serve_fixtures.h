// Shared fixtures of the serving tests: a tiny byte-level tokenizer over printable ASCII (so every
// token decodes to text a stop string can match), a tiny random teacher over that vocabulary and its
// hybrid conversion, and helpers that run a request through the scheduler or hydra::generate().
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/hybrid_conversion.h"
#include "model/llama_model.h"
#include "model/plan_builders.h"
#include "serve/cpu_batch_backend.h"
#include "serve/generator.h"
#include "serve/scheduler.h"
#include "tiny_model.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/byte_unicode.h"

namespace hydra::test {

// Printable ASCII bytes, a few merges, and an end-of-sequence control token.
inline TokenizerVocab ascii_vocab() {
    TokenizerVocab v;
    v.model = "gpt2";
    v.pre = "gpt2";
    for (int b = 32; b < 127; ++b) v.tokens.push_back(byte_to_token_string(uint8_t(b)));
    v.tokens.push_back(byte_to_token_string('\n'));
    v.token_types.assign(v.tokens.size(), kTokenNormal);
    auto merge = [&](const std::string& a, const std::string& b) {
        v.tokens.push_back(a + b);
        v.token_types.push_back(kTokenNormal);
        v.merges.emplace_back(a, b);
    };
    const std::string sp = byte_to_token_string(' ');
    merge("t", "h");
    merge("th", "e");
    merge(sp, "the");
    merge("a", "n");
    merge("an", "d");
    merge(sp, "and");
    merge("i", "n");
    merge("in", "g");
    v.tokens.push_back("<|eos|>");
    v.token_types.push_back(kTokenControl);
    v.eos_id = int32_t(v.tokens.size() - 1);
    return v;
}

inline const Tokenizer& ascii_tokenizer() {
    static const Tokenizer t(ascii_vocab(), "ascii test vocabulary");
    return t;
}

// A tiny random teacher over the ASCII vocabulary (larger stddev: peaked, varied distributions).
inline std::unique_ptr<LlamaModel> tiny_teacher() {
    ModelConfig c = tiny_llama_config({.vocab = ascii_tokenizer().vocab_size(),
                                       .hidden = 32,
                                       .intermediate = 48,
                                       .layers = 3,
                                       .heads = 6,
                                       .kv_heads = 2,
                                       .head_dim = 8});
    c.max_position_embeddings = 256;
    auto m = std::make_unique<LlamaModel>(c);
    randomize_params(*m, 17, 0.3f);
    return m;
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(gen() % uint64_t(vocab));
    return t;
}

// The teacher converted to a hybrid with FA heads and GDN heads in every layer (2:1, head level),
// so both the KV rows and the recurrent state carry the sequence.
inline std::unique_ptr<LlamaModel> tiny_hybrid(const LlamaModel& teacher) {
    PlanRequest r;
    r.select = "random";
    r.granularity = "head";
    r.ratio = parse_ratio("2:1", "test");
    r.fusion = FusionKind::ScaleNorm;
    ConversionOptions o;
    o.calibration_tokens = random_tokens(32, teacher.config().vocab_size, 4);
    return convert_to_hybrid(teacher, build_plan(teacher.config(), r), o);
}

// The events of one request, gathered until Done or Error.
struct Outcome {
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<serve::TokenLogprob> logprobs, prompt_logprobs;
    serve::GenerationEvent last;  // Done or Error
    int events = 0;
};

inline Outcome collect(serve::RequestStream& stream,
                       std::chrono::seconds timeout = std::chrono::seconds(60)) {
    Outcome o;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    serve::GenerationEvent e;
    while (std::chrono::steady_clock::now() < deadline) {
        if (!stream.next(e, std::chrono::milliseconds(100))) continue;
        ++o.events;
        if (e.kind == serve::GenerationEvent::Kind::Tokens) {
            o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
            o.text += e.text;
            o.logprobs.insert(o.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
            o.prompt_logprobs.insert(o.prompt_logprobs.end(), e.prompt_logprobs.begin(),
                                     e.prompt_logprobs.end());
            continue;
        }
        o.last = e;
        return o;
    }
    ADD_FAILURE() << "no Done/Error event within the timeout";
    return o;
}

// hydra::generate() on its own: the reference every scheduler output is compared with.
struct Reference {
    std::vector<int32_t> tokens;
    std::string text;
};

inline Reference reference(const LlamaModel& model, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                           int64_t max_tokens, const std::vector<int32_t>& stop_ids = {},
                           float temperature = 0, uint64_t seed = 0, int top_k = 0, float top_p = 1) {
    Sampler sampler({temperature, top_k, top_p, seed});
    Reference r;
    const GenerationResult g =
        generate(model, tok, prompt, max_tokens, sampler, stop_ids, [&](std::string_view t) { r.text += t; });
    r.tokens = g.tokens;
    return r;
}

inline serve::GenerationRequest greedy_request(const std::vector<int32_t>& prompt, int64_t max_tokens) {
    serve::GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    return r;
}

}  // namespace hydra::test
