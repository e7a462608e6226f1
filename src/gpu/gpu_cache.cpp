// GPU hybrid cache storage (see gpu_cache.h).
#include "gpu/gpu_cache.h"

#include <atomic>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {
std::atomic<uint64_t> next_cache_id{1};
}  // namespace

GpuCache::GpuCache(const GpuTrainModel& model, int64_t capacity) : capacity_(capacity), id_(next_cache_id++) {
    HYDRA_CHECK(capacity > 0, "GPU cache capacity must be positive (got {})", capacity);
    const ModelConfig& cfg = model.config();
    const int64_t Dh = cfg.head_dim, W = model.plan().gdn.conv_size, Wm1 = W - 1 > 0 ? W - 1 : 1;
    const int64_t L = cfg.num_layers;
    layers_.resize(size_t(L));
    // element offsets first, then one allocation each
    auto al = [](int64_t n) { return (n + 127) / 128 * 128; };
    std::vector<int64_t> kv_off(static_cast<size_t>(L)), st_off(static_cast<size_t>(L));
    int64_t kv_total = 0, st_total = 0;
    for (int64_t l = 0; l < L; ++l) {
        const TrainLayerOffsets& g = model.layer(l);
        layers_[size_t(l)].n_kv = g.n_kv;
        kv_off[size_t(l)] = kv_total;
        kv_total += 2 * al(capacity * g.n_kv * Dh);
        st_off[size_t(l)] = st_total;
        if (g.n_la > 0) st_total += 3 * al(Wm1 * g.n_la * Dh) + al(g.n_la * Dh * Dh);
    }
    kv_ = cuda::DeviceBuffer<bf16>(kv_total);
    st_ = cuda::DeviceBuffer<float>(st_total);
    for (int64_t l = 0; l < L; ++l) {
        const TrainLayerOffsets& g = model.layer(l);
        Layer& c = layers_[size_t(l)];
        if (g.n_kv > 0) {
            c.k = kv_.data() + kv_off[size_t(l)];
            c.v = c.k + al(capacity * g.n_kv * Dh);
        }
        if (g.n_la > 0) {
            const int64_t w = al(Wm1 * g.n_la * Dh);
            c.conv_q = st_.data() + st_off[size_t(l)];
            c.conv_k = c.conv_q + w;
            c.conv_v = c.conv_k + w;
            c.state = c.conv_v + w;
        }
    }
    reset();
    CUDA_CHECK(cudaDeviceSynchronize());
}

void GpuCache::advance(int64_t n) {
    HYDRA_ASSERT(pos_ + n <= capacity_, "GPU cache overflow: {} + {} > {}", pos_, n, capacity_);
    pos_ += n;
}

void GpuCache::reset(cudaStream_t stream) {
    pos_ = 0;
    if (st_.size() > 0) CUDA_CHECK(cudaMemsetAsync(st_.data(), 0, st_.bytes(), stream));
}

}  // namespace hydra::gpu
