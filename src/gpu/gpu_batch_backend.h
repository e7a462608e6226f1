// GpuBatchBackend: serve::BatchBackend (serve/batch_backend.h) on one GPU, the engine of
// `hydra serve --device cuda`'s continuous batching. Holds up to max_slots sequences; their caches are
//   FA keys / values: blocks of block_size positions from one pool (gpu/paged_kv_pool.h), reserved on
//                     demand, reference-counted so prefix snapshots share full blocks with their users;
//   GDN state:        one fixed slot per sequence (gpu/gdn_state_slots.h): recurrent state + conv windows.
// A step's rows run by kind:
//   decode rows (one token each): ONE batched pass for all of them through gpu/gpu_decoder_layer's batched
//     mode (GpuLayerBatch): embedding gather, per layer one projection GEMM for all rows, RoPE at each row's
//     position, K/V into each row's block, paged decode attention (gpu/paged_decode_attention.h), the GDN
//     decode step and conv through each row's slot, fusion, o_proj, FFN; final norm and LM head for all
//     rows. The rows are padded to a batch-size bucket (1, 2, 4, ..., 256; padding rows decode token 0 at
//     position 0 of a scratch slot) and the pass replays a CUDA graph per (bucket, attention splits),
//     captured on first use; what changes per step (token ids, positions, slots) is copied to device memory
//     before the replay, and block tables are uploaded when blocks are reserved. Eager runs (graphs off, or a
//     capture that failed) issue the same padded launches, so graphs and eager give the same logits.
//   prefill rows (T > 1): the one-sequence path (gpu/gpu_forward.h: flash attention over the prompt, the GDN
//     chunked forward) on a scratch one-sequence cache (gpu/gpu_cache.h), whose new K/V rows are then copied
//     into the slot's blocks and whose GDN state and windows into its slot. A row at pos0 > 0 (chunked
//     prefill, a prefix-cache hit continued) first copies the slot's rows [0, pos0) and state into the
//     scratch cache; GpuForward then continues it in one pass (its attention over the cached rows runs the
//     decode kernel per query row, so `hydra serve --device cuda` prefills whole prompts by default).
// Snapshots end on block boundaries (snapshot_granularity() = block_size): the slot's full blocks (shared,
// one more reference) and a device copy of its GDN slot.
//
// A row's logits come from the same kernels whatever the other rows are. In buckets of up to 4 rows the
// projections run on row_gemv (ops/cuda/row_gemv.h), which sums each row alone: a sequence gets the bits
// it gets by itself; in larger buckets cuBLAS's choice of GEMM algorithm for the row count can move the
// low bits. Not thread-safe (the scheduler's one thread
// drives it); snapshots may be destroyed on any thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "gpu/cuda_graph.h"
#include "gpu/gdn_state_slots.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_decoder_layer.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu/paged_kv_pool.h"
#include "ops/cuda/gemm.h"
#include "serve/batch_backend.h"

namespace hydra::gpu {

struct GpuBatchOptions {
    int64_t max_slots = 64;  // sequences held at once
    int64_t context = 8192;  // positions per sequence
    size_t cache_bytes = 0;  // KV blocks + GDN state slots; 0 = most of the device memory free after the rest
    int64_t block_size = 16;  // positions per KV block (and the snapshot granularity)
};

class GpuBatchBackend final : public serve::BatchBackend {
  public:
    static constexpr int64_t kMaxBucket = 256;  // rows of one batched pass (more are run in passes of 256)

    // `model` must outlive the backend (the second form owns it).
    GpuBatchBackend(const GpuTrainModel& model, const GpuBatchOptions& options);
    GpuBatchBackend(std::unique_ptr<GpuTrainModel> model, const GpuBatchOptions& options);
    ~GpuBatchBackend() override;
    GpuBatchBackend(const GpuBatchBackend&) = delete;
    GpuBatchBackend& operator=(const GpuBatchBackend&) = delete;

    int64_t vocab_size() const override;
    int64_t max_slots() const override { return max_slots_; }
    int64_t context() const override { return context_; }
    int32_t acquire() override;
    void release(int32_t slot) override;
    int64_t pos(int32_t slot) const override;
    bool reserve(int32_t slot, int64_t positions) override;
    void step(std::span<const serve::StepRow> rows, std::vector<float>& logits) override;
    int64_t snapshot_granularity() const override { return pool_->block_size(); }
    std::shared_ptr<const serve::PrefixSnapshot> snapshot(int32_t slot) override;
    void restore(int32_t slot, const serve::PrefixSnapshot& snapshot) override;
    serve::CacheUsage usage() const override;

    // One batched decode step of B <= kMaxBucket rows (distinct acquired slots, each reserved for one more
    // position), leaving the logits (B, V) fp32 on the device (valid until the next call); asynchronous on
    // stream(). step() runs its decode rows through this; benchmarks time it alone.
    const float* decode_on_device(std::span<const int32_t> slots, std::span<const int32_t> tokens);

    // Benchmarks only: the slot (acquired, reserved for pos + 1) counts as holding `pos` positions whatever
    // its cache holds (timing of long contexts without prefilling them).
    void assume_filled(int32_t slot, int64_t pos);

    cudaStream_t stream() const { return fwd_->stream(); }
    const PagedKvPool& kv_pool() const { return *pool_; }
    size_t kv_bytes_per_position() const { return pool_->bytes_per_block() / size_t(pool_->block_size()); }
    size_t state_bytes_per_slot() const { return states_->slot_bytes(); }

    // CUDA graphs for the decode pass: on by default unless HYDRA_CUDA_GRAPHS is 0/off/false/no.
    void set_cuda_graphs(bool on) {
        graphs_on_ = on;
        fwd_->set_cuda_graphs(on);
    }
    bool cuda_graphs() const { return graphs_on_; }
    struct GraphStats {
        int64_t captures = 0, replays = 0, eager = 0, fallbacks = 0;
        double capture_seconds = 0;
    };
    const GraphStats& graph_stats() const { return stats_; }

  private:
    struct Slot {
        bool used = false;
        int64_t pos = 0, reserved = 0;
    };
    void init(const GpuBatchOptions& options);
    const Slot& slot_checked(int32_t slot) const;
    // The decode pass of Bp (a bucket) rows over the device inputs (ids, pos, slots), key splits per row.
    void decode_pass(int64_t Bp, int64_t splits);
    void layer(int64_t l, int64_t Bp, int64_t splits);
    void prefill_row(int32_t slot, std::span<const int32_t> tokens, int64_t n_logits, float* out);

    // Layer resources: inference without a backward (GpuForward's own run the prefill rows).
    struct NoResources final : GpuLayerResources {
        cuda::CudnnAttention* cudnn_attention(const cuda::AttnShape&) override { return nullptr; }
        cuda::AttnWorkspace& attn_workspace(int64_t, int64_t, const GpuLayerShape&) override;
        cuda::GdnWorkspace& gdn_workspace(int64_t, int64_t, const GpuLayerShape&, bool) override;
    };

    std::unique_ptr<GpuTrainModel> owned_;
    const GpuTrainModel& model_;
    int64_t max_slots_ = 0, context_ = 0, max_bucket_ = 0, ctx_splits_ = 0;
    std::unique_ptr<GpuForward> fwd_;  // the prefill rows' path, and the stream everything runs on
    std::unique_ptr<GpuCache> scratch_;
    std::unique_ptr<PagedKvPool> pool_;
    std::unique_ptr<GdnStateSlots> states_;
    std::unique_ptr<cuda::BlasContext> blas_;
    cuda::RopeFreqs rope_freqs_;
    std::vector<GpuLayerWeights> weights_;
    NoResources res_;
    StepProfiler prof_;
    std::vector<Slot> slots_;

    // the decode pass's fixed buffers (never moved while graphs exist), sized for max_bucket_ rows
    cuda::DeviceBuffer<int32_t> in_;  // ids | pos | slots, max_bucket_ each
    cuda::DeviceBuffer<float> x_, gates_, partials_, logits_;
    cuda::DeviceBuffer<bf16> xn_, proj_, la_qkv_, la_o_, heads_, gu_, act_;
    int32_t* host_in_[2] = {nullptr, nullptr};  // pinned staging of the step inputs, used in turn
    cudaEvent_t in_done_[2] = {nullptr, nullptr};
    int turn_ = 0;
    float* host_logits_ = nullptr;  // pinned (max_bucket_, V)

    bool graphs_on_ = true;
    GraphStats stats_;
    std::map<std::pair<int64_t, int64_t>, CudaGraph> graphs_;  // (bucket, splits) -> graph
};

}  // namespace hydra::gpu
