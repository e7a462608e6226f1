// Per-layer spread of head scores (see head_spread.h).
#include "interp/head_spread.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hydra {

HeadSpread head_spread(const std::vector<std::vector<double>>& scores) {
    HYDRA_CHECK(!scores.empty() && !scores[0].empty(), "head scores: an empty table");
    const size_t H = scores[0].size();
    HeadSpread out;
    double grand = 0;
    for (size_t l = 0; l < scores.size(); ++l) {
        HYDRA_CHECK(scores[l].size() == H, "head scores: layer {} has {} heads, layer 0 has {}", l,
                    scores[l].size(), H);
        for (size_t h = 0; h < H; ++h)
            HYDRA_CHECK(std::isfinite(scores[l][h]) && scores[l][h] >= 0,
                        "head scores: layer {} head {} is {}; the spread needs finite scores >= 0", l, h,
                        scores[l][h]);
        std::vector<double> v = scores[l];
        LayerHeadSpread s;
        s.top_head = int64_t(std::max_element(v.begin(), v.end()) - v.begin());
        std::sort(v.begin(), v.end());
        s.min = v.front();
        s.max = v.back();
        s.median = H % 2 ? v[H / 2] : 0.5 * (v[H / 2 - 1] + v[H / 2]);
        double sum = 0;
        for (double x : v) sum += x;
        s.mean = sum / double(H);
        double ss = 0;
        for (double x : v) ss += (x - s.mean) * (x - s.mean);
        s.cv = s.mean > 0 ? std::sqrt(ss / double(H)) / s.mean : NAN;
        s.top_share = sum > 0 ? s.max / sum : NAN;
        grand += sum;
        out.layers.push_back(s);
    }
    grand /= double(scores.size() * H);
    double total = 0, between = 0;
    for (size_t l = 0; l < scores.size(); ++l) {
        for (double x : scores[l]) total += (x - grand) * (x - grand);
        const double d = out.layers[l].mean - grand;
        between += double(H) * d * d;
    }
    out.within_layer_share = total > 0 ? 1.0 - between / total : NAN;
    return out;
}

}  // namespace hydra
