// KVCache storage (see kv_cache.h).
#include "model/kv_cache.h"

#include "core/error.h"

namespace hydra {

KVCache::KVCache(const ModelConfig& config, int64_t capacity) : capacity_(capacity), row_(config.kv_dim()) {
    HYDRA_CHECK(capacity > 0, "KV cache capacity must be positive (got {})", capacity);
    for (int64_t l = 0; l < config.num_layers; ++l) {
        k_.push_back(Tensor::zeros({capacity, config.num_kv_heads, config.head_dim}));
        v_.push_back(Tensor::zeros({capacity, config.num_kv_heads, config.head_dim}));
    }
}

void KVCache::advance(int64_t n) {
    HYDRA_ASSERT(pos_ + n <= capacity_, "KV cache overflow: {} + {} > {}", pos_, n, capacity_);
    pos_ += n;
}

void KVCache::truncate(int64_t p) {
    HYDRA_CHECK(p >= 0 && p <= pos_, "cannot truncate KV cache at {} (holds {} positions)", p, pos_);
    pos_ = p;
}

size_t KVCache::bytes_per_token() const { return k_.size() * 2 * size_t(row_) * sizeof(float); }

}  // namespace hydra
