// Hybrid cache storage (see kv_cache.h).
#include "model/kv_cache.h"

#include <cstring>

#include "core/error.h"

namespace hydra {

KVCache::KVCache(const ModelConfig& config, int64_t capacity) { init(config, HybridPlan::all_fa(config), capacity); }

KVCache::KVCache(const LlamaModel& model, int64_t capacity) { init(model.config(), model.plan(), capacity); }

void KVCache::init(const ModelConfig& config, const HybridPlan& plan, int64_t capacity) {
    HYDRA_CHECK(capacity > 0, "KV cache capacity must be positive (got {})", capacity);
    capacity_ = capacity;
    head_dim_ = config.head_dim;
    const int64_t Dh = config.head_dim, W = plan.gdn.conv_size;
    for (int64_t l = 0; l < config.num_layers; ++l) {
        const int64_t groups = int64_t(plan.fa_kv_groups(config, l).size());
        kv_heads_.push_back(groups);
        k_.push_back(groups > 0 ? Tensor::zeros({capacity, groups, Dh}) : Tensor());
        v_.push_back(groups > 0 ? Tensor::zeros({capacity, groups, Dh}) : Tensor());
        GdnLayerState s;
        const int64_t la = plan.layers[size_t(l)].num_la();
        if (la > 0) {
            s.conv_q = Tensor::zeros({W - 1 > 0 ? W - 1 : 1, la * Dh});
            s.conv_k = Tensor::zeros({W - 1 > 0 ? W - 1 : 1, la * Dh});
            s.conv_v = Tensor::zeros({W - 1 > 0 ? W - 1 : 1, la * Dh});
            s.recurrent = Tensor::zeros({la, Dh, Dh});
        }
        gdn_.push_back(std::move(s));
    }
}

void KVCache::advance(int64_t n) {
    HYDRA_ASSERT(pos_ + n <= capacity_, "KV cache overflow: {} + {} > {}", pos_, n, capacity_);
    pos_ += n;
}

bool KVCache::has_recurrent_state() const {
    for (const GdnLayerState& s : gdn_)
        if (!s.empty()) return true;
    return false;
}

void KVCache::reset() {
    pos_ = 0;
    for (GdnLayerState& s : gdn_)
        for (Tensor* t : {&s.conv_q, &s.conv_k, &s.conv_v, &s.recurrent})
            if (!t->empty()) std::memset(t->f32(), 0, size_t(t->numel()) * sizeof(float));
}

void KVCache::truncate(int64_t p) {
    HYDRA_CHECK(p >= 0 && p <= pos_, "cannot truncate KV cache at {} (holds {} positions)", p, pos_);
    if (p == pos_) return;
    if (p == 0) return reset();
    HYDRA_CHECK(!has_recurrent_state(),
                "cannot rewind the cache to position {} of {}: Gated DeltaNet states cannot be truncated (only reset)",
                p, pos_);
    pos_ = p;
}

size_t KVCache::bytes_per_token() const {
    size_t n = 0;
    for (int64_t h : kv_heads_) n += 2 * size_t(h * head_dim_) * sizeof(float);
    return n;
}

size_t KVCache::state_bytes() const {
    size_t n = 0;
    for (const GdnLayerState& s : gdn_)
        for (const Tensor* t : {&s.conv_q, &s.conv_k, &s.conv_v, &s.recurrent})
            if (!t->empty()) n += size_t(t->numel()) * sizeof(float);
    return n;
}

}  // namespace hydra
