// The training step of a teacher or HydraHead hybrid on the GPU: the mirror of train/model_step.cpp and
// model/decoder_layer.cpp (the CPU reference) over the kernels of ops/cuda, with DESIGN.md §3's numerics:
// fp32 residual stream, bf16 GEMM operands and activations between ops, fp32 accumulation, norms,
// softmax statistics, gates and GDN state; fp32 master weights with a bf16 mirror at the same offsets,
// parameter vectors (norms, conv taps, gates, fusion scales, biases) read as fp32, parameter gradients
// fp32 accumulated into a gradient arena with the ParamArena's offsets.
//
// The model (N = B * T tokens): embedding -> every layer through gpu/gpu_decoder_layer.h (its forward, and
// its backward on the way back) -> the final RMSNorm (bf16 h) and the vocabulary-chunked CE / KL through the
// LM head (ops/cuda/losses.h, never (N, V)); the backward walks the same ops back, parameter gradients +=
// into the gradient arena. Frozen tensors (trainable mask) get no gradient: their weight-gradient GEMMs and
// reductions are skipped.
//
// Activations live in one DeviceArena sized from the step's allocations (mark at the step's start, reset
// at its end). Without recompute
// every layer keeps what its backward reads; with recompute only each layer's fp32 input is kept and the
// layer's forward is re-run right before its backward (the arena is reset after every layer), so the
// activation memory is O(L * N * C) + one layer's working set. GDN chunk workspaces (per layer, or one
// per LA-head count with recompute) and the attention backward workspace live outside the arena.
//
// Stage 1 (align, align_forward_backward; the mirror of train/align_step.cpp): one teacher forward keeps
// every layer boundary t_0..t_L (fp32 (L + 1, N, C), t_0 = the embeddings) in the arena; then each
// student layer l, independently (teacher forcing), runs forward on t_l with its activations saved,
// its loss sum((y - t_{l+1})^2) / max(sum((t_{l+1} - t_l)^2), 1e-12) and dy are formed on the device
// (gpu/align_loss.h, fp64 sums), and its backward accumulates the parameter gradients; the arena is reset
// after every layer, so the activation memory is (L + 1) N C fp32 + one layer's working set. The
// embedding, final norm and LM head get no gradient (they are not in the objective). No host
// synchronisation until the per-layer sums come back at the end.
//
// Supported: what gpu/gpu_decoder_layer.h supports (q/k norm, q/k/v biases, every fusion kind, kv- and
// head-granularity plans; head dim 64 / 128).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/gpu_decoder_layer.h"
#include "gpu/gpu_train_model.h"
#include "gpu/step_profiler.h"
#include "model/llama_model.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/device_arena.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/losses.h"
#include "train/train_batch.h"

namespace hydra::gpu {

using bf16 = __nv_bfloat16;

struct GpuStepOptions {
    bool recompute = false;  // keep only each layer's input, re-run its forward before its backward
    cuda::LmHeadChunking chunking;
    // One vocabulary chunk per row block when its fp32 logits tile fits in resident_vocab_bytes: the loss
    // then runs the logits GEMM once instead of twice (losses.h). 0 = always use `chunking` as given.
    // With lm_row_block_auto the row block is the largest of 8192, 4096 and chunking.row_block rows whose
    // tile fits that budget, itself at most 1/32 of the device's memory (H200: 8192 rows, a 1.6 GB tile at
    // V = 49152): fewer, larger blocks accumulate the fp32 dW of the LM head fewer times.
    size_t resident_vocab_bytes = size_t(2) << 30;
    bool lm_row_block_auto = true;
    // Device memory that must stay free beside the activation arena (cuBLAS, stream-ordered scratch of the
    // layer ops, evaluation workspaces). The arena is sized from the step's allocations (arena_estimate),
    // and grown (replaced between steps) when a larger step comes.
    size_t reserve_bytes = size_t(2) << 30;
    size_t arena_bytes = 0;  // > 0: at least this capacity
    // Causal attention through cuDNN's fused engines (ops/cuda/cudnn_attention.h) where cuDNN loads and
    // has an engine for the shape, else ours (ops/cuda/attention.h). HYDRA_ATTENTION=own in the
    // environment turns it off.
    bool cudnn_attention = true;
    // Replay forward_backward as one CUDA graph once a step repeats the previous step's shape, objective,
    // loss scales and buffers (the first such step is captured): no per-kernel launch cost on the host and
    // no gaps between the ~1,400 kernels of a SmolLM2-135M step (2.5-3.5% faster on an H200).
    // HYDRA_STEP_GRAPH=0 / 1 in the environment overrides this. Not with HYDRA_STEP_PROFILE's events or
    // a KL position limit (its row mask is uploaded inside the step).
    bool cuda_graph = true;
    // The same gradients every run: the embedding backward sums each table row's rows in position order
    // (ops/cuda/embedding.h embedding_backward_grouped, the CPU's bits) instead of with atomics, and the
    // attention backward forms dQ without atomics: cuDNN's graph without its fp32 dQ accumulator, on the
    // heuristic's first engine instead of a timing's pick (ops/cuda/cudnn_attention.h; a larger workspace),
    // or our kernels' second pass over the keys (ops/cuda/attention.h AttnWorkspace::deterministic).
    // HYDRA_DETERMINISTIC=1 in the environment turns it on. The other backward ops are deterministic
    // always (the GDN backward's sums over warps in a fixed order, the parameter gradients' partial sums
    // added in order). GEMMs keep their tuned algorithm for the process; HYDRA_GEMM_TUNE=0 fixes it across
    // processes too (ops/cuda/gemm.h).
    bool deterministic = false;
};

// The stage objective (train/model_step.h's StageObjective on the device): ce_weight * mean CE over scored
// targets + kl_weight * mean tau^2 KL(teacher || student) over positions t < kl_max_position (0: all).
struct GpuObjective {
    double ce_weight = 1.0, kl_weight = 0.0;
    float temperature = 1.0f;
    int64_t kl_max_position = 0;
};

struct GpuStepLosses {
    double ce_sum = 0, kl_sum = 0;     // summed over counted rows
    int64_t ce_count = 0, kl_count = 0;
    double ce() const { return ce_count ? ce_sum / double(ce_count) : 0.0; }
    double kl() const { return kl_count ? kl_sum / double(kl_count) : 0.0; }
};

// Stage 1 (align): the mean over layers of each layer's normalised error, and the per-layer values.
struct GpuAlignResult {
    double loss = 0;
    std::vector<double> layer_loss;  // (L)
};

class GpuTrainStep {
  public:
    // student: a model with gradients; teacher: for the KL objective (null otherwise). All work is
    // asynchronous on `stream` except where a method says it synchronises.
    GpuTrainStep(GpuTrainModel& student, const GpuTrainModel* teacher, const GpuStepOptions& options,
                 cudaStream_t stream);
    ~GpuTrainStep();
    GpuTrainStep(const GpuTrainStep&) = delete;
    GpuTrainStep& operator=(const GpuTrainStep&) = delete;

    // Forward, loss and backward: student gradients += d loss / d params (trainable tensors only; the
    // gradient arena is not zeroed here). Host token ids are validated like the CPU step (throws).
    // Synchronises at the end (the loss totals come back).
    GpuStepLosses forward_backward(const TrainBatch& batch, const GpuObjective& objective);
    // Stage 1 (align, see the file comment): the teacher's layer boundaries, then per student layer the
    // teacher-forced forward, loss and backward; student gradients += d loss / d params (trainable tensors
    // only, not zeroed here). Needs a teacher with the student's number of layers and hidden size (throws);
    // batch.targets is not read. Synchronises at the end.
    GpuAlignResult align_forward_backward(const TrainBatch& batch);
    // Forward and the next-token CE only (no gradients); synchronises.
    GpuStepLosses eval_ce(const TrainBatch& batch);
    // The teacher's (or, with teacher == null, the student's) final hidden states (N, C) after the final
    // norm, bf16 rounded to fp32, for checks; synchronises.
    std::vector<float> final_hidden(const TrainBatch& batch, bool of_teacher);

    cudaStream_t stream() const { return stream_; }
    cuda::BlasContext& blas() { return *blas_; }

    // Gradient hook (data parallel, gpu/gpu_train_engine.cpp): called on the host right after the backward
    // has issued, on stream(), the last write of a group of parameter gradients, with the group's event:
    // grad_event_head() (final norm, untied LM head), grad_event_layer(l, L) (layer l: in the training
    // step l = L-1 first, in align in forward order), grad_event_embedding(L) (the embedding, also the tied
    // LM head). The work issued so far on stream() completes those gradients. A step with a hook runs
    // eagerly (no step graph: the hook issues work on other streams). Empty: no hook.
    void set_grad_hook(std::function<void(int event)> hook) { grad_hook_ = std::move(hook); }
    static int grad_event_head() { return 0; }
    static int grad_event_layer(int64_t l, int64_t L) { return int(1 + (L - 1 - l)); }
    static int grad_event_embedding(int64_t L) { return int(L + 1); }
    static int grad_event_count(int64_t L) { return int(L + 2); }
    size_t arena_peak_bytes() const { return std::max(peak_carry_, arena_ ? arena_->peak_bytes() : size_t(0)); }
    size_t arena_capacity_bytes() const { return arena_ ? arena_->capacity_bytes() : 0; }
    void reset_peak() {
        peak_carry_ = 0;
        if (arena_) arena_->reset_peak();
    }
    // Workspaces outside the arena (GDN, attention, LM-head loss), bytes.
    size_t workspace_bytes() const;
    // Whether any attention of this step ran on cuDNN (ops/cuda/cudnn_attention.h).
    bool used_cudnn_attention() const { return cudnn_used_; }
    // Whether the last steps replayed a captured CUDA graph (GpuStepOptions::cuda_graph).
    bool used_step_graph() const { return graph_.exec != nullptr; }
    // Per-category GPU time of the following steps (gpu/step_profiler.h); profile() synchronises and
    // returns the milliseconds since its last call.
    void enable_profile() { prof_.enable(stream_); }
    std::map<std::string, double> profile() { return prof_.collect(); }

    using LayerActs = GpuLayerActs;  // one layer's activations (gpu/gpu_decoder_layer.h)

  private:
    using Shape = GpuLayerShape;
    void ensure_arena(size_t need);
    // Arena bytes of a step (training: teacher forward + the student's kept activations and backward
    // scratch; else a forward), from the same allocation sizes, plus 1/16 and 64 MiB of slack.
    size_t arena_estimate(const Shape& s, bool training) const;
    // Arena bytes of align_forward_backward: the teacher's (L + 1) boundaries, y / dy rows and the loss
    // sums, then the larger of the teacher's forward of one layer and the student's layer (activations +
    // backward scratch), with the same slack.
    size_t align_arena_estimate(const Shape& s) const;
    // The training workspaces of a batch shape, then an arena for the step (align: align_arena_estimate).
    void ensure_shape(const Shape& s, bool align = false);
    // opt_.chunking, or one whole-vocabulary chunk per row block (GpuStepOptions::resident_vocab_bytes).
    cuda::LmHeadChunking loss_chunking() const;
    void upload_batch(const TrainBatch& batch, bool targets);
    // The model's forward up to the final norm: h (N, C) bf16 (and rstd) from the ids on the device; with
    // `keep` the student's per-layer residuals and activations stay in the arena for backward().
    void forward_model(const GpuTrainModel& m, const Shape& s, bf16* h, float* rstd_f, bool keep);
    // The model's forward keeping only the layer boundaries: states (L + 1, N, C) fp32 (entry 0 = the
    // embeddings, entry l + 1 = layer l's output, before the final norm); no activations are kept.
    void forward_boundaries(const GpuTrainModel& m, const Shape& s, float* states);
    void alloc_acts(const GpuTrainModel& m, int64_t l, const Shape& s, LayerActs& a);
    // RoPE cos / sin tables (T, rope_dim / 2) for positions 0..T-1, in the arena (the caller's mark frees them).
    std::pair<float*, float*> rope_tables(const ModelConfig& c, int64_t T);
    void layer_forward(const GpuTrainModel& m, int64_t l, const Shape& s, const float* x_in, float* x_out,
                       LayerActs& a, bool save, const float* rope_cos, const float* rope_sin);
    // The student's layer l backward (gpu_layer_backward) with the step's RoPE tables; dx_bf16: when not
    // null it holds bf16(dx) on entry, and holds bf16 of the returned dx on exit.
    void layer_backward(int64_t l, const Shape& s, float* dx, LayerActs& a, bf16* dx_bf16 = nullptr);
    // The stream, cuBLAS, arena, profiler and this step's workspaces for a layer call of model m.
    GpuLayerEnv layer_env(const GpuTrainModel& m, const float* rope_cos, const float* rope_sin);
    // The layer's resources for one model: the student's (its GDN workspaces keep chunk states for the
    // backward, and lend themselves to forwards of its shape) or the teacher's.
    struct LayerResources final : GpuLayerResources {
        GpuTrainStep* step = nullptr;
        bool student = false;
        cuda::CudnnAttention* cudnn_attention(const cuda::AttnShape& as) override;
        cuda::AttnWorkspace& attn_workspace(int64_t n_fa, int64_t n_kv, const GpuLayerShape& s) override;
        cuda::GdnWorkspace& gdn_workspace(int64_t l, int64_t n_la, const GpuLayerShape& s,
                                          bool save) override;
    };
    cuda::GdnWorkspace& gdn_ws(int64_t l, int64_t n_la, int64_t Dh, const Shape& s, bool save, bool student);
    cuda::AttnWorkspace& attn_ws(int64_t n_fa, int64_t n_kv, const Shape& s);
    // Whether this attention shape runs on cuDNN (decided once per shape, so forward and backward agree
    // on the statistics' convention).
    bool use_cudnn_attention(const cuda::AttnShape& as);
    // Whether layer l's FA heads use the fused q|k|v layout (cuDNN attention takes the strided shape).
    bool fused_qkv(const GpuTrainModel& m, int64_t l, const Shape& s);
    // Runs `body` (the step's stream work) through the step graph when it may (see the .cpp); false: the
    // caller runs it eagerly.
    bool run_step_graph(const std::vector<double>& key, const std::function<void()>& body);
    void grads_done(int event) {
        if (grad_hook_) grad_hook_(event);
    }

    GpuTrainModel& student_;
    const GpuTrainModel* teacher_;
    std::function<void(int)> grad_hook_;
    GpuStepOptions opt_;
    cudaStream_t stream_;
    std::unique_ptr<cuda::BlasContext> blas_;
    std::unique_ptr<cuda::DeviceArena> arena_;
    size_t peak_carry_ = 0;  // peak of arenas replaced by larger ones
    std::unique_ptr<cuda::LmHeadLossWorkspace> loss_ws_;
    cuda::DeviceBuffer<cuda::LossTotals> totals_;
    cuda::DeviceBuffer<int32_t> ids_, targets_;
    cuda::DeviceBuffer<int32_t>
        token_groups_;  // deterministic: the batch's ids grouped (train/token_groups.h)
    std::vector<int32_t> token_groups_host_, token_group_counts_;
    cuda::DeviceBuffer<uint8_t> kl_mask_;
    Shape train_shape_;  // the shape the training workspaces were made for
    std::vector<std::unique_ptr<cuda::GdnWorkspace>> gdn_layer_ws_;              // per layer (no recompute)
    std::map<int64_t, std::unique_ptr<cuda::GdnWorkspace>> gdn_shared_ws_;       // per n_la (recompute)
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<cuda::GdnWorkspace>>
        gdn_eval_ws_;  // (B, T, n_la, Dh)
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<cuda::AttnWorkspace>> attn_ws_;
    std::unique_ptr<cuda::CudnnAttention> cudnn_attn_;  // null: our attention kernels only
    bool cudnn_used_ = false;
    StepProfiler prof_;
    LayerResources student_res_, teacher_res_;
    // the student's forward kept for the backward (arena pointers, valid during forward_backward)
    std::vector<float*> resid_;
    std::vector<LayerActs> acts_;
    const float *rope_cos_ = nullptr, *rope_sin_ = nullptr;
    int64_t ws_generation_ = 0;  // bumped when workspaces a step graph may point at are replaced
    struct StepGraph {
        std::vector<double> key, seen;  // the captured step's key; the last eager step's key
        cudaGraphExec_t exec = nullptr;
        bool broken = false;  // a capture failed: eager from then on
    } graph_;
};

}  // namespace hydra::gpu
