// ZeRO stage 1 over the flat parameter arena: rank r owns one contiguous range of the arena and keeps
// the AdamW state (m, v) only there; it updates that range of the fp32 master (and bf16 mirror) from the
// averaged gradients, then the ranges are all-gathered. Pure logic, no transport:
//   shard_ranges     W ranges covering [0, n) in order, without overlap, boundaries multiples of `align`
//                    (so vector loads and the device arena's 128-element groups stay aligned), sized by
//                    the trainable elements they hold so the optimizer work is balanced
//   clip_spans       the optimizer spans restricted to a range (a span cut by a boundary is split)
// Checkpoints hold the full m and v (gathered to rank 0 with Collective::gather_to_root); a run resumed with
// any other W takes its new range of those full arrays, so re-sharding on load is slicing.
#pragma once

#include <cstdint>
#include <vector>

#include "train/collective.h"
#include "train/param_groups.h"

namespace hydra {

// W ranges covering [0, n) in order, disjoint, every inner boundary a multiple of `align` (> 0). The
// boundaries split the trainable elements of `spans` as evenly as `align` allows (spans empty: split the
// elements of [0, n) evenly). Ranges may be empty when n is small. Throws on world < 1, align < 1, n < 0
// or a span outside [0, n).
std::vector<ElemRange> shard_ranges(int64_t n, int world, int64_t align,
                                    const std::vector<ParamSpan>& spans = {});

// The spans intersected with `range`, in order; the parts outside are dropped, empty pieces skipped.
std::vector<ParamSpan> clip_spans(const std::vector<ParamSpan>& spans, ElemRange range);

// The trainable elements of `spans` inside `range`.
int64_t trainable_in(const std::vector<ParamSpan>& spans, ElemRange range);

}  // namespace hydra
