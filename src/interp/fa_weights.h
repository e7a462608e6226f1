// FaWeights<T>: the all-FA teacher's weights as the decoder layer reads them (model/layer_params.h),
// for the interpretability code (src/interp/). float views the model's own f32 arena (no copy);
// double holds one converted copy of the arena, so finite-difference checks of the interp backward run
// the same code in double on tiny models. Head scoring is defined on the teacher: a hybrid model is
// refused here, once, so nothing downstream has to think about LA heads.
#pragma once

#include <cstdint>
#include <vector>

#include "model/hybrid_plan.h"
#include "model/layer_params.h"
#include "model/llama_model.h"
#include "model/model_config.h"

namespace hydra {

template <typename T>
class FaWeights {
  public:
    // Throws hydra::Error when `model` is not the all-FA teacher (score the teacher, then convert).
    explicit FaWeights(const LlamaModel& model);
    FaWeights(const FaWeights&) = delete;
    FaWeights& operator=(const FaWeights&) = delete;
    FaWeights(FaWeights&&) = default;

    const ModelConfig& config() const { return config_; }
    const HybridPlan& plan() const { return plan_; }
    const LayerParams<const T>& layer(int64_t l) const { return layers_[size_t(l)]; }
    const T* embedding() const { return embed_; }        // (V, C)
    const T* lm_head() const { return lm_head_; }        // (V, C)
    const T* final_norm() const { return final_norm_; }  // (C)

  private:
    ModelConfig config_;
    HybridPlan plan_;
    std::vector<LayerParams<const T>> layers_;
    const T *embed_ = nullptr, *lm_head_ = nullptr, *final_norm_ = nullptr;
    std::vector<T> copy_;  // double: the converted arena (never resized after construction)
};

}  // namespace hydra
