// Coarse-grained parallelism for head scoring: independent jobs (the clean and the corrupted run,
// the two patching directions, chunks of patched copies) each run whole on one OpenMP thread, with
// every op and BLAS call inside running single-threaded (nested regions are inactive and the OpenMP
// build of OpenBLAS runs serially inside a parallel region). The interp workloads are many small
// GEMMs (a batch of <= 96 single-token rows), where a fork/join per call costs more than the call
// itself, and on a busy shared machine each join waits for a descheduled thread; whole jobs per
// thread avoid both. Exceptions from a job are rethrown on the calling thread (the first one wins).
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>

#include <omp.h>

namespace hydra {

// Calls job(i) for i in [0, n), spread over the threads dynamically (jobs may differ in cost).
inline void run_parallel_jobs(int64_t n, const std::function<void(int64_t)>& job) {
    std::exception_ptr error;
    std::mutex m;
#pragma omp parallel for schedule(dynamic, 1) if (n > 1 && !omp_in_parallel())
    for (int64_t i = 0; i < n; ++i) {
        try {
            job(i);
        } catch (...) {
            std::lock_guard<std::mutex> lock(m);
            if (!error) error = std::current_exception();
        }
    }
    if (error) std::rethrow_exception(error);
}

// The number of threads a run_parallel_jobs call would use from here.
inline int parallel_job_threads() {
    return omp_in_parallel() ? 1 : omp_get_max_threads();
}

}  // namespace hydra
