// closest_name: optimal-string-alignment distance over the known names (see closest_name.h).
#include "core/closest_name.h"

#include <algorithm>

namespace hydra {

int typo_distance(std::string_view a, std::string_view b) {
    const size_t n = a.size(), m = b.size();
    // d[i][j]: distance between a[0, i) and b[0, j), rows of m + 1
    std::vector<int> d((n + 1) * (m + 1));
    auto at = [&](size_t i, size_t j) -> int& { return d[i * (m + 1) + j]; };
    for (size_t i = 0; i <= n; ++i) at(i, 0) = int(i);
    for (size_t j = 0; j <= m; ++j) at(0, j) = int(j);
    for (size_t i = 1; i <= n; ++i)
        for (size_t j = 1; j <= m; ++j) {
            const int sub = at(i - 1, j - 1) + (a[i - 1] == b[j - 1] ? 0 : 1);
            int best = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, sub});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                best = std::min(best, at(i - 2, j - 2) + 1);
            at(i, j) = best;
        }
    return at(n, m);
}

std::optional<std::string> closest_name(std::string_view typed, const std::vector<std::string>& names) {
    std::optional<std::string> best;
    int best_distance = 0;
    for (const std::string& name : names) {
        if (name == typed) return std::nullopt;
        const int limit = name.size() <= 4 ? 1 : 2;
        const int d = typo_distance(typed, name);
        if (d <= limit && (!best || d < best_distance)) best = name, best_distance = d;
    }
    return best;
}

}  // namespace hydra
