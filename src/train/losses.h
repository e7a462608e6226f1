// Training losses through the LM head without materialising the (T, V) logits: cross-entropy,
// distillation KL(teacher || student) and a plain sum-of-squares MSE.
//
// The LM-head losses take hidden states (T, C) and the head weight W (V, C) and compute logits
// tile by tile: rows in blocks of `row_block`, the vocabulary in chunks of `vocab_chunk` columns
// (one GEMM per tile). A first pass keeps an online log-sum-exp per row (running max + rescaled
// sum); a second pass turns each tile into d(loss)/d(logits) and feeds two GEMMs, one into
// dhidden and one into dW. When a whole row block's logits fit in `max_cached_logits` elements the
// block is kept between the passes instead of recomputed (saves one of the four GEMMs).
// Memory: O(row_block * min(V, vocab_chunk)) floats, or O(row_block * V) when cached.
#pragma once

#include <cstdint>

namespace hydra {

struct LossResult {
    double loss = 0;    // summed over counted rows (not averaged: the caller divides by count)
    int64_t count = 0;  // number of counted rows / elements
};

// Tile sizes of the LM-head losses. The defaults keep a tile at 4 MiB and make the dW GEMM's inner
// dimension (the row block) large enough that dW is streamed only T / row_block times.
struct LossChunking {
    int64_t row_block = 256;
    int64_t vocab_chunk = 4096;
    int64_t max_cached_logits = int64_t(1) << 24;  // 64 MiB of f32; 0 = always recompute
};

// Cross-entropy of softmax(hidden @ W^T) against `targets` (natural log), summed over rows whose
// target is >= 0 (-1 = ignore; anything else outside [0, V) throws).
//   hidden  (T, C), W (V, C), targets (T)
//   dhidden (T, C) OVERWRITTEN with grad_scale * d(sum loss)/d(hidden) (ignored rows get 0), or null
//   dW      (V, C) ACCUMULATED (+=) with grad_scale * d(sum loss)/d(W), or null
// grad_scale multiplies the gradients only (e.g. 1 / count for a mean loss); the returned loss is
// always the plain sum.
LossResult cross_entropy_lm_head(const float* hidden, const float* W, const int32_t* targets, int64_t T,
                                 int64_t C, int64_t V, float* dhidden, float* dW, float grad_scale,
                                 const LossChunking& chunking = {});

// The same loss in double by a plain row loop with (V) scratch (whole-model gradient checks on tiny
// models; no chunking). dW may be null also when dhidden is not.
LossResult cross_entropy_lm_head(const double* hidden, const double* W, const int32_t* targets, int64_t T,
                                 int64_t C, int64_t V, double* dhidden, double* dW, double grad_scale);

// Distillation loss tau^2 * KL(p_t || p_s), summed over the T rows, where
//   p_s = softmax(s_hidden @ s_W^T / tau),  p_t = softmax(t_hidden @ t_W^T / tau).
// The teacher is given as its own hidden states and head so its logits are also built tile by tile.
// The tau^2 factor (Hinton et al., 2015) keeps gradient magnitudes independent of the temperature;
// the returned loss includes it, so loss and gradients describe the same function (tau = 1: plain KL).
//   s_hidden (T, Cs), s_W (V, Cs), t_hidden (T, Ct), t_W (V, Ct)
//   dhidden (T, Cs) OVERWRITTEN, dW (V, Cs) ACCUMULATED (+=), each times grad_scale, or null.
// No gradient flows to the teacher. count = T.
LossResult kl_lm_head(const float* s_hidden, const float* s_W, int64_t Cs, const float* t_hidden,
                      const float* t_W, int64_t Ct, int64_t T, int64_t V, float tau, float* dhidden,
                      float* dW, float grad_scale, const LossChunking& chunking = {});

// Sum of squared differences sum_i (a_i - target_i)^2 over n elements (divide by n for a mean).
// da (n) OVERWRITTEN with grad_scale * 2 * (a - target), or null. count = n.
LossResult mse(const float* a, const float* target, int64_t n, float* da, float grad_scale);

}  // namespace hydra
