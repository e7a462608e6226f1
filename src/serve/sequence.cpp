// Per-sequence sampling, detokenization and stop handling (see sequence.h).
#include "serve/sequence.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "serve/token_logprobs.h"
#include "serve/utf8_sanitize.h"

namespace hydra::serve {

namespace {

SamplerConfig sampler_config(const SamplingParams& p, uint64_t seed) {
    SamplerConfig c;
    c.temperature = p.temperature;
    c.top_k = p.top_k;
    c.top_p = p.top_p;
    c.seed = seed;
    return c;
}

}  // namespace

Sequence::Sequence(GenerationRequest request, std::shared_ptr<RequestStream> stream, uint64_t seed,
                   const Tokenizer& tokenizer)
    : request_(std::move(request)),
      stream_(std::move(stream)),
      tokenizer_(tokenizer),
      sampler_(sampler_config(request_.sampling, seed)),
      stop_(request_.stop_strings) {
    if (request_.prompt_logprobs) {
        // Nothing predicts the first prompt token.
        TokenLogprob first;
        first.token = request_.prompt[0];
        first.logprob = std::numeric_limits<float>::quiet_NaN();
        pending_.prompt_logprobs.push_back(std::move(first));
        pending_prompt_ = true;
    }
}

void Sequence::prompt_logits(int64_t p, std::span<const float> logits) {
    if (!request_.prompt_logprobs) return;
    pending_.prompt_logprobs.push_back(
        token_logprob(logits, request_.prompt[size_t(p + 1)], std::max(request_.top_logprobs, 0)));
}

void Sequence::next_logits(std::span<const float> logits) {
    if (finished()) return;
    if (generated_ >= request_.max_tokens) return finish("length");
    const int32_t token = sampler_.sample(logits);
    if (std::find(request_.stop_ids.begin(), request_.stop_ids.end(), token) != request_.stop_ids.end())
        return finish("stop");
    ++generated_;
    pending_.tokens.push_back(token);
    if (request_.top_logprobs >= 0)
        pending_.logprobs.push_back(token_logprob(logits, token, request_.top_logprobs));
    // Ids past the tokenizer (padding rows of a model's vocabulary) have no text.
    const std::string_view bytes =
        token < tokenizer_.vocab_size() ? std::string_view(tokenizer_.token_bytes(token)) : "";
    StopMatcher::Result r = stop_.push(sanitize_utf8(utf8_.push(bytes)));
    pending_.text += r.text;
    if (r.stopped) {
        finish_reason_ = "stop";  // the stop string and whatever follows it are dropped
        return;
    }
    next_input = token;
    if (generated_ >= request_.max_tokens) finish("length");
}

void Sequence::finish(const std::string& reason) {
    if (finished()) return;
    finish_reason_ = reason;
    // The end came from an id or a length: the pending bytes and held-back text were not a stop string.
    StopMatcher::Result r = stop_.push(sanitize_utf8(utf8_.flush()));
    pending_.text += r.text;
    if (r.stopped)
        finish_reason_ = "stop";
    else
        pending_.text += stop_.flush();
}

void Sequence::publish() {
    if (done_sent_) return;
    if (!pending_.tokens.empty() || !pending_.text.empty() || pending_prompt_) {
        if (!pending_prompt_ || prompt_done()) {
            pending_.kind = GenerationEvent::Kind::Tokens;
            stream_->push(std::move(pending_));
            pending_ = GenerationEvent{};
            pending_prompt_ = false;
        }
    }
    if (finished()) {
        GenerationEvent done;
        done.kind = GenerationEvent::Kind::Done;
        done.finish_reason = finish_reason_;
        done.prompt_tokens = prompt_len();
        done.completion_tokens = generated_;
        done.cached_prompt_tokens = cached;
        stream_->push(std::move(done));
        done_sent_ = true;
    }
}

}  // namespace hydra::serve
