// Path patching at the answer position (methods.md §5; Wang et al. 2022 IOI style), both directions.
// A sender head's output is set to its value from the other run (noising: clean run, corrupted value;
// denoising: corrupted run, clean value), but the change may travel along chosen paths only.
//
// What is implemented, exactly, with delta_s = W_o[:, s] (z_s^source - z_s^base) the sender's
// change to the residual stream at the answer position:
//  (a) direct path, sender -> logits: LD of (x_final^base + delta_s). Every other component keeps its
//      base value; the change reaches the unembedding only through the residual stream.
//  (b) sender -> q/k/v of the receiver heads: for each receiver r = (R, h_r) in a layer R above the
//      sender, its query, and the key/value of the answer position in its KV group, are recomputed
//      from x_in^base(R) + delta_s (the sender's direct write only: no intermediate head or MLP
//      carries the change), giving a new output z_r'. Other heads of layer R keep their base
//      values (keys/values of earlier positions are untouched, as the patch is at the answer position
//      only). Then the base run is re-run with every downstream receiver's output set to its z_r'
//      and everything above the first receiver computed normally, and its LD is measured. Receivers
//      at or below the sender's layer are not on any path from it and are skipped; a sender with no
//      receiver above it has zero effect.
// The receivers are usually the top heads by activation patching.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "interp/fa_forward.h"
#include "interp/patching_metric.h"
#include "interp/scoring_backend.h"

namespace hydra {

struct PathPatchResult {
    HeadPatchResult direct;                              // (a), per sender
    HeadPatchResult via_receivers;                       // (b), per sender
    std::vector<std::pair<int64_t, int64_t>> receivers;  // (layer, head) used for (b)
};

// Throws hydra::Error for a receiver outside the model or runs of different lengths.
template <typename T>
PathPatchResult path_patching(const FaWeights<T>& w, const FaRun<T>& clean, const FaRun<T>& corrupted,
                              const LogitDiff<T>& ld,
                              const std::vector<std::pair<int64_t, int64_t>>& receivers,
                              int64_t max_batch = 96);
// The same through a scoring backend (its answer_mixer and sweep; runs from its forward).
PathPatchResult path_patching(ScoringBackend& backend, const FaRun<float>& clean,
                              const FaRun<float>& corrupted, const LogitDiff<float>& ld,
                              const std::vector<std::pair<int64_t, int64_t>>& receivers,
                              int64_t max_batch = 96);

}  // namespace hydra
