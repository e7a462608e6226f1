// The patching metric and the per-pair result every patching method produces.
//
// Metric (methods.md §5): the logit difference LD = logit(answer) - logit(distractor) at the answer
// position. It only needs the final residual x of that position: LD = u . rmsnorm(x) * w_final with
// u = lm_head[answer] - lm_head[distractor], so a patched copy never computes the 49K-wide logits.
//
// Normalised effects, with gap = LD_clean - LD_corrupted:
//   denoising (corrupted run, head patched to its clean value):  PE = (LD_denoised - LD_corrupted) / gap
//   noising   (clean run, head patched to its corrupted value):  NE = (LD_clean - LD_noised) / gap
// 0 = no effect, 1 = the head alone restores (PE) / destroys (NE) the whole difference.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "interp/fa_forward.h"
#include "interp/fa_weights.h"

namespace hydra {

template <typename T>
class LogitDiff {
  public:
    // Throws hydra::Error for token ids outside the vocabulary or answer == distractor.
    LogitDiff(const FaWeights<T>& w, int32_t answer, int32_t distractor);
    // LD of a final residual x (C), before the final norm; accumulated in double.
    double operator()(const T* x) const;
    // dx (C) OVERWRITTEN with d LD / d x.
    void backward(const T* x, T* dx) const;
    // LD of each row of xs (rows, C).
    std::vector<double> rows(const std::vector<T>& xs) const;

  private:
    const FaWeights<T>* w_;
    std::vector<T> u_;  // (C) lm_head[answer] - lm_head[distractor]
};

// One pair, one method: LDs of the unpatched runs and of every head patched in each direction
// (exact for activation/path patching, first-order estimates for attribution patching). Index
// l * H + h. An empty direction vector means the method did not compute it.
struct HeadPatchResult {
    int64_t layers = 0, heads = 0;
    double ld_clean = 0, ld_corrupted = 0;
    std::vector<double> ld_noised;    // (L*H) clean run, head (l, h) set to its corrupted value
    std::vector<double> ld_denoised;  // (L*H) corrupted run, head (l, h) set to its clean value

    double gap() const { return ld_clean - ld_corrupted; }
    std::vector<double> noising_effect() const;    // NE (L*H), unclipped
    std::vector<double> denoising_effect() const;  // PE (L*H), unclipped
};

// A pair's result before any head is patched: its shape and the LDs of the clean and corrupted runs.
// The two prompts must have the same length (a head is patched position by position): hydra::Error.
template <typename T>
HeadPatchResult unpatched_result(const ModelConfig& c, const FaRun<T>& clean, const FaRun<T>& corrupted,
                                 const LogitDiff<T>& ld) {
    HYDRA_CHECK(clean.num_tokens == corrupted.num_tokens,
                "patching pair: the clean prompt has {} tokens, the corrupted one {} (they must be equal)",
                clean.num_tokens, corrupted.num_tokens);
    HeadPatchResult r;
    r.layers = c.num_layers;
    r.heads = c.num_heads;
    r.ld_clean = ld(clean.x_final_last(c.hidden_size));
    r.ld_corrupted = ld(corrupted.x_final_last(c.hidden_size));
    return r;
}

}  // namespace hydra
