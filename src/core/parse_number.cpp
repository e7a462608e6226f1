// Whole-string number parsing (see parse_number.h).
#include "core/parse_number.h"

#include <cmath>
#include <exception>

namespace hydra {

std::optional<double> parse_finite_double(const std::string& text) {
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (used != text.size() || !std::isfinite(v)) return std::nullopt;
    return v;
}

std::optional<int64_t> parse_int64(const std::string& text) {
    size_t used = 0;
    long long v = 0;
    try {
        v = std::stoll(text, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (used != text.size()) return std::nullopt;
    return int64_t(v);
}

}  // namespace hydra
