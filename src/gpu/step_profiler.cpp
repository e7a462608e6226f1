// StepProfiler: one event per section boundary from a reused pool; the interval between consecutive events
// is charged to the category the first one opened (nullptr = a closing event).
#include "gpu/step_profiler.h"

#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

StepProfiler::~StepProfiler() {
    for (cudaEvent_t e : pool_) (void)cudaEventDestroy(e);
}

cudaEvent_t StepProfiler::event(size_t i) {
    while (pool_.size() <= i) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        pool_.push_back(e);
    }
    return pool_[i];
}

void StepProfiler::section(const char* category) {
    if (!on_) return;
    CUDA_CHECK(cudaEventRecord(event(marks_.size()), stream_));
    marks_.push_back(category);
}

void StepProfiler::stop() {
    section(nullptr);
}

std::map<std::string, double> StepProfiler::collect() {
    std::map<std::string, double> ms;
    if (marks_.empty()) return ms;
    CUDA_CHECK(cudaEventSynchronize(pool_[marks_.size() - 1]));
    for (size_t i = 0; i + 1 < marks_.size(); ++i) {
        if (!marks_[i]) continue;
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, pool_[i], pool_[i + 1]));
        ms[marks_[i]] += double(t);
    }
    marks_.clear();
    return ms;
}

}  // namespace hydra::gpu
