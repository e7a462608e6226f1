// Where a GPU training step's time goes: CUDA events recorded on the step's stream at section boundaries
// (attention, GDN, GEMMs, the small LA ops, the LM-head loss, everything else), read back once per step.
// Off unless enabled (events cost a few microseconds of CPU each); used by bench/gpu_train_bench with
// HYDRA_STEP_PROFILE=1 to report milliseconds per category beside the step time.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

namespace hydra::gpu {

class StepProfiler {
  public:
    StepProfiler() = default;
    ~StepProfiler();
    StepProfiler(const StepProfiler&) = delete;
    StepProfiler& operator=(const StepProfiler&) = delete;

    void enable(cudaStream_t stream) { stream_ = stream, on_ = true; }
    void disable() { on_ = false; }
    bool enabled() const { return on_; }
    // From here until the next section() or stop(), GPU time counts towards `category` (a literal).
    void section(const char* category);
    void stop();
    // Synchronises; milliseconds per category since the last call (the sections are then cleared).
    std::map<std::string, double> collect();

  private:
    cudaEvent_t event(size_t i);
    bool on_ = false;
    cudaStream_t stream_ = nullptr;
    std::vector<cudaEvent_t> pool_;
    std::vector<const char*> marks_;  // category of the interval that starts at each recorded event
};

}  // namespace hydra::gpu
