// Log-probabilities the API reports: log-softmax of a position's raw logits (before temperature,
// top-k or top-p), the chosen token's value and the most likely alternatives.
#pragma once

#include <cstdint>
#include <span>

#include "serve/generation_request.h"

namespace hydra::serve {

// logits: (V) raw logits of one position; token: the token whose logprob is wanted; top: how many
// alternatives (most likely first, ties by lower id), 0..V.
TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top);

}  // namespace hydra::serve
