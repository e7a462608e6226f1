// What a client asks the serving scheduler for, and what it streams back. The HTTP layer
// (serve/openai_api.h) turns OpenAI request bodies into GenerationRequest and GenerationEvent into
// response JSON / server-sent events; the scheduler (serve/scheduler.h) produces the events.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hydra::serve {

struct SamplingParams {
    float temperature = 1.0f;  // 0 = greedy
    int top_k = 0;             // 0 = off
    float top_p = 1.0f;        // 1 = off
    std::optional<uint64_t> seed;  // none: the scheduler draws one
};

struct GenerationRequest {
    std::vector<int32_t> prompt;  // token ids, BOS included when the model wants one; not empty
    int64_t max_tokens = 16;      // >= 0; 0 with prompt_logprobs = score the prompt only
    SamplingParams sampling;
    std::vector<int32_t> stop_ids;         // end-of-sequence ids (not part of the output)
    std::vector<std::string> stop_strings; // output ends before the first occurrence (not included)
    int top_logprobs = -1;      // -1: no logprobs; 0..20: the chosen token's logprob + this many alternatives
    bool prompt_logprobs = false;  // also the logprobs of the prompt tokens (OpenAI's echo + logprobs)
};

// log p of a token under the model's distribution at that position (raw logits, before temperature,
// top-k or top-p), and the most likely alternatives there.
struct TokenLogprob {
    int32_t token = -1;
    float logprob = 0;  // NaN for the first prompt token (nothing predicts it)
    std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first
};

struct GenerationEvent {
    enum class Kind { Tokens, Done, Error };
    Kind kind = Kind::Tokens;
    // Tokens: newly generated tokens and the text they complete (UTF-8, stop strings removed; text may be
    // empty while a multi-byte character or a possible stop string is pending).
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<TokenLogprob> logprobs;         // one per token, when top_logprobs >= 0
    std::vector<TokenLogprob> prompt_logprobs;  // on the first event only, when prompt_logprobs
    // Done: why generation ended ("stop": an end id or stop string, "length": max_tokens or the context)
    // and the usage counts. Error: message and the HTTP status it maps to.
    std::string finish_reason;
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_prompt_tokens = 0;
    std::string error;
    int http_status = 0;
};

}  // namespace hydra::serve
