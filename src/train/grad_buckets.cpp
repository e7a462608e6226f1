// Gradient bucket assignment and readiness (see grad_buckets.h).
#include "train/grad_buckets.h"

#include <algorithm>

#include "core/error.h"

namespace hydra {

std::vector<GradBucket> assign_buckets(const std::vector<GradItem>& items_in, int64_t cap, int64_t align) {
    HYDRA_CHECK(cap >= 1 && align >= 1, "assign_buckets: bucket size {} and alignment {} must be >= 1", cap,
                align);
    std::vector<GradItem> items;
    for (const GradItem& it : items_in) {
        HYDRA_CHECK(it.begin >= 0 && it.begin <= it.end && it.event >= 0,
                    "assign_buckets: bad item [{}, {}) of event {}", it.begin, it.end, it.event);
        if (it.end > it.begin) items.push_back(it);
    }
    std::vector<GradItem> by_offset = items;
    std::sort(by_offset.begin(), by_offset.end(),
              [](const GradItem& a, const GradItem& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < by_offset.size(); ++i)
        HYDRA_CHECK(by_offset[i].begin >= by_offset[i - 1].end,
                    "assign_buckets: items [{}, {}) and [{}, {}) overlap", by_offset[i - 1].begin,
                    by_offset[i - 1].end, by_offset[i].begin, by_offset[i].end);
    // backward order: by event, then reverse parameter order
    std::stable_sort(items.begin(), items.end(), [](const GradItem& a, const GradItem& b) {
        return a.event != b.event ? a.event < b.event : a.begin > b.begin;
    });
    const int64_t step = std::max<int64_t>(align, cap / align * align);  // piece size of a split item
    std::vector<GradBucket> out;
    GradBucket cur;
    auto close = [&] {
        if (cur.elements == 0) return;
        std::sort(cur.ranges.begin(), cur.ranges.end(),
                  [](const ElemRange& a, const ElemRange& b) { return a.begin < b.begin; });
        std::vector<ElemRange> merged;
        for (const ElemRange& r : cur.ranges) {
            if (!merged.empty() && merged.back().end == r.begin)
                merged.back().end = r.end;
            else
                merged.push_back(r);
        }
        cur.ranges = std::move(merged);
        std::sort(cur.events.begin(), cur.events.end());
        cur.events.erase(std::unique(cur.events.begin(), cur.events.end()), cur.events.end());
        out.push_back(std::move(cur));
        cur = GradBucket();
    };
    auto add = [&](ElemRange r, int event) {
        if (cur.elements > 0 && cur.elements + r.size() > cap) close();
        cur.ranges.push_back(r);
        cur.events.push_back(event);
        cur.elements += r.size();
        if (cur.elements >= cap) close();
    };
    for (const GradItem& it : items) {
        if (it.end - it.begin <= cap) {
            add({it.begin, it.end}, it.event);
            continue;
        }
        // pieces from the end (reverse order inside the item too), cut at aligned offsets
        int64_t hi = it.end;
        while (hi > it.begin) {
            int64_t lo = std::max(it.begin, (hi - step + align - 1) / align * align);
            if (lo >= hi) lo = std::max(it.begin, hi - step);
            add({lo, hi}, it.event);
            hi = lo;
        }
    }
    close();
    return out;
}

BucketTracker::BucketTracker(const std::vector<GradBucket>& buckets, int n_events) {
    HYDRA_CHECK(n_events >= 0, "BucketTracker: negative event count {}", n_events);
    event_buckets_.resize(size_t(n_events));
    for (size_t b = 0; b < buckets.size(); ++b) {
        bucket_events_.push_back(buckets[b].events);
        for (int e : buckets[b].events) {
            HYDRA_CHECK(e >= 0 && e < n_events, "BucketTracker: bucket {} names event {} of {}", b, e,
                        n_events);
            event_buckets_[size_t(e)].push_back(int(b));
        }
    }
    reset();
}

void BucketTracker::reset() {
    pending_.clear();
    for (const auto& ev : bucket_events_) pending_.push_back(int(ev.size()));
    fired_.assign(event_buckets_.size(), 0);
    next_ = 0;
}

std::vector<int> BucketTracker::fire(int event) {
    HYDRA_CHECK(event >= 0 && size_t(event) < fired_.size(), "BucketTracker: event {} of {}", event,
                fired_.size());
    std::vector<int> launch;
    if (fired_[size_t(event)]) return launch;
    fired_[size_t(event)] = 1;
    for (int b : event_buckets_[size_t(event)]) --pending_[size_t(b)];
    while (size_t(next_) < pending_.size() && pending_[size_t(next_)] == 0) launch.push_back(next_++);
    return launch;
}

std::vector<int> BucketTracker::finish() {
    std::vector<int> launch;
    while (size_t(next_) < pending_.size()) launch.push_back(next_++);
    return launch;
}

}  // namespace hydra
