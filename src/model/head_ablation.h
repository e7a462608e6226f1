// Zero-ablation of query heads of a full-attention model, for causality checks of head scores: a head's
// o_proj columns set to zero remove exactly its contribution to the residual stream. The choice of heads
// (the top n by a score table, or n drawn at random with a seed) lives here too, so the pipeline's check
// and `hydra eval --ablate` pick the same heads.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/llama_model.h"

namespace hydra {

using HeadRef = std::pair<int64_t, int64_t>;  // (layer, query head)

// Zeroes o_proj columns [h * Dh, (h + 1) * Dh) of each listed head, in place. The model must be all-FA
// (a teacher): a hybrid's o_proj columns follow its plan, not the teacher's head order.
void zero_ablate_heads(LlamaModel& model, const std::vector<HeadRef>& heads);

// The n heads with the highest score; scores is [layer][head] (ties keep layer-major order).
std::vector<HeadRef> top_scored_heads(const std::vector<std::vector<double>>& scores, int64_t n);

// n distinct heads drawn uniformly from layers x heads with a seeded shuffle (deterministic by seed).
std::vector<HeadRef> random_heads(int64_t num_layers, int64_t num_heads, int64_t n, uint64_t seed);

// "top:N", "random:N:SEED" or an explicit list "L:H,L:H,..."; scores are needed for top only.
std::vector<HeadRef> parse_ablation(const std::string& spec, int64_t num_layers, int64_t num_heads,
                                    const std::vector<std::vector<double>>* scores);

}  // namespace hydra
