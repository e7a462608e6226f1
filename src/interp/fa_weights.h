// FaWeights<T>: the weights of an all-FA (teacher) LlamaModel as typed pointers, one struct per
// layer, for the interpretability code (src/interp/). float views the model's own f32 arena (no
// copy); double holds converted copies, so finite-difference checks of the interp backward can run
// the same code in double on tiny models. Head scoring is defined on the teacher: a hybrid model is
// refused here, once, so nothing downstream has to think about LA heads.
#pragma once

#include <cstdint>
#include <vector>

#include "model/llama_model.h"
#include "model/model_config.h"

namespace hydra {

template <typename T>
struct FaLayerWeights {
    const T* attn_norm = nullptr;                         // (C)
    const T *wq = nullptr, *wk = nullptr, *wv = nullptr;  // (H*Dh, C), (Hkv*Dh, C), (Hkv*Dh, C)
    const T *bq = nullptr, *bk = nullptr, *bv = nullptr;  // biases or null (attention_bias)
    const T *q_norm = nullptr, *k_norm = nullptr;         // (Dh) or null (qk_norm)
    const T* wo = nullptr;                                // (C, H*Dh)
    const T* ffn_norm = nullptr;                          // (C)
    const T *w_gate = nullptr, *w_up = nullptr;           // (F, C)
    const T* w_down = nullptr;                            // (C, F)
};

template <typename T>
class FaWeights {
  public:
    // Throws hydra::Error when `model` is not the all-FA teacher (score the teacher, then convert).
    explicit FaWeights(const LlamaModel& model);
    FaWeights(const FaWeights&) = delete;
    FaWeights& operator=(const FaWeights&) = delete;
    FaWeights(FaWeights&&) = default;

    const ModelConfig& config() const { return config_; }
    const FaLayerWeights<T>& layer(int64_t l) const { return layers_[size_t(l)]; }
    const T* embedding() const { return embed_; }        // (V, C)
    const T* lm_head() const { return lm_head_; }        // (V, C)
    const T* final_norm() const { return final_norm_; }  // (C)

  private:
    const T* take(const Tensor& t);  // view (float) or converted copy (double); null for an empty tensor

    ModelConfig config_;
    std::vector<FaLayerWeights<T>> layers_;
    const T *embed_ = nullptr, *lm_head_ = nullptr, *final_norm_ = nullptr;
    std::vector<std::vector<T>> owned_;  // double copies; inner buffers never move once filled
};

}  // namespace hydra
