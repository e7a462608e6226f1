// GpuScoringBackend: head scoring's primitives (interp/scoring_backend.h) on the GPU, through the one GPU
// decoder layer (gpu/gpu_decoder_layer.h) over a weights-only GpuTrainModel, so that `hydra score-heads
// --device cuda` runs the same scoring logic as the CPU. It lives in cli/ (like the GPU generator)
// because it joins two layers that must not include each other: interp/ (above gpu/) and gpu/. Only in
// a -DHYDRA_CUDA=ON build. The primitives:
//   forward       the prompt in the layer's training mode (B = 1, T tokens from position 0, no save); every
//                 layer's keys/values go straight into the run's device copy (FaRun::device), the answer
//                 position's layer inputs and head outputs (head taps: capture) too; the host FaRun gets
//                 the rows the scorers read (bf16 head outputs as floats). No shared prefix: a whole
//                 prompt costs milliseconds here.
//   sweep         patched copies in batches of up to max_batch rows in the layer's shared-prefix mode
//                 (single-token rows at the answer position over the run's cached keys/values); as on
//                 the CPU, copies are sorted by their first patched layer and join the batch there with
//                 the base run's layer input and head outputs (head taps: fill), then their patches are
//                 written (head taps: writes); only the final residuals come back.
//   answer_mixer  the shared-prefix mode on the given inputs, head outputs captured.
//   head grads    the prompt again with activations saved, then the layer's training backward with no
//                 parameter gradients from d LD / d x_final (host, LogitDiff) at the answer row; head
//                 taps capture d LD / d heads per layer (bf16, the backward's own precision).
//   decoder       retrieval decode: the prompt prefilled into a K/V cache, then single-token steps in the
//                 shared-prefix mode over it (top: each head's most-attended position), final norm, LM
//                 head and argmax on the device.
// Numerics: DESIGN.md §3 (bf16 operands, fp32 residual stream and accumulation); LD is computed on the
// host from the fp32 final residual by the same code as on the CPU. Not thread-safe (concurrent() false).
#pragma once

#ifdef HYDRA_WITH_CUDA

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/gpu_decoder_layer.h"
#include "gpu/gpu_train_model.h"
#include "gpu/step_profiler.h"
#include "interp/scoring_backend.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/device_arena.h"
#include "ops/cuda/gemm.h"

namespace hydra::gpu {

class GpuScoringBackend final : public ScoringBackend {
  public:
    // Uploads the teacher (weights only). Throws hydra::Error for a hybrid, no CUDA device, or an
    // unsupported shape (gpu/gpu_train_model.h).
    explicit GpuScoringBackend(const LlamaModel& model);
    ~GpuScoringBackend() override;

    std::string device() const override { return "cuda"; }
    bool concurrent() const override { return false; }
    FaRun<float> forward(std::span<const int32_t> tokens, bool save_all_positions,
                         const FaRun<float>* share = nullptr,
                         std::span<const int32_t> share_tokens = {}) override;
    std::vector<float> sweep(const FaRun<float>& base, std::span<const PatchedCopy<float>> copies,
                             int64_t max_batch) override;
    void answer_mixer(const FaRun<float>& base, int64_t layer, const float* X, int64_t n, float* heads,
                      int64_t max_batch) override;
    std::vector<float> answer_head_grad(const FaRun<float>& run, const LogitDiff<float>& ld) override;
    std::vector<std::vector<float>> all_head_grad(const FaRun<float>& run,
                                                  const LogitDiff<float>& ld) override;
    std::unique_ptr<RetrievalDecoder> decoder() override;

    const GpuTrainModel& device_model() const { return *model_; }
    // Forward passes of whole prompts and patched rows run so far (layer calls x rows), for the report.
    struct Counters {
        int64_t prompt_tokens = 0;  // tokens through whole-prompt passes (forward, head grads, prefill)
        int64_t patched_rows = 0;   // single-token rows through shared-prefix layer calls (sum over layers)
        int64_t backward_tokens = 0;
        int64_t decode_steps = 0;
    };
    const Counters& counters() const { return counters_; }
    // GPU time per category of the layer's sections (gpu/step_profiler.h) from here on; collect_profile()
    // synchronises and returns the milliseconds since its last call.
    void enable_profile() { prof_.enable(stream_); }
    std::map<std::string, double> collect_profile() { return prof_.collect(); }

  private:
    struct Run;
    class Decoder;
    // Where a whole-prompt pass writes each layer's keys / values: layer l at k + l * stride (T rows).
    struct KvDst {
        bf16 *k = nullptr, *v = nullptr;
        int64_t stride = 0;
    };
    // What a whole-prompt pass leaves in the arena.
    struct PromptPass {
        float* x_final = nullptr;        // (T, C)
        std::vector<GpuLayerActs> acts;  // save: every layer's activations
        float *rope_cos = nullptr, *rope_sin = nullptr;
    };

    const Run& run_of(const FaRun<float>& r) const;
    void ensure_arena(size_t bytes);
    size_t prompt_bytes(int64_t T, bool save) const;
    size_t rows_bytes(int64_t B) const;
    GpuLayerEnv env(const float* rope_cos = nullptr, const float* rope_sin = nullptr) const;
    // The prompt through every layer (B = 1, T tokens from position 0; see the file comment). kv: null or
    // where each layer's keys / values go; x_in_last / heads_last: null or (L, C) / (L, H, Dh) device rows
    // of the answer position; host: null or the FaRun whose every-position rows (saved_from == 0) are filled.
    PromptPass prompt_pass(std::span<const int32_t> tokens, bool save, const KvDst* kv, float* x_in_last,
                           bf16* heads_last, FaRun<float>* host);
    // Layer l on B single-token rows X (B, C) at the answer position of `r` (shared-prefix mode).
    void prefix_layer(const Run& r, int64_t l, int64_t B, float* X, GpuLayerActs& a, const GpuHeadTaps* taps);
    // d LD / d heads of every layer at every position (T, H, Dh) bf16, per layer through `sink`.
    void head_grad(const FaRun<float>& run, const LogitDiff<float>& ld,
                   const std::function<void(int64_t layer, const bf16* d_heads)>& sink);

    struct Resources final : GpuLayerResources {
        GpuScoringBackend* b = nullptr;
        cuda::CudnnAttention* cudnn_attention(const cuda::AttnShape&) override { return nullptr; }
        cuda::AttnWorkspace& attn_workspace(int64_t n_fa, int64_t n_kv, const GpuLayerShape& s) override;
        cuda::GdnWorkspace& gdn_workspace(int64_t l, int64_t n_la, const GpuLayerShape& s,
                                          bool save) override;
    };

    cudaStream_t stream_ = nullptr;
    std::unique_ptr<GpuTrainModel> model_;
    std::unique_ptr<cuda::BlasContext> blas_;
    std::unique_ptr<cuda::DeviceArena> arena_;
    std::vector<GpuLayerWeights> weights_;
    Resources res_;
    mutable StepProfiler prof_;  // never enabled: the layer's section marks cost nothing
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<cuda::AttnWorkspace>> attn_ws_;
    Counters counters_;
};

}  // namespace hydra::gpu

#endif  // HYDRA_WITH_CUDA
