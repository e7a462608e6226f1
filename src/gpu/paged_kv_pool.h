// PagedKvPool: the FA KV cache of many sequences ("slots") on the GPU, in fixed-size blocks of block_size
// positions from one pool (serving, gpu/gpu_batch_backend.h). A block id names the same block in every
// layer: layer l's K and V pools are (num_blocks, block_size, n_kv(l), Dh) bf16 each, so one allocation
// gives a sequence block_size more positions in all layers. Per slot a block table (device int32, one row of
// max_blocks_per_seq entries per slot, read by gpu/paged_decode_attention.h and gpu/paged_kv_write.h) and its
// host mirror.
//
// Blocks are reference-counted (gpu/block_refs.h, shared with the snapshots that outlive the pool's users): a
// prefix snapshot takes a reference on a slot's first full blocks, and a slot restored from it shares them
// (nothing is copied; the restored slot appends into new blocks, since snapshots end on a block boundary).
// A block returns to the free list when its last reference goes. Slot `max_slots` is the scratch slot that
// a batched step's padding rows write into: it owns block 0 for good.
//
// Host bookkeeping is not thread-safe except BlockRefs (snapshots may die on any thread). Table rows
// are uploaded asynchronously on the stream given, from host memory that is not reused until the caller's
// next synchronisation (the backend synchronises every step).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "gpu/block_refs.h"
#include "gpu/gpu_train_model.h"
#include "ops/cuda/device_arena.h"

namespace hydra::gpu {

class PagedKvPool {
  public:
    // num_blocks >= 1 + what one sequence of `context` positions needs is checked by the caller's sizing.
    PagedKvPool(const GpuTrainModel& model, int64_t max_slots, int64_t context, int64_t block_size,
                int64_t num_blocks);

    // Bytes of one block over all layers (K and V).
    static size_t block_bytes(const GpuTrainModel& model, int64_t block_size);

    int64_t block_size() const { return block_size_; }
    int64_t max_blocks_per_seq() const { return max_blocks_; }
    int64_t num_blocks() const { return refs_->num_blocks(); }
    int64_t free_blocks() const { return refs_->free_count(); }
    size_t bytes_per_block() const { return block_bytes_; }
    int32_t scratch_slot() const { return int32_t(max_slots_); }

    // Layer l's pools (null when the layer has no FA heads) and row width n_kv(l) * Dh.
    __nv_bfloat16* k(int64_t l) const { return layers_[size_t(l)].k; }
    __nv_bfloat16* v(int64_t l) const { return layers_[size_t(l)].v; }
    int64_t width(int64_t l) const { return layers_[size_t(l)].width; }
    const int32_t* block_table() const { return table_.data(); }  // (max_slots + 1, max_blocks) device
    const int32_t* table_row(int32_t slot) const { return table_.data() + int64_t(slot) * max_blocks_; }

    // Blocks of the slot now (positions it can hold: blocks * block_size).
    int64_t blocks_of(int32_t slot) const { return int64_t(slots_[size_t(slot)].size()); }
    const std::vector<int32_t>& blocks(int32_t slot) const { return slots_[size_t(slot)]; }
    // Grows the slot to hold `positions` (all or nothing); false when the pool has too few free blocks.
    bool reserve(int32_t slot, int64_t positions, cudaStream_t stream);
    // Drops the slot's blocks (shared ones stay alive for their other holders).
    void release(int32_t slot);
    // The slot's first n blocks with one more reference each (a snapshot's share).
    std::vector<int32_t> share(int32_t slot, int64_t n);
    // The (empty) slot takes `blocks` (one more reference each) as its first blocks.
    void adopt(int32_t slot, std::span<const int32_t> blocks, cudaStream_t stream);
    const std::shared_ptr<BlockRefs>& refs() const { return refs_; }

  private:
    void upload(int32_t slot, int64_t from, cudaStream_t stream);  // table entries [from, blocks) of the slot

    struct Layer {
        __nv_bfloat16 *k = nullptr, *v = nullptr;
        int64_t width = 0;
    };
    int64_t max_slots_ = 0, block_size_ = 0, max_blocks_ = 0;
    size_t block_bytes_ = 0;
    std::shared_ptr<BlockRefs> refs_;
    std::vector<std::vector<int32_t>> slots_;  // (max_slots + 1) block lists
    std::vector<Layer> layers_;
    cuda::DeviceBuffer<__nv_bfloat16> kv_;
    cuda::DeviceBuffer<int32_t> table_;
};

}  // namespace hydra::gpu
