// ScoringBackend: the device-specific primitives of head scoring, behind one interface so that the
// scoring logic (interp/activation_patching.h, path_patching.h, attribution_patching.h,
// retrieval_score.h, score_heads.h) is written once and runs on the CPU (CpuScoringBackend, below) or
// on the GPU (cli/gpu_scoring_backend.h, `hydra score-heads --device cuda`). The primitives:
//   forward       a whole prompt; the host FaRun keeps the answer-position rows (or every position)
//                 that the scorers read; a backend may keep its own copy of the keys/values in
//                 FaRun::device instead of FaRun::k / v
//   sweep         patched copies of a run re-run at the answer position (last_position_forward.h)
//   answer_mixer  one layer's head outputs at the answer position for modified inputs (path patching)
//   head grads    d LD / d head outputs (attribution patching)
//   decoder       greedy decoding with each head's top-1 attended position (retrieval score)
// Everything the scorers compute on the host (LD, the path deltas, the attribution sums) reads the
// host weights, weights(), so both backends measure with the same code.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "interp/fa_forward.h"
#include "interp/fa_weights.h"
#include "interp/last_position_forward.h"
#include "interp/patching_metric.h"
#include "interp/retrieval_score.h"
#include "model/llama_model.h"

namespace hydra {

class ScoringBackend {
  public:
    // Throws hydra::Error when `model` is not the all-FA teacher. The model must outlive the backend.
    explicit ScoringBackend(const LlamaModel& model) : model_(model), w_(model) {}
    virtual ~ScoringBackend() = default;
    ScoringBackend(const ScoringBackend&) = delete;
    ScoringBackend& operator=(const ScoringBackend&) = delete;

    const LlamaModel& model() const { return model_; }
    const FaWeights<float>& weights() const { return w_; }
    virtual std::string device() const = 0;  // "cpu" | "cuda"
    // Whether independent jobs (the two patching directions) may call the backend concurrently.
    virtual bool concurrent() const = 0;

    // fa_forward (fa_forward.h) semantics; `share` may be ignored (then shared_prefix is 0).
    virtual FaRun<float> forward(std::span<const int32_t> tokens, bool save_all_positions,
                                 const FaRun<float>* share = nullptr,
                                 std::span<const int32_t> share_tokens = {}) = 0;
    // last_position_sweep (last_position_forward.h) semantics: final residuals (copies, C).
    virtual std::vector<float> sweep(const FaRun<float>& base, std::span<const PatchedCopy<float>> copies,
                                     int64_t max_batch) = 0;
    // heads (n, H, Dh) OVERWRITTEN with layer `layer`'s per-head outputs at base's answer position for
    // the n layer inputs X (n, C) (each a copy attending to base's keys/values of earlier positions).
    virtual void answer_mixer(const FaRun<float>& base, int64_t layer, const float* X, int64_t n,
                              float* heads, int64_t max_batch) = 0;
    // answer_position_head_grad / all_positions_head_grad (attribution_patching.h) semantics.
    virtual std::vector<float> answer_head_grad(const FaRun<float>& run, const LogitDiff<float>& ld) = 0;
    virtual std::vector<std::vector<float>> all_head_grad(const FaRun<float>& run,
                                                          const LogitDiff<float>& ld) = 0;
    // A fresh greedy decoder (retrieval_score.h).
    virtual std::unique_ptr<RetrievalDecoder> decoder() = 0;

  private:
    const LlamaModel& model_;
    FaWeights<float> w_;
};

// The CPU backend: the model's one CPU decoder layer (model/decoder_layer.h) through fa_forward,
// last_position_sweep and the CPU backward; retrieval on the engine's forward with taps.
class CpuScoringBackend final : public ScoringBackend {
  public:
    explicit CpuScoringBackend(const LlamaModel& model) : ScoringBackend(model) {}
    std::string device() const override { return "cpu"; }
    bool concurrent() const override { return true; }
    FaRun<float> forward(std::span<const int32_t> tokens, bool save_all_positions,
                         const FaRun<float>* share = nullptr, std::span<const int32_t> share_tokens = {}) override;
    std::vector<float> sweep(const FaRun<float>& base, std::span<const PatchedCopy<float>> copies,
                             int64_t max_batch) override;
    void answer_mixer(const FaRun<float>& base, int64_t layer, const float* X, int64_t n, float* heads,
                      int64_t max_batch) override;
    std::vector<float> answer_head_grad(const FaRun<float>& run, const LogitDiff<float>& ld) override;
    std::vector<std::vector<float>> all_head_grad(const FaRun<float>& run,
                                                  const LogitDiff<float>& ld) override;
    std::unique_ptr<RetrievalDecoder> decoder() override;
};

}  // namespace hydra
