// The spread of head scores within each layer: how unequal a layer's heads are. The HydraHead premise
// is that heads within one layer specialise (a few carry retrieval, the rest do not), so a head-level
// selection keeps what a layer-level one would throw away; these numbers say how true that is for a
// scores table of `hydra score-heads` (model/plan_builders.h load_head_scores).
//
// Per layer over its H scores (which are >= 0, the aggregate is built from positive parts):
//   min, median, max, mean;
//   cv        = population standard deviation / mean (0 for equal heads; NaN when the mean is 0);
//   top_share = max / sum, the fraction of the layer's score mass in its top head (1/H for equal heads,
//               1 when one head carries everything; NaN when the sum is 0).
// Over the whole table: within_layer_share = the part of the scores' total variance (over all L*H
// heads) that lies within layers, 1 - (between-layer sum of squares / total sum of squares): near 1 when
// layers differ little on average and heads inside them a lot.
#pragma once

#include <cstdint>
#include <vector>

namespace hydra {

struct LayerHeadSpread {
    double min = 0, median = 0, max = 0, mean = 0, cv = 0, top_share = 0;
    int64_t top_head = 0;
};

struct HeadSpread {
    std::vector<LayerHeadSpread> layers;
    double within_layer_share = 0;  // NaN when every score is equal
};

// scores [layer][head]: every row the same non-zero length, every value finite and >= 0 (hydra::Error
// otherwise, naming the layer and head).
HeadSpread head_spread(const std::vector<std::vector<double>>& scores);

}  // namespace hydra
