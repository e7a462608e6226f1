// ServeMetrics: the counters of `hydra serve`'s HTTP layer (requests by route, responses by status code)
// and their rendering, together with the scheduler's statistics (tokens, tokens/s, queue depth, running
// sequences, cache use, prefix cache), as Prometheus text exposition for GET /metrics.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "serve/scheduler.h"

namespace hydra::serve {

class ServeMetrics {
  public:
    void count_request(const std::string& route);
    void count_response(int status);
    // Responses counted so far with this status (tests, logs).
    int64_t responses(int status) const;
    // Prometheus text format (version 0.0.4), every metric prefixed "hydra_".
    std::string render(const SchedulerStats& stats) const;

  private:
    mutable std::mutex mu_;
    std::map<std::string, int64_t> requests_;
    std::map<int, int64_t> responses_;
};

}  // namespace hydra::serve
