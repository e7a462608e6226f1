// GpuTrainModel: a LlamaModel's parameters on the device, in the ONE device layout that GPU training and
// GPU inference share (model/device_layout.h: per layer the fused projection block, o_proj, gate|up, down;
// the LM head and embedding; then the fp32 parameter vectors). Two kinds:
//   with gradients (the student): fp32 master, bf16 mirror (the GEMM operands) and an fp32 gradient arena,
//     each over the whole device arena at the same offsets, so the optimizer runs over flat buffers;
//   without (inference, scoring, generation, the frozen teacher): only what the forward reads, the bf16
//     mirror of the matrices (device_layout's bf16 region) and the fp32 values of the embedding and the
//     parameter vectors (its fp32 region): no fp32 copy of the GEMM matrices.
// Offsets below are device offsets; upload / download / set_trainable speak the host arena's layout (the
// checkpoint layout) and translate. Per layer, TrainLayerOffsets names where each tensor sits, and the
// FA-head -> KV-slot map of head-granularity plans lives on the device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <set>
#include <vector>

#include "model/device_layout.h"
#include "model/llama_model.h"
#include "ops/cuda/device_arena.h"

namespace hydra::gpu {

using bf16 = __nv_bfloat16;

// Device element offsets of one layer's tensors (-1: the plan has no such tensor).
struct TrainLayerOffsets {
    int64_t n_fa = 0, n_kv = 0, n_la = 0;
    int64_t attn_norm = -1, wq = -1, wk = -1, wv = -1, wo = -1, bq = -1, bk = -1, bv = -1;
    int64_t q_norm = -1, k_norm = -1;  // (Dh) each, qk_norm models
    // FA head h reads KV slot h / (n_fa / n_kv) (the attention kernels' GQA grouping); else K/V are
    // duplicated per head through kv_index before attention
    bool uniform_groups = true;
    const int32_t* kv_index = nullptr;  // (n_fa) device: KV slot of each FA head (null without FA heads)
    // (n_fa) device: each FA head's sliding window (0 = full), null when the layer has none; and the sinks
    const int32_t* fa_window = nullptr;
    int64_t window_sinks = 0;
    int64_t la_wq = -1, la_wk = -1, la_wv = -1, la_bq = -1, la_bk = -1, la_bv = -1;
    int64_t la_wa = -1, la_wb = -1, la_wg = -1, conv_q = -1, conv_k = -1, conv_v = -1;
    int64_t A_log = -1, dt_bias = -1, o_norm = -1;
    int64_t head_scale = -1, fa_scale = -1, la_scale = -1, la_bias = -1;
    int64_t ffn_norm = -1, w_gate = -1, w_up = -1, w_down = -1;
};

// A LlamaModel's parameters on the device (see the top of this file). Not copyable.
class GpuTrainModel {
  public:
    // Uploads `model` (config, plan and arena layout are copied; the LlamaModel may go away afterwards).
    // with_grads: the training kind (master, mirror, gradients), else weights only. Throws hydra::Error when
    // no CUDA device is usable or the shapes are unsupported.
    GpuTrainModel(const LlamaModel& model, bool with_grads, cudaStream_t stream = nullptr);
    GpuTrainModel(const GpuTrainModel&) = delete;
    GpuTrainModel& operator=(const GpuTrainModel&) = delete;

    const ModelConfig& config() const { return config_; }
    const HybridPlan& plan() const { return plan_; }
    const std::vector<ArenaEntry>& entries() const { return entries_; }  // host arena entries (host offsets)
    const DeviceLayout& layout() const { return layout_; }
    int64_t numel() const { return layout_.numel(); }            // device arena elements
    int64_t host_numel() const { return layout_.host_numel(); }  // host arena elements (checkpoint layout)
    int64_t parameter_count() const { return n_params_; }
    bool has_master() const { return f32_begin_ == 0; }  // fp32 master and mirror over the whole arena
    // The device offset of the host arena entry starting at host offset `host` (-1 for host < 0).
    int64_t device_offset(int64_t host) const { return layout_.device_offset(host); }
    const TrainLayerOffsets& layer(int64_t l) const { return layers_[size_t(l)]; }
    int64_t embed_offset() const { return embed_; }
    int64_t final_norm_offset() const { return final_norm_; }
    int64_t lm_head_offset() const { return lm_head_; }

    // The whole arena's fp32 master / bf16 mirror / gradients (training kind; master and grads null
    // otherwise).
    float* master() const { return has_master() ? master_.data() : nullptr; }
    bf16* mirror() const { return mirror_.data(); }
    float* grads() const { return grads_.data(); }  // null without gradients

    // fp32 / bf16 / gradient pointer of the tensor at device `offset` (null for offset < 0; grad() also null
    // when the model has no gradients or the tensor is frozen). Without gradients, p32 serves the fp32
    // region and p16 the bf16 region of the layout only.
    const float* p32(int64_t offset) const;
    const bf16* p16(int64_t offset) const;
    float* grad(int64_t offset) const;

    // One flag per arena entry (entries() order; empty = all trainable): frozen tensors get no gradient.
    void set_trainable(const std::vector<char>& per_entry);
    bool trainable(int64_t offset) const { return offset >= 0 && !frozen_.count(offset); }

    // Re-uploads the weights from a host arena of host_numel() floats.
    void upload(const float* host, cudaStream_t stream = nullptr);
    // Synchronous copies of the fp32 master / gradients into host arenas of host_numel() floats (training
    // kind; the host arena's padding is left as it is).
    void download_params(float* host, cudaStream_t stream = nullptr) const;
    void download_grads(float* host, cudaStream_t stream = nullptr) const;
    void zero_grads(cudaStream_t stream = nullptr);
    size_t device_bytes() const {
        return master_.bytes() + mirror_.bytes() + grads_.bytes() + kv_index_.bytes();
    }

    // Per-tensor copies between an array in host arena order (host_numel) and one in device order (numel),
    // e.g. the optimizer moments; padding on either side is left as it is. Synchronous (`stream` first).
    void to_device(float* device, const float* host, cudaStream_t stream = nullptr) const;
    void to_host(float* host, const float* device, cudaStream_t stream = nullptr) const;

  private:
    ModelConfig config_;
    HybridPlan plan_;
    std::vector<ArenaEntry> entries_;
    DeviceLayout layout_;
    int64_t n_params_ = 0;
    int64_t f32_begin_ = 0;  // device offset of master_[0] (0: the training kind)
    std::vector<TrainLayerOffsets> layers_;
    int64_t embed_ = -1, final_norm_ = -1, lm_head_ = -1;
    std::set<int64_t> frozen_;
    cuda::DeviceBuffer<float> master_, grads_;  // master_: the whole arena, or its fp32 region
    cuda::DeviceBuffer<bf16> mirror_;           // the whole arena, or its bf16 region
    cuda::DeviceBuffer<int32_t> kv_index_;      // every layer's FA-head -> KV-slot map, back to back
    cuda::DeviceBuffer<int32_t> fa_window_;     // every windowed layer's per-FA-head windows, back to back
};

}  // namespace hydra::gpu
