// The "did you mean" of error messages: among known names (commands, config keys), the one a mistyped
// name most likely meant.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hydra {

// Edit distance counting insertions, deletions, substitutions and swaps of adjacent characters as one
// edit each (optimal string alignment).
int typo_distance(std::string_view a, std::string_view b);

// The name in `names` closest to `typed` when it is near enough to be a typo: at most one edit for
// names of up to four characters, two beyond (ties: the first in `names`); nullopt when none is, or
// when `typed` is itself one of them.
std::optional<std::string> closest_name(std::string_view typed, const std::vector<std::string>& names);

}  // namespace hydra
