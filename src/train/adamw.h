// AdamW over the flat parameter arena (decoupled weight decay, bias correction), plus the
// arena-wide gradient helpers a trainer needs around it: global norm, clipping, NaN/Inf check.
//
// Update per trainable element, matching torch.optim.AdamW (foreach=False):
//   p -= lr * wd * p                        (decoupled decay, before the Adam step)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// with lr = config.lr * span.lr_scale, wd = config.weight_decay * span.wd_scale and t the number of
// step() calls so far (one counter for the whole arena, so a span unfrozen later starts with the
// global bias correction). Frozen spans (trainable = false) and padding between spans are never
// written: params, m and v there stay bit-identical.
#pragma once

#include <cstdint>
#include <vector>

#include "train/param_groups.h"

namespace hydra {

struct AdamWConfig {
    float lr = 1e-3f;
    float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

class AdamW {
  public:
    // State for an arena of n_total elements (ParamArena::numel(), padding included), zeroed.
    AdamW(const AdamWConfig& config, int64_t n_total);

    // One optimizer step over every trainable span. params/grads have n_total elements.
    void step(float* params, const float* grads, int64_t n_total, const std::vector<ParamSpan>& spans);

    AdamWConfig& config() { return config_; }
    const AdamWConfig& config() const { return config_; }
    void set_lr(float lr) { config_.lr = lr; }

    // Optimizer state, exposed as plain buffers for checkpoints (write them out as f32 and the step
    // as an integer; reading them back restores the optimizer bit-exactly).
    int64_t size() const { return int64_t(m_.size()); }
    float* m() { return m_.data(); }
    float* v() { return v_.data(); }
    const float* m() const { return m_.data(); }
    const float* v() const { return v_.data(); }
    int64_t step_count() const { return step_; }
    void set_step_count(int64_t step);
    // Restores m, v (n elements each, n == size()) and the step counter.
    void load_state(const float* m, const float* v, int64_t n, int64_t step);

  private:
    AdamWConfig config_;
    std::vector<float> m_, v_;
    int64_t step_ = 0;
};

// Global L2 norm of the gradients of the trainable spans (accumulated in double).
double grad_norm(const float* grads, const std::vector<ParamSpan>& spans);

// torch.nn.utils.clip_grad_norm_: scales the trainable spans' gradients by
// max_norm / (norm + 1e-6) when that is < 1; `norm` is grad_norm()'s result. Returns the factor
// applied (1 when nothing was clipped).
double clip_grads(float* grads, const std::vector<ParamSpan>& spans, double max_norm, double norm);

// False if any gradient of a trainable span is NaN or +-Inf (frozen spans are not inspected).
bool all_finite(const float* grads, const std::vector<ParamSpan>& spans);

}  // namespace hydra
