// Learning-rate schedules: constant, linear warmup + cosine decay, and warmup-stable-decay (WSD).
//
// Steps are 0-based indices of the optimizer step about to run; at(step) is the lr for it.
//   warmup (all kinds): step < warmup_steps -> peak * (step + 1) / warmup_steps, so the first step
//                       already moves (llm.c convention) and step warmup_steps - 1 reaches peak.
//   Constant:           peak after warmup.
//   WarmupCosine:       min + (peak - min) * 0.5 * (1 + cos(pi * x)), x going linearly from 0 at
//                       step = warmup_steps to 1 at the last step, total_steps - 1.
//   WarmupStableDecay:  peak until the decay phase, which covers the last
//                       round(decay_fraction * total_steps) steps (never starting inside warmup),
//                       then linear from peak to min, reaching min at the last step.
// min = peak * min_lr_ratio. Steps past the end keep the last value (min, or peak for Constant and
// for WSD with decay_fraction 0).
#pragma once

#include <cstdint>
#include <string>

namespace hydra {

struct LrSchedule {
    enum Kind { Constant, WarmupCosine, WarmupStableDecay };

    Kind kind = Constant;
    float peak_lr = 1e-3f;
    int64_t warmup_steps = 0;
    int64_t total_steps = 0;      // required by WarmupCosine and WarmupStableDecay
    float min_lr_ratio = 0.1f;    // in [0, 1]
    float decay_fraction = 0.2f;  // WSD only, in [0, 1]

    float at(int64_t step) const;
    // Throws naming the bad field and its allowed range.
    void validate() const;
};

// "constant", "cosine" (or "warmup_cosine"), "wsd" (or "warmup_stable_decay"); throws otherwise.
LrSchedule::Kind parse_lr_kind(const std::string& name);
const char* lr_kind_name(LrSchedule::Kind kind);

}  // namespace hydra
