// Causal grouped-query attention, forward and backward, through cuDNN's fused flash-attention engines
// (the cuDNN 9 graph API: the SDPA operation graph is built here from backend descriptors, as NVIDIA's
// frontend composes it, and cuDNN picks the engine). The same function as ops/cuda/attention.h, for the
// training step where it is faster on Hopper than our mma.sync kernels.
//
// cuDNN is loaded at run time (dlopen of libcudnn_graph.so.9, or $HYDRA_CUDNN_LIB): binaries run without
// it and fall back to ops/cuda/attention.h; a build without the cuDNN headers compiles a stub that always
// reports "unavailable".
//
// Layouts as ops/cuda/attention.h: q, o, d_o, dq: (B, T, H, D) bf16; k, v, dk, dv: (B, T, Hkv, D) bf16.
// stats: (B, H, T) fp32, the row log-sum-exp of the scaled scores in NATURAL log (cuDNN's convention;
// ops/cuda/attention.h keeps base 2), written by forward() and read by backward() of this class only.
//
// Inference (forward_inference): forward only, no statistics, T queries over S >= T keys with the causal
// mask aligned bottom-right (the queries are the last T of the S positions: a prompt continued at
// pos0 = S - T over the cached keys), q rows read strided (e.g. from the fused projection row).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "ops/cuda/attention.h"

namespace hydra::cuda {

// Whether cuDNN loaded, its version (e.g. 91501) and, when not, why.
struct CudnnLibrary {
    bool loaded = false;
    long version = 0;
    std::string why;
};
const CudnnLibrary& cudnn_library();

// The inference shape: B sequences of T new queries (positions S - T .. S - 1) over their S keys.
// q: (B, T, H, D) rows ld_q elements apart (0: packed, H * D); k, v: (B, S, Hkv, D) rows ld_kv apart (0:
// packed, Hkv * D); o: (B, T, H, D) packed. Query head h reads KV head h / (H / Hkv).
struct AttnInferShape {
    int B = 0, T = 0, S = 0, H = 0, Hkv = 0, D = 0;
    int ld_q = 0, ld_kv = 0;
};

class CudnnAttention {
  public:
    // deterministic: the training graphs run the same engine with the same sums every run (the training
    // step's GpuStepOptions::deterministic): each direction takes the heuristic's first engine that cuDNN
    // does not note as nondeterministic, never the fastest of a timing (two runs may time differently), and
    // the backward writes dQ without the fp32 accumulator the default engine adds key blocks into with
    // atomics (NVIDIA's frontend's set_deterministic_algorithm on Hopper; its workspace grows by B x H x T x
    // T bf16).
    explicit CudnnAttention(bool deterministic = false);
    ~CudnnAttention();
    CudnnAttention(const CudnnAttention&) = delete;
    CudnnAttention& operator=(const CudnnAttention&) = delete;

    // Builds the forward and backward plans for this shape once (tens of milliseconds); false when cuDNN
    // is missing or has no engine for the shape, with the reason in reason(). Call before forward().
    bool supports(const AttnShape& s);
    const std::string& reason() const;

    // stats: (B, H, T) fp32, see above.
    void forward(const AttnShape& s, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                 __nv_bfloat16* o, float* stats, float scale, cudaStream_t stream);
    // dq, dk, dv OVERWRITTEN (dk/dv summed over the query heads of a KV head). Uses ws.dq_acc as cuDNN's
    // fp32 dQ accumulator (not when deterministic) and ws.dvec as its row dot products dO . O.
    void backward(const AttnShape& s, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                  const __nv_bfloat16* o, const float* stats, const __nv_bfloat16* d_o, __nv_bfloat16* dq,
                  __nv_bfloat16* dk, __nv_bfloat16* dv, float scale, AttnWorkspace& ws, cudaStream_t stream);

    // Builds the inference plan for this shape once (forward only: cheaper than supports()); false when cuDNN
    // is missing or has no engine for it (S < T, strides or an alignment it rejects), with the reason in
    // reason(). Call before forward_inference().
    bool supports_inference(const AttnInferShape& s);
    // o = softmax(mask(scale q k^T)) v with query t seeing keys [0, S - T + t]; see AttnInferShape.
    void forward_inference(const AttnInferShape& s, const __nv_bfloat16* q, const __nv_bfloat16* k,
                           const __nv_bfloat16* v, __nv_bfloat16* o, float scale, cudaStream_t stream);

    // Device workspace the plans asked for (the largest so far).
    size_t workspace_bytes() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace hydra::cuda
