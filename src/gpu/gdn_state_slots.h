// GdnStateSlots: the GDN (linear-attention) cache of many sequences on the GPU (serving,
// gpu/gpu_batch_backend.h), one fixed-size slot per sequence. Slot-major: slot s holds, for every layer
// with LA heads, the conv windows conv_q, conv_k, conv_v (W-1, n_la*Dh) fp32 and the recurrent state
// (n_la, Dh, Dh) fp32 (gpu/gpu_cache.h's per-layer layout), so resetting, snapshotting or restoring a
// slot is one contiguous memset / copy. The batched kernels (ops/cuda/short_conv.h's
// short_conv_forward_slots, gdn_chunk.h's gdn_decode_step_slots) take layer l's slot-0 pointer plus
// slot_floats() per slot and a per-row slot index. Slot `max_slots` is the padding rows' scratch slot.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpu/gpu_cache.h"
#include "gpu/gpu_train_model.h"
#include "ops/cuda/device_arena.h"

namespace hydra::gpu {

class GdnStateSlots {
  public:
    GdnStateSlots(const GpuTrainModel& model, int64_t max_slots);

    // fp32 elements of one slot (0 for a model without LA heads).
    static int64_t slot_floats_for(const GpuTrainModel& model);
    int64_t slot_floats() const { return slot_floats_; }
    size_t slot_bytes() const { return size_t(slot_floats_) * sizeof(float); }
    int32_t scratch_slot() const { return int32_t(max_slots_); }

    // Layer l's parts in slot 0 (null without LA heads); slot s is at + s * slot_floats().
    float* conv_q(int64_t l) const { return ptr(l, 0); }
    float* conv_k(int64_t l) const { return ptr(l, 1); }
    float* conv_v(int64_t l) const { return ptr(l, 2); }
    float* state(int64_t l) const { return ptr(l, 3); }
    float* slot(int32_t s) const { return buf_.data() + int64_t(s) * slot_floats_; }

    // Zeroes the slot (a sequence start), asynchronously on `stream`.
    void reset(int32_t s, cudaStream_t stream);
    // The slot takes a one-sequence cache's GDN state and windows (after a prefill there).
    void load_from(int32_t s, const GpuCache& cache, cudaStream_t stream);
    // The way back: a one-sequence cache takes the slot's state and windows (to continue it there).
    void store_to(int32_t s, GpuCache& cache, cudaStream_t stream) const;
    // Device-to-device copies of the whole slot.
    void save(int32_t s, float* dst, cudaStream_t stream) const;
    void load(int32_t s, const float* src, cudaStream_t stream);

  private:
    float* ptr(int64_t l, int part) const;
    void copy_cache(int32_t s, const GpuCache& cache, bool to_slot, cudaStream_t stream) const;
    struct Layer {
        int64_t offset = -1, window = 0, state = 0;  // offset in the slot; conv window and state floats
    };
    int64_t max_slots_ = 0, slot_floats_ = 0;
    std::vector<Layer> layers_;
    cuda::DeviceBuffer<float> buf_;
};

}  // namespace hydra::gpu
