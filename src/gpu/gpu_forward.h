// Forward pass of a teacher or hybrid model on the GPU, the mirror of model/llama_forward.cpp with
// bf16 GEMM operands and activations between ops, fp32 residual stream, fp32 norms / softmax
// statistics / gates / GDN state (DESIGN.md §3). Per layer, for T new tokens at positions pos0.. :
//   x (T, C) fp32 -> rmsnorm -> xn bf16 -> ONE fused GEMM -> proj (T, P) bf16 (gpu_model.h layout)
//   FA heads: [q/k head norm] -> RoPE in place -> k, v rows into the cache (bf16)
//             prefill (pos0 = 0): flash attention (ops/cuda/attention.h) over the cache rows, K/V
//             duplicated per head first when the plan's groups are not uniform (head granularity)
//             T = 1: decode attention over the cache (gpu/decode_attention.h)
//   LA heads: short conv + SiLU on q/k/v (carried windows) -> gates g, beta -> GDN chunked forward with
//             h0/ht = the cached state (T > 1) or the decode step (T = 1) -> gated RMSNorm with z
//   heads (T, H, Dh) bf16 = [FA | LA] -> fusion (mixed layers) -> o_proj GEMM accumulated into x
//   -> rmsnorm -> fused gate_up GEMM -> SwiGLU -> down GEMM accumulated into x
// then the final RMSNorm and the LM head (fp32 logits) for the rows asked for. A prompt continued at
// pos0 > 0 with T > 1 runs as T single-token steps (the flash kernel has no offset; only decode needs it).
//
// One GpuForward owns a stream, a cuBLAS context and grow-only activation buffers; it is not
// thread-safe. Results are copied to the host synchronously; everything else is asynchronous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "gpu/gpu_cache.h"
#include "gpu/gpu_model.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gemm.h"

namespace hydra::gpu {

class GpuForward {
public:
    explicit GpuForward(const GpuModel& model);
    ~GpuForward();
    GpuForward(const GpuForward&) = delete;
    GpuForward& operator=(const GpuForward&) = delete;

    // tokens (T) at positions cache.pos().. appended to the cache. Returns the logits (V) of the last
    // position (gpu_forward_last_logits), of every position (T, V) row-major, or only the argmax of the
    // last position (greedy decoding: 4 bytes back from the device).
    std::vector<float> forward_last_logits(GpuCache& cache, std::span<const int32_t> tokens);
    std::vector<float> forward_all_logits(GpuCache& cache, std::span<const int32_t> tokens);
    int32_t forward_argmax(GpuCache& cache, std::span<const int32_t> tokens);

    cudaStream_t stream() const { return stream_; }
    const GpuModel& model() const { return model_; }

private:
    // Runs the layers and leaves the logits of the last `n_logits` positions in logits_ (n_logits, V).
    void run(GpuCache& cache, std::span<const int32_t> tokens, int64_t n_logits);
    void run_segment(GpuCache& cache, std::span<const int32_t> tokens, int64_t n_logits);
    void layer(int64_t l, GpuCache& cache, int64_t T, int64_t pos0);
    void ensure(int64_t T, int64_t n_logits, int64_t kv_len);
    cuda::GdnWorkspace& gdn_workspace(int64_t T, int64_t n_la);

    const GpuModel& model_;
    cudaStream_t stream_ = nullptr;
    std::unique_ptr<cuda::BlasContext> blas_;
    int64_t cap_T_ = 0, cap_logits_ = 0, cap_kv_ = 0;
    cuda::DeviceBuffer<int32_t> ids_, argmax_;
    cuda::DeviceBuffer<float> x_, lse_, gates_, rope_, partials_, logits_;
    cuda::DeviceBuffer<bf16> xn_, proj_, qbuf_, kdup_, vdup_, attn_, la_qkv_, la_o_, heads_, gu_, act_;
    int32_t* host_token_ = nullptr;  // pinned
    std::map<std::pair<int64_t, int64_t>, std::unique_ptr<cuda::GdnWorkspace>> gdn_ws_;  // (T, n_la)
};

}  // namespace hydra::gpu
