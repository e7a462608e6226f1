// When inference builds a per-shape plan: cuDNN's attention engines compile a plan for each new (queries,
// keys) shape, and on the H200 a first request of a new prompt length paid 0.3-0.5 s of set-up against a few
// milliseconds for the attention itself (serve TTFT, cold against warm at the same length). With `after` > 0
// a shape runs our flash kernel until it has been seen `after` times before, and cuDNN's faster engine from
// then on. The default is 0 (cuDNN at once): with a delay, the same prompt's logits depend on what ran before
// (the two kernels round differently), which broke the GPU checks that compare two passes over the same
// input; HYDRA_PREFILL_CUDNN_AFTER=1 trades that for the first request's latency. Pure host logic without
// CUDA, so the CPU tests cover it.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace hydra::gpu {

class PlanAdmission {
  public:
    // after = 0: every shape gets its plan at once (the default).
    explicit PlanAdmission(int64_t after = 0) : after_(after) {
        HYDRA_CHECK(after >= 0, "plan admission after {} sightings: must be >= 0", after);
    }

    // HYDRA_PREFILL_CUDNN_AFTER: unset or empty = 0; a whole number >= 0 otherwise (hydra::Error naming the
    // variable for anything else).
    static int64_t after_from_env(const char* value) {
        if (value == nullptr || *value == '\0') return 0;
        const std::string v(value);
        for (char c : v)
            HYDRA_CHECK(std::isdigit(static_cast<unsigned char>(c)) && v.size() <= 9,
                        "HYDRA_PREFILL_CUDNN_AFTER='{}': expected a whole number of sightings (0 = at once)",
                        v);
        return std::stoll(v);
    }

    // Records a sighting of `shape`; true when its plan should be used now (seen at least `after` times
    // before). The table forgets its counts when it holds kMaxShapes shapes (an endless stream of new
    // lengths), so memory stays bounded; planned shapes then need `after` sightings again, which costs
    // nothing where the plan is cached.
    bool admit(uint64_t shape) {
        if (after_ == 0) return true;
        if (seen_.size() >= kMaxShapes && !seen_.count(shape)) seen_.clear();
        int64_t& n = seen_[shape];
        const bool yes = n >= after_;
        if (!yes) ++n;
        return yes;
    }

    int64_t after() const { return after_; }
    static constexpr size_t kMaxShapes = 4096;

  private:
    int64_t after_;
    std::unordered_map<uint64_t, int64_t> seen_;
};

}  // namespace hydra::gpu
