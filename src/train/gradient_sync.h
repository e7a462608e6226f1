// GradientSync: the data-parallel gradient averaging of one backward pass, written against
// train/collective.h. The step calls begin(), then event(e) each time the backward has issued the last
// write of the gradients of event e (gpu_train_step's gradient hook), then finish(); ready buckets
// (train/grad_buckets.h) are averaged over the ranks as they complete, in bucket order on every rank.
// `before_launch` runs right before each bucket's collective (the CUDA engine makes its communication
// stream wait for the compute stream there). Every range of a bucket is averaged in place in `grads`.
#pragma once

#include <functional>
#include <vector>

#include "train/collective.h"
#include "train/grad_buckets.h"

namespace hydra {

class GradientSync {
  public:
    GradientSync(Collective& coll, std::vector<GradBucket> buckets, int n_events,
                 CollType type = CollType::F32);

    void set_before_launch(std::function<void(int bucket)> f) { before_launch_ = std::move(f); }
    const std::vector<GradBucket>& buckets() const { return buckets_; }

    void begin(void* grads);
    void event(int e);
    // Launches what is left; the averaging is complete once the collective is synchronised.
    void finish();
    int launched() const { return tracker_.launched(); }

  private:
    void launch(const std::vector<int>& which);

    Collective& coll_;
    std::vector<GradBucket> buckets_;
    BucketTracker tracker_;
    CollType type_;
    void* grads_ = nullptr;
    std::function<void(int)> before_launch_;
};

}  // namespace hydra
