// Attention of a prompt chunk over its sequence's keys / values on the GPU, for inference: T new queries at
// positions pos0 .. pos0 + T - 1 of ONE sequence, causal over its contiguous K / V rows [0, pos0 + T) (the
// chunk's own rows already written there):
//   o[t, h] = softmax_{j <= pos0 + t}(scale q[t, h] . k[j, kv(h)]) v[j, kv(h)]
// The prefill from position 0 (pos0 = 0) and a prompt continued after cached tokens (pos0 > 0) in one pass.
// GpuForward's cache mode runs it over a GpuCache layer; the serving backend over paged K / V gathered into
// a contiguous scratch.
//
// Backends, chosen per call:
//   cuDNN's fused flash engine (ops/cuda/cudnn_attention.h, forward_inference: forward only, no softmax
//   statistics, the causal mask aligned bottom-right when pos0 > 0) where cuDNN loads and runs the shape;
//   otherwise ours: the flash kernel (ops/cuda/attention.h), for pos0 > 0 with a query offset (AttnShape::S);
//   HYDRA_PREFILL_OFFSET=decode / set_flash_offset(false) runs the decode kernel (gpu/decode_attention.h)
//   once per query row instead (the reference path: one row at a time, ~150x slower for a 32K prompt in 8K
//   chunks).
// HYDRA_PREFILL_ATTN = cudnn | own | auto (default) forces one (benchmarks, tests); `cudnn` fails with
// cuDNN's reason where it cannot run a shape instead of falling back. Under auto cuDNN plans a shape when it
// first sees it, or, with HYDRA_PREFILL_CUDNN_AFTER=N, after N sightings on our kernels
// (gpu/plan_admission.h: a plan costs far more than one attention).
//
// Layouts: q (T, n_fa, Dh) bf16, rows ld_q elements apart (0: packed n_fa * Dh; e.g. the fused projection
// row); k, v (>= pos0 + T, n_kv, Dh) bf16, packed rows; o (T, n_fa, Dh) bf16 packed, OVERWRITTEN.
// kv_index (n_fa) int32 in DEVICE memory, the KV slot of each FA head (any map); with uniform_groups head h
// reads slot h / (n_fa / n_kv) and kv_index may be null. `windows` (gpu/decode_attention.h): sliding-window
// heads, each query seeing its head's last W keys plus the first `sinks`; they always run our kernels (cuDNN
// has no sink mask). Dh 64 or 128. Asynchronous on `stream`; the object
// owns grow-only scratch (and cuDNN's plans, built once per (T, pos0 + T) shape): one per stream, not
// thread-safe. Invalid arguments: hydra::Error.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/decode_attention.h"
#include "gpu/plan_admission.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/device_arena.h"

namespace hydra::gpu {

class PrefillAttention {
  public:
    enum class Backend { Auto, Cudnn, Own };
    // HYDRA_PREFILL_ATTN (auto when unset); hydra::Error naming the accepted values otherwise.
    static Backend backend_from_env();

    explicit PrefillAttention(Backend backend = backend_from_env());

    void forward(__nv_bfloat16* o, const __nv_bfloat16* q, int64_t ld_q, const __nv_bfloat16* k,
                 const __nv_bfloat16* v, const int32_t* kv_index, bool uniform_groups, int64_t T,
                 int64_t pos0, int64_t n_fa, int64_t n_kv, int64_t Dh, float scale, cudaStream_t stream,
                 const DecodeWindows& windows = {});

    Backend backend() const { return backend_; }
    // Sightings of a shape before auto uses cuDNN for it (gpu/plan_admission.h).
    void set_cudnn_after(int64_t sightings) { admission_ = PlanAdmission(sightings); }
    void set_backend(Backend b) { backend_ = b; }
    // Our path for queries after cached keys (pos0 > 0): the flash kernel with a query offset
    // (cuda::AttnShape::S, the default), or the decode kernel once per query row
    // (HYDRA_PREFILL_OFFSET=decode).
    void set_flash_offset(bool on) { flash_offset_ = on; }
    bool flash_offset() const { return flash_offset_; }
    // What the last forward() ran: "cudnn", "flash", "flash-offset" or "decode"; and, when it was not
    // cuDNN, why.
    const char* last_path() const { return last_path_; }
    const std::string& cudnn_reason() const { return cudnn_reason_; }

  private:
    bool try_cudnn(__nv_bfloat16* o, const __nv_bfloat16* q, int64_t ld_q, const __nv_bfloat16* k,
                   const __nv_bfloat16* v, const int32_t* kv_index, bool uniform_groups, int64_t T,
                   int64_t pos0, int64_t n_fa, int64_t n_kv, int64_t Dh, float scale, cudaStream_t stream);
    void own(__nv_bfloat16* o, const __nv_bfloat16* q, int64_t ld_q, const __nv_bfloat16* k,
             const __nv_bfloat16* v, const int32_t* kv_index, bool uniform_groups, int64_t T, int64_t pos0,
             int64_t n_fa, int64_t n_kv, int64_t Dh, float scale, cudaStream_t stream,
             const DecodeWindows& windows);
    // q packed into qbuf_ when ld_q is not the packed width
    const __nv_bfloat16* packed_q(const __nv_bfloat16* q, int64_t ld_q, int64_t T, int64_t width,
                                  cudaStream_t stream);
    // the device map h -> h / (n_fa / n_kv) for the decode kernel when the caller gives none
    const int32_t* uniform_index(int64_t n_fa, int64_t n_kv, cudaStream_t stream);

    Backend backend_;
    bool flash_offset_ = true;
    PlanAdmission admission_;
    cuda::CudnnAttention cudnn_;
    const char* last_path_ = "";
    std::string cudnn_reason_;
    cuda::DeviceBuffer<__nv_bfloat16> qbuf_, kdup_, vdup_;
    cuda::DeviceBuffer<float> lse_, partials_;
    cuda::DeviceBuffer<int32_t> index_;
    std::vector<int32_t> index_host_;  // what index_ holds
};

}  // namespace hydra::gpu
