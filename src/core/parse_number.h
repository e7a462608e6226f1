// Whole-string number parsing for text from outside (CLI values, specs): the number, or nothing when the
// text is empty, has anything after the number, overflows, or (for doubles) is not finite. Callers word
// their own errors, naming what and where.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hydra {

std::optional<double> parse_finite_double(const std::string& text);
std::optional<int64_t> parse_int64(const std::string& text);

}  // namespace hydra
