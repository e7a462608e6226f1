// Prometheus text for GET /metrics (see serve_metrics.h).
#include "serve/serve_metrics.h"

#include <fmt/format.h>

namespace hydra::serve {

void ServeMetrics::count_request(const std::string& route) {
    std::lock_guard lock(mu_);
    ++requests_[route];
}

void ServeMetrics::count_response(int status) {
    std::lock_guard lock(mu_);
    ++responses_[status];
}

int64_t ServeMetrics::responses(int status) const {
    std::lock_guard lock(mu_);
    auto it = responses_.find(status);
    return it == responses_.end() ? 0 : it->second;
}

std::string ServeMetrics::render(const SchedulerStats& s) const {
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, auto value) {
        out += fmt::format("# HELP hydra_{0} {1}\n# TYPE hydra_{0} {2}\nhydra_{0} {3}\n", name, help, type,
                           value);
    };
    {
        std::lock_guard lock(mu_);
        out +=
            "# HELP hydra_http_requests_total HTTP requests received, by route\n"
            "# TYPE hydra_http_requests_total counter\n";
        for (const auto& [route, n] : requests_)
            out += fmt::format("hydra_http_requests_total{{route=\"{}\"}} {}\n", route, n);
        out +=
            "# HELP hydra_http_responses_total HTTP responses sent, by status code\n"
            "# TYPE hydra_http_responses_total counter\n";
        for (const auto& [code, n] : responses_)
            out += fmt::format("hydra_http_responses_total{{code=\"{}\"}} {}\n", code, n);
    }
    metric("requests_total", "counter", "Generation requests admitted by the scheduler", s.requests_total);
    metric("requests_rejected_total", "counter", "Generation requests refused at admission",
           s.requests_rejected);
    metric("requests_running", "gauge", "Sequences in the running batch", s.requests_running);
    metric("requests_waiting", "gauge", "Requests waiting in the queue", s.requests_waiting);
    metric("prompt_tokens_total", "counter", "Prompt tokens of admitted requests", s.prompt_tokens_total);
    metric("prompt_tokens_cached_total", "counter", "Prompt tokens served from the prefix cache",
           s.cached_prompt_tokens_total);
    metric("generated_tokens_total", "counter", "Tokens generated", s.generated_tokens_total);
    metric("generated_tokens_per_second", "gauge", "Generated tokens per second over the last few seconds",
           s.generated_tokens_per_second);
    metric("steps_total", "counter", "Batched model steps run", s.steps_total);
    metric("cache_used_bytes", "gauge", "KV + recurrent state memory in use", s.cache.used_bytes);
    metric("cache_total_bytes", "gauge", "KV + recurrent state memory available to sequences",
           s.cache.total_bytes);
    metric("cache_used_slots", "gauge", "Sequence slots in use", s.cache.used_slots);
    metric("cache_total_slots", "gauge", "Sequence slots", s.cache.total_slots);
    metric("prefix_cache_bytes", "gauge", "Memory kept alive by prefix-cache snapshots",
           s.prefix_cache_bytes);
    metric("prefix_cache_entries", "gauge", "Prefix-cache snapshots", s.prefix_cache_entries);
    return out;
}

}  // namespace hydra::serve
