// ZeRO-1 shard ranges and span clipping (see zero_shards.h).
#include "train/zero_shards.h"

#include <algorithm>

#include "core/error.h"

namespace hydra {

int64_t trainable_in(const std::vector<ParamSpan>& spans, ElemRange range) {
    int64_t n = 0;
    for (const ParamSpan& s : spans) {
        if (!s.trainable) continue;
        const int64_t lo = std::max(s.offset, range.begin), hi = std::min(s.offset + s.size, range.end);
        n += std::max<int64_t>(0, hi - lo);
    }
    return n;
}

std::vector<ElemRange> shard_ranges(int64_t n, int world, int64_t align,
                                    const std::vector<ParamSpan>& spans) {
    HYDRA_CHECK(world >= 1, "shard_ranges: world size {} < 1", world);
    HYDRA_CHECK(align >= 1, "shard_ranges: alignment {} < 1", align);
    HYDRA_CHECK(n >= 0, "shard_ranges: negative arena size {}", n);
    for (const ParamSpan& s : spans)
        HYDRA_CHECK(s.offset >= 0 && s.size >= 0 && s.offset + s.size <= n,
                    "shard_ranges: span '{}' [{}, +{}) lies outside the arena of {} elements", s.name,
                    s.offset, s.size, n);
    // The weight of the prefix [0, x): trainable elements (or all elements without spans); the boundary of
    // rank r is the smallest aligned x whose prefix weight reaches r/W of the total (binary search: the
    // prefix weight is monotone in x).
    std::vector<ParamSpan> sorted;
    for (const ParamSpan& s : spans)
        if (s.trainable && s.size > 0) sorted.push_back(s);
    std::sort(sorted.begin(), sorted.end(),
              [](const ParamSpan& a, const ParamSpan& b) { return a.offset < b.offset; });
    const bool by_spans = !sorted.empty();
    auto prefix = [&](int64_t x) {
        if (!by_spans) return x;
        return trainable_in(sorted, ElemRange{0, x});
    };
    const int64_t total = prefix(n);
    const int64_t slots = (n + align - 1) / align;  // candidate boundaries k * align, k in [0, slots]
    std::vector<ElemRange> out(static_cast<size_t>(world));
    int64_t prev = 0;
    for (int r = 0; r < world; ++r) {
        int64_t end = n;
        if (r + 1 < world) {
            // target weight (r + 1) / W of the total, in exact integer arithmetic
            const __int128 target = __int128(total) * (r + 1);
            int64_t lo = prev / align, hi = slots;  // smallest k with prefix(k * align) * W >= target
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                if (__int128(prefix(std::min(mid * align, n))) * world >= target)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            end = std::max(prev, std::min(lo * align, n));
        }
        out[size_t(r)] = ElemRange{prev, end};
        prev = end;
    }
    return out;
}

std::vector<ParamSpan> clip_spans(const std::vector<ParamSpan>& spans, ElemRange range) {
    std::vector<ParamSpan> out;
    for (const ParamSpan& s : spans) {
        const int64_t lo = std::max(s.offset, range.begin), hi = std::min(s.offset + s.size, range.end);
        if (hi <= lo) continue;
        ParamSpan c = s;
        c.offset = lo;
        c.size = hi - lo;
        out.push_back(std::move(c));
    }
    return out;
}

}  // namespace hydra
