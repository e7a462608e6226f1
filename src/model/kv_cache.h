// KVCache: keys and values of every layer for one sequence, filled by the forward pass.
// Positions [0, pos) are valid; a forward over T tokens writes rows [pos, pos+T) then advances pos.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"

namespace hydra {

class KVCache {
public:
    KVCache(const ModelConfig& config, int64_t capacity);

    int64_t capacity() const { return capacity_; }
    int64_t pos() const { return pos_; }
    void advance(int64_t n);
    void reset() { pos_ = 0; }
    // Forget everything after position p (p <= pos).
    void truncate(int64_t p);

    float* k(int64_t layer) const { return k_[size_t(layer)].f32(); }  // (capacity, Hkv, Dh)
    float* v(int64_t layer) const { return v_[size_t(layer)].f32(); }  // (capacity, Hkv, Dh)
    size_t bytes_per_token() const;

private:
    int64_t capacity_;
    int64_t pos_ = 0;
    int64_t row_;  // Hkv * Dh
    std::vector<Tensor> k_, v_;
};

}  // namespace hydra
