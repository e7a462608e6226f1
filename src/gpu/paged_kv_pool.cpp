// Paged FA KV pool (see paged_kv_pool.h).
#include "gpu/paged_kv_pool.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

size_t PagedKvPool::block_bytes(const GpuTrainModel& model, int64_t block_size) {
    size_t n = 0;
    for (int64_t l = 0; l < model.config().num_layers; ++l)
        n += 2 * size_t(block_size) * size_t(model.layer(l).n_kv * model.config().head_dim) * 2;
    return n;
}

PagedKvPool::PagedKvPool(const GpuTrainModel& model, int64_t max_slots, int64_t context, int64_t block_size,
                         int64_t num_blocks)
    : max_slots_(max_slots), block_size_(block_size) {
    HYDRA_CHECK(max_slots > 0 && context > 0 && block_size > 0 && num_blocks >= 2,
                "paged KV pool: {} slots, context {}, block size {}, {} blocks", max_slots, context,
                block_size, num_blocks);
    HYDRA_CHECK(num_blocks < (int64_t(1) << 31), "paged KV pool: {} blocks exceed int32 ids", num_blocks);
    max_blocks_ = (context + block_size - 1) / block_size;
    block_bytes_ = block_bytes(model, block_size);
    refs_ = std::make_shared<BlockRefs>(num_blocks);
    slots_.resize(size_t(max_slots + 1));
    const ModelConfig& c = model.config();
    const int64_t L = c.num_layers;
    layers_.resize(size_t(L));
    int64_t total = 0;
    std::vector<int64_t> off(static_cast<size_t>(L));
    for (int64_t l = 0; l < L; ++l) {
        layers_[size_t(l)].width = model.layer(l).n_kv * c.head_dim;
        off[size_t(l)] = total;
        total += 2 * num_blocks * block_size * layers_[size_t(l)].width;  // K then V
    }
    kv_ = cuda::DeviceBuffer<__nv_bfloat16>(std::max<int64_t>(total, 1));
    for (int64_t l = 0; l < L; ++l) {
        Layer& y = layers_[size_t(l)];
        if (y.width == 0) continue;
        y.k = kv_.data() + off[size_t(l)];
        y.v = y.k + num_blocks * block_size * y.width;
    }
    // every table entry starts at block 0 (the scratch block): a stale read never leaves the pool
    table_ = cuda::DeviceBuffer<int32_t>((max_slots + 1) * max_blocks_);
    CUDA_CHECK(cudaMemset(table_.data(), 0, table_.bytes()));
    HYDRA_CHECK(reserve(scratch_slot(), 1, nullptr), "paged KV pool: no block for the scratch slot");
    CUDA_CHECK(cudaDeviceSynchronize());
}

void PagedKvPool::upload(int32_t slot, int64_t from, cudaStream_t stream) {
    const std::vector<int32_t>& b = slots_[size_t(slot)];
    if (int64_t(b.size()) <= from) return;
    CUDA_CHECK(cudaMemcpyAsync(table_.data() + int64_t(slot) * max_blocks_ + from, b.data() + from,
                               (b.size() - size_t(from)) * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
}

bool PagedKvPool::reserve(int32_t slot, int64_t positions, cudaStream_t stream) {
    HYDRA_ASSERT(slot >= 0 && slot <= max_slots_, "paged KV pool: slot {}", slot);
    HYDRA_CHECK(positions <= max_blocks_ * block_size_,
                "paged KV pool: {} positions exceed the context of {}", positions, max_blocks_ * block_size_);
    std::vector<int32_t>& b = slots_[size_t(slot)];
    const int64_t need = (positions + block_size_ - 1) / block_size_, have = int64_t(b.size());
    if (need <= have) return true;
    if (!refs_->take(need - have, b)) return false;
    upload(slot, have, stream);
    return true;
}

void PagedKvPool::release(int32_t slot) {
    std::vector<int32_t>& b = slots_[size_t(slot)];
    refs_->drop(b);
    b.clear();
}

std::vector<int32_t> PagedKvPool::share(int32_t slot, int64_t n) {
    const std::vector<int32_t>& b = slots_[size_t(slot)];
    HYDRA_ASSERT(n <= int64_t(b.size()), "paged KV pool: sharing {} of {} blocks", n, b.size());
    std::vector<int32_t> out(b.begin(), b.begin() + n);
    refs_->add(out);
    return out;
}

void PagedKvPool::adopt(int32_t slot, std::span<const int32_t> blocks, cudaStream_t stream) {
    std::vector<int32_t>& b = slots_[size_t(slot)];
    HYDRA_ASSERT(b.empty(), "paged KV pool: adopting blocks into slot {} that holds {}", slot, b.size());
    HYDRA_CHECK(int64_t(blocks.size()) <= max_blocks_, "paged KV pool: {} blocks exceed the table",
                blocks.size());
    refs_->add(blocks);
    b.assign(blocks.begin(), blocks.end());
    upload(slot, 0, stream);
}

}  // namespace hydra::gpu
