// Gradient buckets for data-parallel training: the gradient arena cut into buckets of about `cap`
// elements, each launched as one all-reduce (a group over its contiguous ranges) as soon as the backward
// has produced every gradient in it, so communication overlaps the rest of the backward.
//
// Items are the gradient regions (tensors, with their padding) and the backward event after which each is
// final (e.g. "layer l's backward done"; a tied embedding's last writer is the embedding backward).
// Buckets are filled in backward order: by the events' order, and inside an event by decreasing offset
// (reverse parameter order). An item larger than `cap` is split into aligned pieces. The assignment
// depends only on the items, so every rank computes the same buckets (NCCL matches calls by order).
//
// BucketTracker turns fired events into launches: a bucket is ready when all its events fired, and
// buckets are launched strictly in index order (a ready bucket waits for the earlier ones), so the
// sequence of collectives is the same on every rank even if events fired in another order.
#pragma once

#include <cstdint>
#include <vector>

#include "train/collective.h"

namespace hydra {

struct GradItem {
    int64_t begin = 0, end = 0;  // elements of the gradient arena
    int event = 0;               // index into the event order, 0 = the first event of the backward
};

struct GradBucket {
    std::vector<ElemRange> ranges;  // disjoint, sorted, adjacent ones merged
    std::vector<int> events;        // distinct events whose items are in the bucket, sorted
    int64_t elements = 0;
};

// Throws hydra::Error when items overlap, have begin > end or a negative event, or cap / align < 1.
// Every item's elements land in exactly one bucket. Empty items are skipped.
std::vector<GradBucket> assign_buckets(const std::vector<GradItem>& items, int64_t cap, int64_t align = 1);

class BucketTracker {
  public:
    BucketTracker(const std::vector<GradBucket>& buckets, int n_events);
    // A new backward: no event fired, nothing launched.
    void reset();
    // Event `event` fired (again: ignored). Returns the buckets to launch now, in order.
    std::vector<int> fire(int event);
    // The backward ended: every bucket not yet launched, in order (events that never fired, e.g. the
    // LM head's in an align step, do not hold a bucket back forever).
    std::vector<int> finish();
    int launched() const { return next_; }

  private:
    std::vector<std::vector<int>> bucket_events_;
    std::vector<std::vector<int>> event_buckets_;
    std::vector<int> pending_;  // per bucket: events not fired yet
    std::vector<char> fired_;
    int next_ = 0;  // first bucket not launched
};

}  // namespace hydra
