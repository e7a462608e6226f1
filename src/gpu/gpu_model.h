// GpuModel: a LlamaModel (teacher or hybrid) uploaded to the GPU for inference. GEMM weights are the
// bf16 mirror of the fp32 arena (rounded to nearest even), in a plan-aware layout that fuses every
// projection reading the same input into one matrix; norm weights, conv taps, gates, fusion scales and
// biases stay fp32 ("small parameter vectors read as fp32", DESIGN.md §3); the embedding is kept in fp32
// too (a row gather into the fp32 residual, as the CPU does) and in bf16 as the tied LM head.
//
// Per layer, with C = hidden, Dh = head dim, F = ffn width, n_fa / n_kv / n_la = FA heads, FA KV
// groups, LA heads (model/llama_model.h), D_la = n_la * Dh:
//   w_proj    (P, C) bf16, P = n_fa*Dh + 2*n_kv*Dh + 4*D_la + 2*n_la, rows in the order
//             [q (n_fa*Dh) | k (n_kv*Dh) | v (n_kv*Dh) | la_q | la_k | la_v | la_z (D_la each) | la_a | la_b (n_la)]
//             (then zero rows up to a multiple of 64, so every output row starts 128-byte aligned)
//             so one GEMM (T, C) x (P, C)^T gives every projection of the layer's normed input; the
//             offsets of each part inside a (T, P) output row are in GpuLayer.
//   b_proj    (P) fp32 when the model has q/k/v biases (zeros for the rows without), else null
//   w_o       (C, H*Dh) bf16; w_gate_up (2F, C) bf16 = [gate; up]; w_down (C, F) bf16
// Every upload is checked (CUDA_CHECK inside ops/cuda/device_arena).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_bf16.h>

#include "model/hybrid_plan.h"
#include "model/llama_model.h"
#include "ops/cuda/device_arena.h"

namespace hydra::gpu {

using bf16 = __nv_bfloat16;

struct GpuLayer {
    int64_t n_fa = 0, n_kv = 0, n_la = 0;
    bool uniform_groups = true;  // FA head h reads KV slot h / (n_fa / n_kv) (attention kernel's grouping)
    // Column offsets inside a row of the fused projection output (width proj_cols).
    int64_t proj_cols = 0;
    int64_t off_q = 0, off_k = 0, off_v = 0;                  // FA heads
    int64_t off_lq = 0, off_lk = 0, off_lv = 0, off_lz = 0;  // LA heads: q, k, v, output gate z
    int64_t off_la = 0, off_lb = 0;                           // LA heads: decay and beta logits
    const bf16* w_proj = nullptr;     // (proj_cols, C)
    const float* b_proj = nullptr;    // (proj_cols) or null
    const bf16* w_o = nullptr;        // (C, H*Dh)
    const bf16* w_gate_up = nullptr;  // (2F, C)
    const bf16* w_down = nullptr;     // (C, F)
    const float* attn_norm = nullptr; // (C)
    const float* ffn_norm = nullptr;  // (C)
    const float* q_norm = nullptr;    // (Dh) or null (qk_norm models)
    const float* k_norm = nullptr;    // (Dh) or null
    const int32_t* kv_index = nullptr;  // (n_fa) device: KV slot of each FA head
    // LA heads (null when n_la == 0)
    const float *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr;  // (D_la, W)
    const float *A_log = nullptr, *dt_bias = nullptr;                     // (n_la)
    const float* o_norm = nullptr;                                        // (n_la, Dh)
    // fusion scales (null where the plan's kind has none)
    const float *fusion_head_scale = nullptr, *fusion_fa_scale = nullptr, *fusion_la_scale = nullptr;
};

class GpuModel {
public:
    // Uploads `model` (its config and plan are copied; the LlamaModel may go away afterwards).
    // Throws hydra::Error when no CUDA device is usable or the shapes are unsupported (head dim not 64/128).
    explicit GpuModel(const LlamaModel& model);

    const ModelConfig& config() const { return config_; }
    const HybridPlan& plan() const { return plan_; }
    const GpuLayer& layer(int64_t l) const { return layers_[size_t(l)]; }
    int64_t max_proj_cols() const { return max_proj_cols_; }

    const float* embedding() const { return embed_f32_; }  // (V, C) fp32
    const bf16* lm_head() const { return lm_head_; }        // (V, C) bf16
    const float* final_norm() const { return final_norm_; } // (C)

    size_t device_bytes() const { return w16_.bytes() + w32_.bytes() + idx_.bytes(); }

private:
    ModelConfig config_;
    HybridPlan plan_;
    std::vector<GpuLayer> layers_;
    int64_t max_proj_cols_ = 0;
    cuda::DeviceBuffer<bf16> w16_;
    cuda::DeviceBuffer<float> w32_;
    cuda::DeviceBuffer<int32_t> idx_;
    const float* embed_f32_ = nullptr;
    const bf16* lm_head_ = nullptr;
    const float* final_norm_ = nullptr;
};

// Throws hydra::Error naming the problem when this process sees no usable CUDA device; returns the
// name of device 0 otherwise.
std::string require_cuda_device();

}  // namespace hydra::gpu
