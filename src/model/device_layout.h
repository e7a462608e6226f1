// DeviceLayout: where each tensor of a LlamaModel's parameter arena (core/param_arena.h, the host and
// checkpoint layout) lives in the ONE device arena that GPU training and GPU inference share
// (gpu/gpu_train_model.h). Host logic only (no CUDA), so the permutation is unit-tested on the CPU.
//
// The host arena keeps LlamaModel's declaration order, where o_proj sits between the FA and the LA
// projections and g after a|b; inference wants every projection that reads a layer's normed input in ONE
// matrix (one GEMM per decode step). So the device arena is ordered by how the tensors are read:
//
//   [bf16 region, per layer l]  proj block  (proj_cols, C) rows [q | k | v | la_q | la_k | la_v | la_g |
//                                           la_a | la_b] (the parts the layer has), then zero rows up to a
//                                           multiple of kProjRowMultiple (aligned GEMM output rows)
//                               o_proj (C, H*Dh); gate | up (2F, C) back to back; down (C, F)
//                               lm_head (V, C) when untied
//   [both]                      embedding (V, C): fp32 for the row gather, bf16 as the tied LM head
//   [fp32 region]               per layer in arena order: the projection biases as one (proj_cols) block at
//                               the proj block's row offsets (zeros where a part has none), norms, conv taps,
//                               A_log, dt_bias, o_norm, fusion scales; then the final norm and anything else
//
// Every group starts at a multiple of kAlign elements; padding is zero and belongs to no tensor. Inside a
// group, parts are back to back, so GEMMs over adjacent weights (q|k|v, la q|k|v, a|b, gate|up, the whole
// proj block) read one matrix. A training model keeps fp32 master, bf16 mirror and fp32 gradients over the
// whole device arena; an inference-only model needs the bf16 mirror of [0, bf16_end()) and the fp32 values
// of [f32_begin(), numel()) only (no fp32 copy of the GEMM matrices, no bf16 copy of the vectors).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/param_arena.h"
#include "model/llama_model.h"
#include "model/model_config.h"

namespace hydra {

// One arena entry in both layouts.
struct DeviceTensor {
    int64_t host = 0;    // element offset in the host ParamArena
    int64_t device = 0;  // element offset in the device arena
    int64_t size = 0;    // elements (without padding)
};

// A layer's fused projection: rows of each part inside the (proj_cols, C) block (0 rows where absent).
struct DeviceProjBlock {
    int64_t offset = 0;     // device offset of row 0
    int64_t bias = -1;      // device offset of the (proj_cols) fp32 bias block; -1: the layer has no biases
    int64_t used_rows = 0;  // rows holding weights
    int64_t proj_cols =
        0;  // used_rows rounded up to a multiple of kProjRowMultiple (the GEMM's output width)
    int64_t q = 0, k = 0, v = 0, la_q = 0, la_k = 0, la_v = 0, la_g = 0, la_a = 0, la_b = 0;  // first rows
};

class DeviceLayout {
  public:
    static constexpr int64_t kAlign = 128;           // elements: 256 bytes of bf16, 512 of fp32
    static constexpr int64_t kProjRowMultiple = 64;  // proj_cols multiple: 128-byte aligned bf16 output rows

    // entries: the host arena's table (names as LlamaModel declares them), host_numel its size with padding.
    // Throws hydra::Error when an entry overlaps another or lies outside the arena, or a projection's
    // shape does not fit (matrix (rows, hidden), bias (rows) of its matrix).
    DeviceLayout(const ModelConfig& config, const std::vector<ArenaEntry>& entries, int64_t host_numel);
    explicit DeviceLayout(const LlamaModel& model)
        : DeviceLayout(model.config(), model.params().entries(), model.params().numel()) {}

    int64_t numel() const { return numel_; }  // device arena elements, padding included
    int64_t host_numel() const { return host_numel_; }
    const std::vector<DeviceTensor>& tensors() const { return tensors_; }  // host entries' order
    // Device offset of the entry starting at host offset `host` (-1 for host < 0); throws when no entry does.
    int64_t device_offset(int64_t host) const;
    const DeviceProjBlock& proj(int64_t layer) const { return proj_[size_t(layer)]; }
    int64_t max_proj_cols() const { return max_proj_cols_; }
    // [0, bf16_end): what is read as bf16 (GEMM matrices, the LM head); [f32_begin, numel): what is read
    // as fp32 (the embedding, parameter vectors). They overlap on a tied embedding.
    int64_t bf16_end() const { return bf16_end_; }
    int64_t f32_begin() const { return f32_begin_; }

    // host arena (host_numel) -> device order (numel; padding set to zero), and back (host padding
    // untouched).
    void to_device(const float* host, float* device) const;
    void to_host(const float* device, float* host) const;

  private:
    int64_t numel_ = 0, host_numel_ = 0, max_proj_cols_ = 0, bf16_end_ = 0, f32_begin_ = 0;
    std::vector<DeviceTensor> tensors_;
    std::vector<DeviceProjBlock> proj_;
    std::unordered_map<int64_t, size_t> by_host_;  // host offset -> tensors_ index
};

}  // namespace hydra
