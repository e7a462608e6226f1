// Exact activation patching of every query head's output at the answer position (methods.md §5), in
// both directions: noising (clean run, head set to its corrupted value: necessity) and denoising
// (corrupted run, head set to its clean value: sufficiency). One copy per (head, direction); all
// copies of a direction share the base run's cached prefix and run as batched answer-position steps
// (last_position_forward.h), so scoring all heads costs about L*H/2 decode steps per direction
// instead of L*H full forward passes.
#pragma once

#include <cstdint>

#include "interp/fa_forward.h"
#include "interp/patching_metric.h"
#include "interp/scoring_backend.h"

namespace hydra {

// clean and corrupted: runs of the two prompts of one pair (same length). Returns the LDs of the
// unpatched runs and of every patched copy (ld_noised and ld_denoised both filled).
template <typename T>
HeadPatchResult activation_patching(const FaWeights<T>& w, const FaRun<T>& clean, const FaRun<T>& corrupted,
                                    const LogitDiff<T>& ld, int64_t max_batch = 96);
// The same through a scoring backend (its sweep; runs from its forward).
HeadPatchResult activation_patching(ScoringBackend& backend, const FaRun<float>& clean,
                                    const FaRun<float>& corrupted, const LogitDiff<float>& ld,
                                    int64_t max_batch = 96);

}  // namespace hydra
