// FaWeights (see fa_weights.h).
#include "interp/fa_weights.h"

#include <algorithm>

#include "core/error.h"

namespace hydra {

template <typename T>
const T* FaWeights<T>::take(const Tensor& t) {
    if (t.empty()) return nullptr;
    if constexpr (std::is_same_v<T, float>) {
        return t.f32();
    } else {
        const float* src = t.f32();
        owned_.emplace_back(src, src + t.numel());
        return owned_.back().data();
    }
}

template <typename T>
FaWeights<T>::FaWeights(const LlamaModel& model) : config_(model.config()) {
    const ModelConfig& c = config_;
    HYDRA_CHECK(
        model.plan().is_all_fa(),
        "head scoring needs the all-FA teacher model, not a hybrid (plan '{}'); score the source model",
        model.plan().selection);
    embed_ = take(model.embedding());
    // Tied heads share one copy in double too.
    lm_head_ = c.tie_word_embeddings ? embed_ : take(model.lm_head());
    final_norm_ = take(model.final_norm());
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const LayerWeights& w = model.layer(l);
        HYDRA_ASSERT(w.n_fa == c.num_heads && w.n_fa_kv == c.num_kv_heads,
                     "layer {}: {} FA heads, {} KV groups", l, w.n_fa, w.n_fa_kv);
        FaLayerWeights<T> p;
        p.attn_norm = take(w.attn_norm);
        p.wq = take(w.wq);
        p.wk = take(w.wk);
        p.wv = take(w.wv);
        p.bq = take(w.bq);
        p.bk = take(w.bk);
        p.bv = take(w.bv);
        p.q_norm = c.qk_norm ? take(w.q_norm) : nullptr;
        p.k_norm = c.qk_norm ? take(w.k_norm) : nullptr;
        p.wo = take(w.wo);
        p.ffn_norm = take(w.ffn_norm);
        p.w_gate = take(w.w_gate);
        p.w_up = take(w.w_up);
        p.w_down = take(w.w_down);
        layers_.push_back(p);
    }
}

template class FaWeights<float>;
template class FaWeights<double>;

}  // namespace hydra
