// ProgressBar: a one-line progress display on stderr (done/total, rate, ETA, a free-form status),
// redrawn at most every 100 ms, and silent when stderr is not a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace hydra::cli {

class ProgressBar {
public:
    ProgressBar(std::string label, int64_t total, std::string unit = "it");
    void update(int64_t done, const std::string& status = "");
    void finish(const std::string& status = "");

private:
    void draw(int64_t done, const std::string& status, bool final);
    std::string label_, unit_;
    int64_t total_;
    bool tty_;
    std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace hydra::cli
