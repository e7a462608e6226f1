// One decoder layer of a teacher or HydraHead hybrid on the GPU, forward and backward, over a
// GpuTrainModel's weights (gpu/gpu_train_model.h): the mirror of model/decoder_layer.cpp (the CPU reference)
// with DESIGN.md §3's numerics: fp32 residual stream, bf16 GEMM operands and activations between ops, fp32
// accumulation, norms, softmax statistics, gates and GDN state; parameter vectors (norms, conv taps, gates,
// fusion scales, biases) read as fp32; parameter gradients fp32, ACCUMULATED into the model's gradient
// arena (frozen tensors: no weight-gradient GEMM or reduction). Used by GpuTrainStep for the whole-model
// step (activations saved, or the forward re-run right before the backward with recompute), the teacher's
// forward, evaluation and stage-1 align (teacher-forced layers), and by GpuForward (inference, scoring,
// generation) in the cache mode (GpuLayerCache: prefill and single-token decode with the hybrid cache,
// eager or inside a CUDA graph) with every projection as one GEMM over the layout's proj block
// (model/device_layout.h).
//
// Modes: forward with save (keeps what the backward reads) or without (teacher, eval, the first pass of
// recomputation, inference); backward; cache (env.cache); batched decode over paged caches (env.batch:
// serving's continuous batching, B sequences of one token each, GpuLayerBatch); shared prefix (env.prefix: B
// independent single-token copies of one sequence over its cached keys/values, head scoring's answer-position
// re-runs and retrieval decode, cli/gpu_scoring_backend.h); head taps (env.taps: per-head outputs before the
// fusion and o_proj captured, filled or overwritten, and their gradient captured in the backward); a row
// subset is the caller's (GpuForward's LM head reads the last rows only).
//
// Per layer (N = B * T tokens), forward:
//   x (N, C) fp32 -> RMSNorm -> xn bf16
//   FA heads:  q, k, v = xn W^T (+ b) -> [per-head RMSNorm of q and k (qk_norm, gpu/head_rmsnorm.h)]
//              -> RoPE -> [K/V duplicated per FA head when the heads do not read their KV groups in the
//              uniform GQA pattern (head granularity); the backward sums dK / dV back per group,
//              gpu/kv_group_reduce.h] -> causal GQA flash attention (cuDNN's fused engines,
//              ops/cuda/cudnn_attention.h, where they load; else ops/cuda/attention.h) -> o, lse
//   LA heads:  [q|k|v] = xn [Wq;Wk;Wv]^T (one GEMM when adjacent in the arena), z, [a|b] -> short conv + SiLU
//              -> gates g, beta -> GDN chunked forward (saved for the backward) -> gated RMSNorm with z
//   heads (N, H, Dh) = [FA | LA] -> fusion (mixed layers) -> o_proj GEMM accumulated into x_mid (fp32)
//   -> RMSNorm -> [gate|up] GEMM -> SwiGLU -> down GEMM accumulated into x_out (fp32)
// The backward walks the same ops back.
//
// Supported: head dim 64 / 128 (the attention and GDN kernels), RoPE with rope_dim <= head_dim, q/k/v
// biases, q/k norm (Qwen3), every fusion kind, kv- and head-granularity plans.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "gpu/decode_step.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_train_model.h"
#include "gpu/head_taps.h"
#include "gpu/step_profiler.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/device_arena.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/rope.h"

namespace hydra::gpu {

// B sequences of T tokens, rows n = b * T + t.
struct GpuLayerShape {
    int64_t B = 0, T = 0;
    int64_t N() const { return B * T; }
};

// One layer's device weights (views of a GpuTrainModel, gpu/gpu_train_model.h): GEMM matrices bf16 (out, in)
// row-major, parameter vectors fp32, null where the plan has no such tensor. Projections whose matrices are
// adjacent in memory run as one GEMM.
struct GpuLayerWeights {
    int64_t n_fa = 0, n_kv = 0, n_la = 0;  // FA heads, FA KV groups, LA heads
    bool uniform_groups = true;            // FA head h reads KV slot h / (n_fa / n_kv)
    const int32_t* kv_index = nullptr;     // (n_fa) device: KV slot of each FA head
    const int32_t* fa_window = nullptr;    // (n_fa) device: sliding window per FA head (0 = full); null: none
    int64_t window_sinks = 0;
    const bf16 *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    const bf16 *la_wq = nullptr, *la_wk = nullptr, *la_wv = nullptr, *la_wa = nullptr, *la_wb = nullptr,
               *la_wg = nullptr;
    const bf16 *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
    const float *attn_norm = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr,
                *k_norm = nullptr;
    const float *la_bq = nullptr, *la_bk = nullptr, *la_bv = nullptr, *conv_q = nullptr, *conv_k = nullptr,
                *conv_v = nullptr, *A_log = nullptr, *dt_bias = nullptr, *o_norm = nullptr;
    const float *head_scale = nullptr, *fa_scale = nullptr, *la_scale = nullptr, *la_bias = nullptr,
                *ffn_norm = nullptr;
    // Inference: every projection of the normed input as ONE (proj_cols, C) matrix, the layout's proj block
    // (rows [q | k | v | la_q | la_k | la_v | la_z | la_a | la_b] then zero rows), with its bias block
    // (proj_cols) or null. When set, the per-tensor projection matrices and biases above are not read.
    const bf16* w_proj = nullptr;
    const float* b_proj = nullptr;
    int64_t proj_cols = 0;
};

// The fp32 gradients of the same tensors (ACCUMULATED by the backward; null: frozen or no gradients).
struct GpuLayerGrads {
    float *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
    float *la_wq = nullptr, *la_wk = nullptr, *la_wv = nullptr, *la_wa = nullptr, *la_wb = nullptr,
          *la_wg = nullptr;
    float *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
    float *attn_norm = nullptr, *bq = nullptr, *bk = nullptr, *bv = nullptr, *q_norm = nullptr,
          *k_norm = nullptr;
    float *la_bq = nullptr, *la_bk = nullptr, *la_bv = nullptr, *conv_q = nullptr, *conv_k = nullptr,
          *conv_v = nullptr, *A_log = nullptr, *dt_bias = nullptr, *o_norm = nullptr;
    float *head_scale = nullptr, *fa_scale = nullptr, *la_scale = nullptr, *la_bias = nullptr,
          *ffn_norm = nullptr;
};

// Layer l of a GpuTrainModel: its weights, and its gradients (all null without a gradient arena).
GpuLayerWeights layer_weights(const GpuTrainModel& m, int64_t l);
GpuLayerGrads layer_grads(const GpuTrainModel& m, int64_t l);
// Layer l for inference: layer_weights plus the whole proj block as one matrix (w_proj, b_proj, proj_cols).
GpuLayerWeights inference_weights(const GpuTrainModel& m, int64_t l);

// One layer's activations (device pointers into the caller's arena; null where the layer has no such part).
struct GpuLayerActs {
    const float* x_in = nullptr;                                  // the layer input (fp32 residual)
    bf16* xn1 = nullptr;                                          // (N, C) normed input
    float* rstd1 = nullptr;                                       // (N)
    // FA (N, n_fa|n_kv, Dh), q/k after RoPE. o may be `heads` itself (its rows' FA part, row stride H Dh:
    // no copy after the attention): a pure-FA layer, a decode step of one sequence or of a batch.
    bf16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
    bf16* qk_pre = nullptr;                      // (N, Dfa + Dkv) q | k before the q/k norm (qk_norm)
    float *rstd_q = nullptr, *rstd_k = nullptr;  // (N * n_fa), (N * n_kv) (qk_norm)
    bf16 *kdup = nullptr, *vdup = nullptr;       // (N, n_fa, Dh) K / V per FA head (non-uniform groups)
    // q, k, v as columns of one (N, Dfa + 2 Dkv) buffer (one projection GEMM, one RoPE launch; cuDNN
    // reads them strided): that row width; 0 = three packed buffers (our own attention kernels)
    int64_t ld_qkv = 0;
    float* lse = nullptr;                              // (B, n_fa, T)
    bf16* lqkv = nullptr;                              // (N, 3 Dla) LA q|k|v projections (conv inputs)
    bf16* lz = nullptr;                                // (N, Dla) output gate
    bf16* lab = nullptr;                               // (N, 2 n_la) decay | beta logits
    bf16 *lq = nullptr, *lk = nullptr, *lv = nullptr;  // (N, Dla) after conv + SiLU
    float *g = nullptr, *beta = nullptr;               // (N, n_la)
    bf16* lo = nullptr;                                // (N, Dla) GDN core output
    float* gn_rstd = nullptr;                          // (N, n_la)
    bf16* gn_out = nullptr;  // (N, Dla) gated-norm output (mixed layers), or heads + Dfa for one token
    bf16* heads = nullptr;                             // (N, H, Dh) mixer output before the fusion
    bf16* mixed = nullptr;                             // o_proj input: fused heads, or heads
    float* x_mid = nullptr;                            // (N, C)
    bf16* xn2 = nullptr;
    float* rstd2 = nullptr;
    bf16* gu = nullptr;   // (N, 2F) gate | up
    bf16* act = nullptr;  // (N, F)
    // With GpuLayerWeights::w_proj: the fused projection output (N, ld_proj); q, k, v, lqkv, lz and lab then
    // point into it, and these are their row strides (0: the packed widths above)
    bf16* proj = nullptr;
    int64_t ld_proj = 0, ld_lqkv = 0, ld_lz = 0, ld_lab = 0;
};

class PrefillAttention;  // gpu/prefill_attention.h

// Inference with the hybrid cache (gpu/gpu_cache.h): one sequence (B = 1) of T new tokens at positions
// pos0.. appended to the cache, forward only. FA: RoPE at the absolute positions, K / V rows into the cache,
// attention over it (gpu/decode_attention.h for T = 1; for T > 1 gpu/prefill_attention.h, any pos0); LA:
// short conv over the cache's windows, GDN from and into the cache's state (gdn_decode_step for T = 1).
struct GpuLayerCache {
    GpuCache* cache = nullptr;
    int64_t pos0 = 0;
    // graph decode (T = 1): the position and attention length read on the device (gpu/decode_step.h), and the
    // decode attention grid's key splits; null: pos0 on the host
    const DecodeStep* step = nullptr;
    int64_t max_splits = 0;
    float* partials = nullptr;              // decode attention workspace
    const cuda::RopeFreqs* rope = nullptr;  // the model's frequencies (gpu_rope_freqs) for one token's
                                            // angles; null: computed per call
    PrefillAttention* prefill = nullptr;    // T > 1 (required): attention over the cache rows [0, pos0 + T)
};

// Batched decode with paged caches (serving, gpu/gpu_batch_backend.h): s.B rows of one token each (s.T = 1),
// row b the next token of its own sequence at position pos[b], whose caches are slot slots[b]: FA keys /
// values in blocks of a shared pool through the block table (gpu/paged_kv_pool.h), the new K / V row written
// into its block and attention over the row's pos[b] + 1 keys (gpu/paged_decode_attention.h); LA conv
// windows and GDN state in a slot pool (gpu/gdn_state_slots.h) read and updated through the slot index.
// Everything the rows' results depend on is read on the device (pos, slots, block table), so one captured
// CUDA graph serves every step of a batch size. Needs the fused projection (w_proj; q, k, v as columns of
// one row, a.ld_qkv) and forward only.
struct GpuLayerBatch {
    const int32_t* pos = nullptr;    // (B) device
    const int32_t* slots = nullptr;  // (B) device
    // FA: this layer's K / V pools (blocks, block_size, n_kv, Dh) and the block table (slots, max_blocks)
    __nv_bfloat16 *k_pool = nullptr, *v_pool = nullptr;
    const int32_t* block_table = nullptr;
    int64_t max_blocks = 0, block_size = 0;
    int64_t max_splits = 0;     // the attention grid's key splits (every pos[b] + 1 <= max_splits * 128)
    float* partials = nullptr;  // paged_decode_attention_workspace_floats(B, n_fa, Dh, max_splits)
    // LA: this layer's conv windows and state in slot 0 of the slot pool; slot s at + s * slot_stride
    float *conv_q = nullptr, *conv_k = nullptr, *conv_v = nullptr, *state = nullptr;
    int64_t slot_stride = 0;
    const cuda::RopeFreqs* rope = nullptr;  // the model's frequencies (gpu_rope_freqs)
};

// What the layer borrows from its caller beside the weights: attention backend and workspaces that outlive
// one call (cuDNN plans, the GDN chunk state a forward saves for its backward).
class GpuLayerResources {
  public:
    virtual ~GpuLayerResources() = default;
    // cuDNN's fused attention when it runs this shape (decided once per shape, so a forward and its backward
    // agree on the statistics' convention), else null: ops/cuda/attention.h.
    virtual cuda::CudnnAttention* cudnn_attention(const cuda::AttnShape& as) = 0;
    // The attention backward workspace of (s.B, s.T, n_fa query heads, n_kv KV heads).
    virtual cuda::AttnWorkspace& attn_workspace(int64_t n_fa, int64_t n_kv, const GpuLayerShape& s) = 0;
    // Layer l's GDN chunk workspace (n_la heads); save: the one that keeps the chunk states for the backward.
    virtual cuda::GdnWorkspace& gdn_workspace(int64_t l, int64_t n_la, const GpuLayerShape& s, bool save) = 0;
};

// The shared-prefix mode (s.T == 1, FA-only layer, packed q / k / v: layout_layer_acts without fused_qkv):
// the s.B rows are independent copies of one sequence at position `pos`, each attending to the keys /
// values of [0, pos) here (read-only) plus its own (gpu/prefix_attention.h). The rows' own keys / values
// are the layer's a.k / a.v (point them into a cache row to append).
struct GpuLayerPrefix {
    const bf16* k = nullptr;  // (>= pos, n_kv, Dh) after RoPE
    const bf16* v = nullptr;
    int64_t pos = 0;
    int32_t* top = nullptr;  // (B, n_fa) or null: each head's most-attended position (retrieval score)
};

// Head taps on heads (N, H, Dh), the per-head mixer outputs before the fusion and o_proj, in this order:
// capture, fill, writes (gpu/head_taps.h); in the backward, d_heads.
struct GpuHeadTaps {
    bf16* capture = nullptr;  // (capture_rows, H, Dh) <- rows [capture_row0, + capture_rows) of heads
    int64_t capture_row0 = 0, capture_rows = 0;
    const bf16* fill = nullptr;  // (H, Dh) -> rows [fill_row0, + fill_rows)
    int64_t fill_row0 = 0, fill_rows = 0;
    const GpuHeadWrite* writes = nullptr;  // n_writes entries in device memory
    int64_t n_writes = 0;
    bf16* d_heads = nullptr;  // backward: (N, H, Dh) OVERWRITTEN with d loss / d heads
};

struct GpuLayerEnv {
    cudaStream_t stream = nullptr;
    cuda::BlasContext* blas = nullptr;
    cuda::DeviceArena* arena = nullptr;  // the backward's scratch (released before it returns)
    StepProfiler* prof = nullptr;
    GpuLayerResources* res = nullptr;
    const float *rope_cos = nullptr, *rope_sin = nullptr;  // (T, rope_dim / 2) for positions pos0..
    const GpuLayerCache* cache = nullptr;                  // inference with the hybrid cache; null: training
    const GpuLayerPrefix* prefix = nullptr;                // shared-prefix mode (no cache, no save)
    const GpuLayerBatch* batch = nullptr;                  // batched decode over paged caches
    const GpuHeadTaps* taps = nullptr;
};

// The activation buffers of layer l for N rows, in allocation order: alloc(bytes) returns memory (or, for a
// size estimate, nothing). fused_qkv: q, k, v as columns of one (N, Dfa + 2 Dkv) buffer (one projection GEMM,
// one RoPE launch; cuDNN reads them strided); only for layers whose FA heads read their groups uniformly.
void layout_layer_acts(const GpuTrainModel& m, int64_t l, int64_t N, GpuLayerActs& a,
                       const std::function<void*(size_t)>& alloc, bool fused_qkv = false);
// Bytes (256-aligned) of layer l's activations, and of its backward's scratch.
size_t layer_acts_bytes(const GpuTrainModel& m, int64_t l, int64_t N);
size_t layer_backward_scratch_bytes(const GpuTrainModel& m, int64_t l, int64_t N);

// x_out (N, C) fp32 = layer l of x_in (N, C) fp32 (x_out may alias x_in); `a` laid out by layout_layer_acts.
// save: keep what gpu_layer_backward reads (the GDN chunk states too).
void gpu_layer_forward(const ModelConfig& c, const HybridPlan& plan, const GpuLayerWeights& w, int64_t l,
                       const GpuLayerShape& s, const float* x_in, float* x_out, GpuLayerActs& a, bool save,
                       const GpuLayerEnv& env);
// dx (N, C) fp32: d loss / d output on entry, d loss / d input on exit; parameter gradients += into g.
// `a` from a forward with save. dx_bf16: when not null it holds bf16(dx) on entry, and bf16
// of the returned dx on exit.
void gpu_layer_backward(const ModelConfig& c, const HybridPlan& plan, const GpuLayerWeights& w,
                        const GpuLayerGrads& g, int64_t l, const GpuLayerShape& s, float* dx, GpuLayerActs& a,
                        bf16* dx_bf16, const GpuLayerEnv& env);

}  // namespace hydra::gpu
