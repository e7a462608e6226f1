// GpuCache: the hybrid cache of one sequence on the GPU, the mirror of model/kv_cache.h. Per layer:
//   k, v   (capacity, n_kv, Dh) bf16: keys (after RoPE) and values of the layer's FA KV groups only
//   conv_q, conv_k, conv_v  (W-1, n_la*Dh) fp32: the last W-1 raw q/k/v projections of the LA heads
//   state  (n_la, Dh, Dh) fp32: the Gated DeltaNet recurrent state M = S^T (V-major, K contiguous)
// Positions [0, pos) are valid. reset() zeroes the GDN state and conv windows (K/V rows need no
// clearing: rows >= pos are never read). All GDN state lives in one fp32 buffer and all K/V in one
// bf16 buffer, so reset is one memset. The buffers never move; id() names this cache's storage for the
// decode graphs that hold its addresses (gpu_forward.h). Every CUDA call is checked.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "gpu/gpu_train_model.h"

namespace hydra::gpu {

class GpuCache {
public:
    GpuCache(const GpuTrainModel& model, int64_t capacity);

    int64_t capacity() const { return capacity_; }
    // Unique per GpuCache object in this process (never reused, unlike its device addresses).
    uint64_t id() const { return id_; }
    int64_t pos() const { return pos_; }
    void advance(int64_t n);
    // Back to an empty sequence, asynchronously on `stream` (GDN state zeroed).
    void reset(cudaStream_t stream = nullptr);

    int64_t kv_heads(int64_t l) const { return layers_[size_t(l)].n_kv; }
    bf16* k(int64_t l) const { return layers_[size_t(l)].k; }
    bf16* v(int64_t l) const { return layers_[size_t(l)].v; }
    float* conv_q(int64_t l) const { return layers_[size_t(l)].conv_q; }
    float* conv_k(int64_t l) const { return layers_[size_t(l)].conv_k; }
    float* conv_v(int64_t l) const { return layers_[size_t(l)].conv_v; }
    float* state(int64_t l) const { return layers_[size_t(l)].state; }

    size_t kv_bytes() const { return kv_.bytes(); }
    size_t state_bytes() const { return st_.bytes(); }

private:
    struct Layer {
        int64_t n_kv = 0;
        bf16 *k = nullptr, *v = nullptr;
        float *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr, *state = nullptr;
    };
    int64_t capacity_ = 0, pos_ = 0;
    uint64_t id_ = 0;
    std::vector<Layer> layers_;
    cuda::DeviceBuffer<bf16> kv_;
    cuda::DeviceBuffer<float> st_;
};

}  // namespace hydra::gpu
