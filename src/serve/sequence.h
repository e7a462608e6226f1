// Sequence: the scheduler's state of one running request: its slot and prefill progress, its own
// seeded sampler, incremental detokenization (Utf8Stream + the tokenizer's raw token bytes, made valid
// UTF-8 for JSON), stop ids
// and stop strings, logprobs, and the event being built for the current step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "serve/generation_request.h"
#include "serve/sampler.h"
#include "serve/scheduler.h"
#include "serve/stop_matcher.h"
#include "serve/utf8_stream.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra::serve {

class Sequence {
  public:
    Sequence(GenerationRequest request, std::shared_ptr<RequestStream> stream, uint64_t seed,
             const Tokenizer& tokenizer);

    const GenerationRequest& request() const { return request_; }
    RequestStream& stream() { return *stream_; }
    int64_t prompt_len() const { return int64_t(request_.prompt.size()); }
    bool prompt_done() const { return prefilled == prompt_len(); }
    bool finished() const { return !finish_reason_.empty(); }
    int64_t generated() const { return generated_; }

    // The logits at prompt position p (0 <= p < prompt_len - 1) predict prompt token p + 1: records its
    // logprob for prompt_logprobs.
    void prompt_logits(int64_t p, std::span<const float> logits);
    // The logits after the last fed token: samples the next token, detokenizes, applies stop ids and
    // strings; may finish the sequence.
    void next_logits(std::span<const float> logits);
    // Ends the sequence now with this reason (the held-back text is released unless it is "stop" by a
    // stop string).
    void finish(const std::string& reason);
    // Pushes this step's Tokens event (when there is anything in it) and, once finished, the Done event.
    void publish();

    int32_t slot = -1;
    int64_t prefilled = 0;    // prompt tokens in the slot's cache (restored ones included)
    int64_t cached = 0;       // prompt tokens restored from the prefix cache
    int64_t snapshot_at = 0;  // prompt position at which to snapshot the cache (0: none)
    int32_t next_input = -1;  // the last sampled token, fed by the next decode step

  private:
    GenerationRequest request_;
    std::shared_ptr<RequestStream> stream_;
    const Tokenizer& tokenizer_;
    Sampler sampler_;
    Utf8Stream utf8_;
    StopMatcher stop_;
    int64_t generated_ = 0;
    std::string finish_reason_;
    bool done_sent_ = false;
    GenerationEvent pending_;
    bool pending_prompt_ = false;  // pending_ carries the prompt logprobs
};

}  // namespace hydra::serve
