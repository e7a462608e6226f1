// FaWeights (see fa_weights.h).
#include "interp/fa_weights.h"

#include "core/error.h"

namespace hydra {

template <typename T>
FaWeights<T>::FaWeights(const LlamaModel& model) : config_(model.config()), plan_(model.plan()) {
    const ModelConfig& c = config_;
    HYDRA_CHECK(
        model.plan().is_all_fa(),
        "head scoring needs the all-FA teacher model, not a hybrid (plan '{}'); score the source model",
        model.plan().selection);
    const ParamArena& arena = model.params();
    const T* base = nullptr;
    if constexpr (std::is_same_v<T, float>) {
        base = arena.data();
    } else {
        copy_.assign(arena.data(), arena.data() + arena.numel());
        base = copy_.data();
    }
    auto at = [&](const char* name) { return base + arena.entry(name).offset; };
    embed_ = at("model.embed_tokens.weight");
    lm_head_ = c.tie_word_embeddings ? embed_ : at("lm_head.weight");  // tied heads share one copy
    final_norm_ = at("model.norm.weight");
    for (int64_t l = 0; l < c.num_layers; ++l) layers_.push_back(layer_params(c, plan_, arena, base, l));
}

template class FaWeights<float>;
template class FaWeights<double>;

}  // namespace hydra
