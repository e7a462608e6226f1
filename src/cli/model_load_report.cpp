// See model_load_report.h.
#include "cli/model_load_report.h"

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

namespace hydra::cli {

LoadedModel load_model_reported(const std::string& path, bool verbose) {
    const auto t0 = std::chrono::steady_clock::now();
    LoadedModel m = load_model(path);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (verbose)
        fmt::print(stderr, "loaded {} ({}, {:.1f}M params) in {:.2f} s\n", m.model->config().name, m.format,
                   double(m.model->params().parameter_count()) / 1e6, s);
    return m;
}

}  // namespace hydra::cli
