// CpuBatchBackend: serve::BatchBackend on the CPU. Every slot owns one KVCache (model/kv_cache.h) sized
// by its reservation, and step() runs each row through the one CPU forward (model/llama_forward.h) on
// its own cache, so a row's result never depends on the other rows of the step. Single-token rows use
// the quantized decode path exactly as hydra::generate() does, so greedy output through the scheduler
// equals `hydra generate` token for token. Snapshots copy KV rows [0, pos) and the GDN states
// (granularity 1: any position). Not thread-safe: one thread (the scheduler's) drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "serve/batch_backend.h"

namespace hydra::serve {

class CpuBatchBackend : public BatchBackend {
  public:
    // `model` must outlive the backend. context: positions one sequence may hold (<= the model's
    // max_position_embeddings when it has one); cache_bytes: KV + state memory all slots may reserve.
    CpuBatchBackend(const LlamaModel& model, int64_t max_slots, int64_t context, size_t cache_bytes);

    int64_t vocab_size() const override;
    int64_t max_slots() const override { return int64_t(slots_.size()); }
    int64_t context() const override { return context_; }

    int32_t acquire() override;
    void release(int32_t slot) override;
    int64_t pos(int32_t slot) const override;
    bool reserve(int32_t slot, int64_t positions) override;

    void step(std::span<const StepRow> rows, std::vector<float>& logits) override;

    int64_t snapshot_granularity() const override { return 1; }
    std::shared_ptr<const PrefixSnapshot> snapshot(int32_t slot) override;
    void restore(int32_t slot, const PrefixSnapshot& snapshot) override;

    CacheUsage usage() const override;

    // Bytes a slot reserved for `positions` positions takes (KV rows + the constant GDN state).
    size_t bytes_for(int64_t positions) const { return size_t(positions) * bytes_per_token_ + state_bytes_; }

  private:
    struct Slot {
        bool used = false;
        std::unique_ptr<KVCache> cache;  // null until reserved
        int64_t reserved = 0;
    };
    Slot& slot_at(int32_t slot);
    const Slot& slot_at(int32_t slot) const;
    size_t used_bytes() const;

    const LlamaModel& model_;
    int64_t context_;
    size_t cache_bytes_;
    size_t bytes_per_token_ = 0, state_bytes_ = 0;
    std::vector<Slot> slots_;
};

}  // namespace hydra::serve
