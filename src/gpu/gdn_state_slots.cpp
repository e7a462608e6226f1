// GDN state slots (see gdn_state_slots.h).
#include "gpu/gdn_state_slots.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

// 128-float alignment of every part (the decode kernels' 16-byte accesses).
int64_t al(int64_t n) {
    return (n + 127) / 128 * 128;
}

}  // namespace

int64_t GdnStateSlots::slot_floats_for(const GpuTrainModel& model) {
    const ModelConfig& c = model.config();
    const int64_t W = model.plan().gdn.conv_size, Wm1 = std::max<int64_t>(W - 1, 1);
    int64_t n = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const int64_t n_la = model.layer(l).n_la;
        if (n_la > 0) n += 3 * al(Wm1 * n_la * c.head_dim) + al(n_la * c.head_dim * c.head_dim);
    }
    return n;
}

GdnStateSlots::GdnStateSlots(const GpuTrainModel& model, int64_t max_slots) : max_slots_(max_slots) {
    const ModelConfig& c = model.config();
    const int64_t W = model.plan().gdn.conv_size, Wm1 = std::max<int64_t>(W - 1, 1);
    layers_.resize(size_t(c.num_layers));
    int64_t n = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const int64_t n_la = model.layer(l).n_la;
        if (n_la == 0) continue;
        Layer& y = layers_[size_t(l)];
        y.offset = n;
        y.window = Wm1 * n_la * c.head_dim;
        y.state = n_la * c.head_dim * c.head_dim;
        n += 3 * al(y.window) + al(y.state);
    }
    slot_floats_ = n;
    HYDRA_ASSERT(n == slot_floats_for(model), "GDN state slots: layout mismatch");
    buf_ = cuda::DeviceBuffer<float>(std::max<int64_t>((max_slots + 1) * n, 1));
    CUDA_CHECK(cudaMemset(buf_.data(), 0, buf_.bytes()));
}

float* GdnStateSlots::ptr(int64_t l, int part) const {
    const Layer& y = layers_[size_t(l)];
    if (y.offset < 0) return nullptr;
    return buf_.data() + y.offset + int64_t(part) * al(y.window);
}

void GdnStateSlots::reset(int32_t s, cudaStream_t stream) {
    if (slot_floats_ > 0) CUDA_CHECK(cudaMemsetAsync(slot(s), 0, slot_bytes(), stream));
}

void GdnStateSlots::copy_cache(int32_t s, const GpuCache& cache, bool to_slot, cudaStream_t stream) const {
    const int64_t base = int64_t(s) * slot_floats_;
    for (size_t l = 0; l < layers_.size(); ++l) {
        const Layer& y = layers_[l];
        if (y.offset < 0) continue;
        const int64_t li = int64_t(l);
        auto copy = [&](float* slot_part, float* cache_part, int64_t n) {
            float* dst = to_slot ? slot_part + base : cache_part;
            const float* src = to_slot ? cache_part : slot_part + base;
            CUDA_CHECK(
                cudaMemcpyAsync(dst, src, size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        };
        copy(conv_q(li), cache.conv_q(li), y.window);
        copy(conv_k(li), cache.conv_k(li), y.window);
        copy(conv_v(li), cache.conv_v(li), y.window);
        copy(state(li), cache.state(li), y.state);
    }
}

void GdnStateSlots::load_from(int32_t s, const GpuCache& cache, cudaStream_t stream) {
    copy_cache(s, cache, true, stream);
}

void GdnStateSlots::store_to(int32_t s, GpuCache& cache, cudaStream_t stream) const {
    copy_cache(s, cache, false, stream);
}

void GdnStateSlots::save(int32_t s, float* dst, cudaStream_t stream) const {
    if (slot_floats_ > 0)
        CUDA_CHECK(cudaMemcpyAsync(dst, slot(s), slot_bytes(), cudaMemcpyDeviceToDevice, stream));
}

void GdnStateSlots::load(int32_t s, const float* src, cudaStream_t stream) {
    if (slot_floats_ > 0)
        CUDA_CHECK(cudaMemcpyAsync(slot(s), src, slot_bytes(), cudaMemcpyDeviceToDevice, stream));
}

}  // namespace hydra::gpu
