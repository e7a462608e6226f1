// The copy-paste retrieval score of Wu et al. 2024 (methods.md §1): greedy-decode the answer; at every
// decode step take each head's top-1 attended position j*; when j* lies inside a needle span and the
// prompt token there equals the token generated at this step, the head earns 1/|span| (the span's
// length in tokens). A trial's score is thus the fraction of needle tokens the head copy-pasted; the
// head's retrieval score is the mean over the trials whose answer is correct (the caller decides,
// RULER-style, and averages). The decoding is a RetrievalDecoder's: the engine's forward
// (model/llama_forward.h, quantized decode when the model has it) with the `blk.*.attn_probs` tap on
// the CPU, or a scoring backend's (interp/scoring_backend.h); the model must be the all-FA teacher.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "model/llama_model.h"

namespace hydra {

// Greedy decoding that reports, per step, where every head looked.
class RetrievalDecoder {
  public:
    virtual ~RetrievalDecoder() = default;
    // A new sequence: `prefix` (may be empty) run into a cache of `capacity` positions.
    virtual void start(std::span<const int32_t> prefix, int64_t capacity) = 0;
    // `token` at the next position: returns the greedy next token, and top (L*H) OVERWRITTEN with each
    // head's most-attended position of this step (over the cache and the token itself).
    virtual int32_t step(int32_t token, std::vector<int64_t>& top) = 0;
};

// The CPU decoder of `model` (see the file comment).
std::unique_ptr<RetrievalDecoder> cpu_retrieval_decoder(const LlamaModel& model);

struct RetrievalTrial {
    std::vector<double> scores;      // (L*H) this trial's copy-paste score of head l*H + h
    std::vector<int32_t> generated;  // greedy tokens (without the stop token)
};

// spans: needle spans [begin, end) in the prompt that count (the queried needle(s)). Decoding stops
// after max_new_tokens, at a token in stop_tokens, or once done(generated so far) returns true (the
// answer is complete: more tokens cannot change the trial), and never past the model's context.
// Throws hydra::Error for an empty prompt, a span outside the prompt, or a prompt that fills the context.
RetrievalTrial retrieval_trial(const LlamaModel& model, std::span<const int32_t> prompt,
                               const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t max_new_tokens,
                               const std::vector<int32_t>& stop_tokens,
                               const std::function<bool(const std::vector<int32_t>&)>& done = {});
// The same through any decoder of that model (same checks).
RetrievalTrial retrieval_trial(RetrievalDecoder& decoder, const LlamaModel& model,
                               std::span<const int32_t> prompt,
                               const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t max_new_tokens,
                               const std::vector<int32_t>& stop_tokens,
                               const std::function<bool(const std::vector<int32_t>&)>& done = {});

}  // namespace hydra
