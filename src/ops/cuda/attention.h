// Causal grouped-query softmax attention on the GPU, forward and backward, flash-style (the T x T
// scores never reach device memory): bf16 operands on tensor cores, fp32 accumulation and softmax
// statistics. Same function as ops/cpu/attention.h with pos0 = 0 (training / prefill).
//
// Layouts (flash-attn's, row-major, contiguous): q, o, dq, d_o: (B, T, H, D) bf16; k, v, dk, dv:
// (B, T, Hkv, D) bf16; query head h reads KV head h / (H / Hkv). D in {64, 128}.
// lse: (B, H, T) fp32, the row log-sum-exp of the scaled scores in base 2 (log2(sum_s exp2(scale log2(e)
// q.k_s))), written by the forward and read by the backward.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace hydra::cuda {

struct AttnShape {
    int B = 0, T = 0, H = 0, Hkv = 0, D = 0;
    // Keys per sequence for a forward whose queries continue after cached ones: k, v hold S >= T rows
    // ((B, S, Hkv, D)) and query row r sits at position S - T + r (causal over keys 0 .. S - T + r).
    // 0 = T (training, a prefill from position 0). The backward takes only S = T. Our kernel only.
    int S = 0;
    // Elements between consecutive tokens of q, k, v (and dq, dk, dv): 0 = packed (H * D for q, Hkv * D
    // for k and v); the row width of a fused QKV projection otherwise, with q, k and v pointing at their
    // columns of it. o and d_o stay packed. Only the cuDNN path (cudnn_attention.h) takes a nonzero value.
    int ld_qkv = 0;
    // Sliding windows (the head-level sliding-window baseline): window (H entries in DEVICE memory, or null =
    // every head full); a head with W > 0 sees the keys [p - W + 1, p] of its query at position p and the
    // first `sinks` keys. Our kernels only.
    const int32_t* window = nullptr;
    int sinks = 0;
};

// Backward scratch: fp32 dQ accumulator (B, T, H, D) and the row dot products D = dO . O (B, H, T).
// deterministic: attention_backward forms dQ in a second kernel that walks each query block's key blocks in
// order (the same bits every run; S and dP computed twice, so slower) instead of adding the key blocks' terms
// with fp32 atomics in their order of arrival. The training step sets it from GpuStepOptions::deterministic.
class AttnWorkspace {
public:
    explicit AttnWorkspace(const AttnShape& s);
    ~AttnWorkspace();
    AttnWorkspace(const AttnWorkspace&) = delete;
    AttnWorkspace& operator=(const AttnWorkspace&) = delete;
    AttnShape shape;
    float* dq_acc = nullptr;
    float* dvec = nullptr;
    size_t bytes = 0;
    bool deterministic = false;
};

void attention_forward(const AttnShape& s, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                       __nv_bfloat16* o, float* lse, float scale, cudaStream_t stream = nullptr);

// dq, dk, dv OVERWRITTEN; dk/dv of a KV head are summed over the query heads that read it.
void attention_backward(const AttnShape& s, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                        const __nv_bfloat16* o, const float* lse, const __nv_bfloat16* d_o, __nv_bfloat16* dq,
                        __nv_bfloat16* dk, __nv_bfloat16* dv, float scale, AttnWorkspace& ws,
                        cudaStream_t stream = nullptr);

// Tuning knob for benchmarks: size the forward kernel's registers for 1 or 2 resident blocks per
// multiprocessor (0 = the default per head dim).
void attention_set_fwd_blocks_per_sm(int n);

}  // namespace hydra::cuda
