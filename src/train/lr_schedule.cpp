// Learning-rate schedules (see lr_schedule.h). Arithmetic in double, rounded once at the end.
#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace hydra {

void LrSchedule::validate() const {
    HYDRA_CHECK(std::isfinite(peak_lr) && peak_lr >= 0,
                "lr schedule: peak_lr must be finite and >= 0 (got {})", peak_lr);
    HYDRA_CHECK(warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0 (got {})", warmup_steps);
    HYDRA_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1,
                "lr schedule: min_lr_ratio must be in [0, 1] (got {})", min_lr_ratio);
    HYDRA_CHECK(decay_fraction >= 0 && decay_fraction <= 1,
                "lr schedule: decay_fraction must be in [0, 1] (got {})", decay_fraction);
    if (kind != Constant)
        HYDRA_CHECK(total_steps > 0 && warmup_steps <= total_steps,
                    "lr schedule {}: need total_steps > 0 and warmup_steps <= total_steps (got {} and {})",
                    lr_kind_name(kind), total_steps, warmup_steps);
}

float LrSchedule::at(int64_t step) const {
    validate();
    const double peak = peak_lr;
    const double min = peak * double(min_lr_ratio);
    step = std::max<int64_t>(step, 0);
    if (step < warmup_steps) return float(peak * double(step + 1) / double(warmup_steps));
    const int64_t last = total_steps - 1;
    // Linear progress through [start, last]: 0 at start, 1 at last (and after).
    auto progress = [&](int64_t start) {
        if (last <= start) return step >= start ? 1.0 : 0.0;
        return std::clamp(double(step - start) / double(last - start), 0.0, 1.0);
    };
    switch (kind) {
        case Constant:
            return float(peak);
        case WarmupCosine: {
            const double x = progress(warmup_steps);
            return float(min + (peak - min) * 0.5 * (1.0 + std::cos(std::numbers::pi * x)));
        }
        case WarmupStableDecay: {
            const int64_t decay_steps = std::llround(double(decay_fraction) * double(total_steps));
            if (decay_steps == 0) return float(peak);  // no decay phase: constant after warmup
            const int64_t start = std::max(warmup_steps, total_steps - decay_steps);
            if (step < start) return float(peak);
            return float(peak + (min - peak) * progress(start));
        }
    }
    return float(peak);
}

LrSchedule::Kind parse_lr_kind(const std::string& name) {
    if (name == "constant") return LrSchedule::Constant;
    if (name == "cosine" || name == "warmup_cosine") return LrSchedule::WarmupCosine;
    if (name == "wsd" || name == "warmup_stable_decay") return LrSchedule::WarmupStableDecay;
    fail("unknown lr schedule '{}' (expected constant, cosine or wsd)", name);
}

const char* lr_kind_name(LrSchedule::Kind kind) {
    switch (kind) {
        case LrSchedule::Constant:
            return "constant";
        case LrSchedule::WarmupCosine:
            return "cosine";
        case LrSchedule::WarmupStableDecay:
            return "wsd";
    }
    return "?";
}

}  // namespace hydra
