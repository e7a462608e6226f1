// Attribution patching (AtP; methods.md §5): the first-order estimate of every head's patching effect
// from one backward pass per run, LD(z + dz) ~ LD(z) + (d LD / d z) . dz, for all heads at once.
//
//   noising estimate:   LD_noised(h)   ~ LD_clean     + g_clean(h)     . (z_corr(h)  - z_clean(h))
//   denoising estimate: LD_denoised(h) ~ LD_corrupted + g_corrupted(h) . (z_clean(h) - z_corr(h))
// with g the gradient of LD with respect to the head's output z (before o_proj) in that run. So each
// direction takes one backward pass of its base run (two in all), and the result has the shape of
// exact activation patching (patching_metric.h) and is normalised the same way.
//
// Positions: Answer patches (and differentiates) only the answer position, the same intervention as
// activation_patching.h, and its backward is one decode-step chain (the answer position's head
// outputs only influence the answer position). All sums the estimate over every position, the
// classic AtP of a head at all positions; it needs runs saved at every position and a full backward
// through the prompt (recomputing each layer's forward from its saved input).
#pragma once

#include <cstdint>
#include <vector>

#include "interp/fa_forward.h"
#include "interp/patching_metric.h"
#include "interp/scoring_backend.h"

namespace hydra {

enum class AttributionPositions { Answer, All };

// d LD / d z at the answer position for every layer: (L, H, Dh). Exact gradient of the run's LD
// (earlier positions do not depend on these outputs).
template <typename T>
std::vector<T> answer_position_head_grad(const FaWeights<T>& w, const FaRun<T>& run, const LogitDiff<T>& ld);

// d LD / d z at every position: [L] (T, H, Dh). The run must keep every position (saved_from == 0).
template <typename T>
std::vector<std::vector<T>> all_positions_head_grad(const FaWeights<T>& w, const FaRun<T>& run,
                                                    const LogitDiff<T>& ld);

// Both directions' estimates for every head. With All, both runs must keep every position.
template <typename T>
HeadPatchResult attribution_patching(const FaWeights<T>& w, const FaRun<T>& clean, const FaRun<T>& corrupted,
                                     const LogitDiff<T>& ld,
                                     AttributionPositions positions = AttributionPositions::Answer);
// The same through a scoring backend (its head gradients; runs from its forward).
HeadPatchResult attribution_patching(ScoringBackend& backend, const FaRun<float>& clean,
                                     const FaRun<float>& corrupted, const LogitDiff<float>& ld,
                                     AttributionPositions positions = AttributionPositions::Answer);

}  // namespace hydra
