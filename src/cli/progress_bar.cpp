// Terminal progress bar (see progress_bar.h).
#include "cli/progress_bar.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace hydra::cli {

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), tty_(isatty(STDERR_FILENO)) {
    start_ = last_draw_ = std::chrono::steady_clock::now();
}

void ProgressBar::update(int64_t done, const std::string& status) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
    last_draw_ = now;
    draw(done, status, false);
}

void ProgressBar::finish(const std::string& status) { draw(total_, status, true); }

void ProgressBar::draw(int64_t done, const std::string& status, bool final) {
    if (!tty_) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = elapsed > 0 ? double(done) / elapsed : 0;
    const double eta = rate > 0 ? double(total_ - done) / rate : 0;
    constexpr int kWidth = 28;
    const int filled = total_ > 0 ? int(kWidth * double(done) / double(total_)) : 0;
    std::string bar(size_t(filled), '#');
    bar.resize(kWidth, '.');
    fmt::print(stderr, "\r\033[2K{} [{}] {}/{} {:.1f} {}/s ETA {:.0f}s {}", label_, bar, done, total_, rate, unit_,
               eta, status);
    if (final) fmt::print(stderr, "\n");
    std::fflush(stderr);
}

}  // namespace hydra::cli
