// GpuTrainModel: a LlamaModel's parameter arena on the device for training (and the teacher's forward):
// fp32 master weights, a bf16 mirror at the same offsets (the GEMM operands) and, for a student, an fp32
// gradient arena at the same offsets, so the optimizer, checkpoints and the CPU see one flat buffer each
// (DESIGN.md §3). Per layer, TrainLayerOffsets names where each tensor sits, and the FA-head -> KV-slot
// map of head-granularity plans lives on the device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <set>
#include <vector>

#include "model/llama_model.h"
#include "ops/cuda/device_arena.h"

namespace hydra::gpu {

using bf16 = __nv_bfloat16;

// Element offsets of one layer's tensors in the parameter arena (-1: the plan has no such tensor).
struct TrainLayerOffsets {
    int64_t n_fa = 0, n_kv = 0, n_la = 0;
    int64_t attn_norm = -1, wq = -1, wk = -1, wv = -1, wo = -1, bq = -1, bk = -1, bv = -1;
    int64_t q_norm = -1, k_norm = -1;  // (Dh) each, qk_norm models
    // FA head h reads KV slot h / (n_fa / n_kv) (the attention kernels' GQA grouping); else K/V are
    // duplicated per head through kv_index before attention
    bool uniform_groups = true;
    const int32_t* kv_index = nullptr;  // (n_fa) device: KV slot of each FA head (null without FA heads)
    int64_t la_wq = -1, la_wk = -1, la_wv = -1, la_bq = -1, la_bk = -1, la_bv = -1;
    int64_t la_wa = -1, la_wb = -1, la_wg = -1, conv_q = -1, conv_k = -1, conv_v = -1;
    int64_t A_log = -1, dt_bias = -1, o_norm = -1;
    int64_t head_scale = -1, fa_scale = -1, la_scale = -1;
    int64_t ffn_norm = -1, w_gate = -1, w_up = -1, w_down = -1;
};

// A LlamaModel's parameter arena on the device: fp32 master, bf16 mirror (same offsets) and, for a
// student, an fp32 gradient arena (same offsets). Not copyable.
class GpuTrainModel {
  public:
    // Uploads `model` (config, plan and arena layout are copied). Throws for unsupported shapes.
    GpuTrainModel(const LlamaModel& model, bool with_grads, cudaStream_t stream = nullptr);
    GpuTrainModel(const GpuTrainModel&) = delete;
    GpuTrainModel& operator=(const GpuTrainModel&) = delete;

    const ModelConfig& config() const { return config_; }
    const HybridPlan& plan() const { return plan_; }
    const std::vector<ArenaEntry>& entries() const { return entries_; }
    int64_t numel() const { return n_; }
    int64_t parameter_count() const { return n_params_; }
    const TrainLayerOffsets& layer(int64_t l) const { return layers_[size_t(l)]; }
    int64_t embed_offset() const { return embed_; }
    int64_t final_norm_offset() const { return final_norm_; }
    int64_t lm_head_offset() const { return lm_head_; }

    float* master() const { return master_.data(); }
    bf16* mirror() const { return mirror_.data(); }
    float* grads() const { return grads_.data(); }  // null without gradients

    // fp32 master / bf16 mirror / gradient pointer of the tensor at `offset` (null for offset < 0; grad()
    // also null when the model has no gradients or the tensor is frozen).
    const float* p32(int64_t offset) const { return offset < 0 ? nullptr : master_.data() + offset; }
    const bf16* p16(int64_t offset) const { return offset < 0 ? nullptr : mirror_.data() + offset; }
    float* grad(int64_t offset) const;

    // One flag per arena entry (entries() order; empty = all trainable): frozen tensors get no gradient.
    void set_trainable(const std::vector<char>& per_entry);
    bool trainable(int64_t offset) const { return offset >= 0 && !frozen_.count(offset); }

    // Re-uploads the weights from a host arena of numel() floats (master and mirror).
    void upload(const float* host, cudaStream_t stream = nullptr);
    // Synchronous copies of the fp32 master / gradients into host arrays of numel() floats.
    void download_params(float* host, cudaStream_t stream = nullptr) const;
    void download_grads(float* host, cudaStream_t stream = nullptr) const;
    void zero_grads(cudaStream_t stream = nullptr);
    size_t device_bytes() const { return master_.bytes() + mirror_.bytes() + grads_.bytes(); }

  private:
    ModelConfig config_;
    HybridPlan plan_;
    std::vector<ArenaEntry> entries_;
    int64_t n_ = 0, n_params_ = 0;
    std::vector<TrainLayerOffsets> layers_;
    int64_t embed_ = -1, final_norm_ = -1, lm_head_ = -1;
    std::set<int64_t> frozen_;
    cuda::DeviceBuffer<float> master_, grads_;
    cuda::DeviceBuffer<bf16> mirror_;
    cuda::DeviceBuffer<int32_t> kv_index_;  // every layer's FA-head -> KV-slot map, back to back
};

}  // namespace hydra::gpu
