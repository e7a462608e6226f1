// BlockRefs: reference counts and the free list of a paged KV pool's blocks (gpu/paged_kv_pool.h). A block
// is taken with one reference (a slot's), gains one per prefix snapshot or restored slot that shares it, and
// returns to the free list when its last reference goes. Host logic only (no CUDA, CPU-tested); thread-safe,
// since snapshots may be dropped on any thread. Misuse (sharing a free block, dropping one twice) throws.
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "core/error.h"

namespace hydra::gpu {

class BlockRefs {
  public:
    // Blocks 0 .. num_blocks - 1, all free; take() hands out the lowest ids first.
    explicit BlockRefs(int64_t num_blocks) : refs_(size_t(num_blocks), 0) {
        HYDRA_CHECK(num_blocks >= 0 && num_blocks < (int64_t(1) << 31), "KV blocks: {}", num_blocks);
        free_.reserve(size_t(num_blocks));
        for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
    }

    // n free blocks (one reference each) appended to out, or false and nothing taken when fewer are free.
    bool take(int64_t n, std::vector<int32_t>& out) {
        std::lock_guard<std::mutex> lock(mu_);
        if (n < 0 || n > int64_t(free_.size())) return false;
        for (int64_t i = 0; i < n; ++i) {
            const int32_t b = free_.back();
            free_.pop_back();
            refs_[size_t(b)] = 1;
            out.push_back(b);
        }
        return true;
    }

    // One more reference on each block (all must be held).
    void add(std::span<const int32_t> blocks) {
        std::lock_guard<std::mutex> lock(mu_);
        for (int32_t b : blocks) HYDRA_CHECK(held(b), "KV block {} shared while free", b);
        for (int32_t b : blocks) ++refs_[size_t(b)];
    }

    // One reference less on each block; a block is free again at zero.
    void drop(std::span<const int32_t> blocks) {
        std::lock_guard<std::mutex> lock(mu_);
        for (int32_t b : blocks) {
            HYDRA_CHECK(held(b), "KV block {} released while free", b);
            if (--refs_[size_t(b)] == 0) free_.push_back(b);
        }
    }

    int64_t free_count() const {
        std::lock_guard<std::mutex> lock(mu_);
        return int64_t(free_.size());
    }
    int32_t refs(int32_t b) const {
        std::lock_guard<std::mutex> lock(mu_);
        return refs_.at(size_t(b));
    }
    int64_t num_blocks() const { return int64_t(refs_.size()); }

  private:
    bool held(int32_t b) const { return b >= 0 && size_t(b) < refs_.size() && refs_[size_t(b)] > 0; }

    mutable std::mutex mu_;
    std::vector<int32_t> refs_, free_;
};

}  // namespace hydra::gpu
