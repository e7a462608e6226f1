// Bucketed gradient averaging over a Collective (see gradient_sync.h).
#include "train/gradient_sync.h"

#include "core/error.h"

namespace hydra {

GradientSync::GradientSync(Collective& coll, std::vector<GradBucket> buckets, int n_events, CollType type)
    : coll_(coll), buckets_(std::move(buckets)), tracker_(buckets_, n_events), type_(type) {}

void GradientSync::begin(void* grads) {
    HYDRA_ASSERT(grads != nullptr, "GradientSync::begin without a gradient buffer");
    grads_ = grads;
    tracker_.reset();
}

void GradientSync::event(int e) {
    if (!grads_) return;  // a backward outside begin() / finish() (e.g. a check): nothing to average
    launch(tracker_.fire(e));
}

void GradientSync::finish() {
    if (!grads_) return;
    launch(tracker_.finish());
    grads_ = nullptr;
}

void GradientSync::launch(const std::vector<int>& which) {
    for (int b : which) {
        if (before_launch_) before_launch_(b);
        coll_.all_reduce(grads_, type_, buckets_[size_t(b)].ranges, true);
    }
}

}  // namespace hydra
