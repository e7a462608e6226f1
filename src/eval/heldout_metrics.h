// How close a student stays to its teacher on held-out text: KL(teacher || student) per token, top-1
// agreement, the student's and the teacher's perplexity, and the perplexity ratio, each with a 95%
// bootstrap interval over windows (eval/bootstrap.h: windows are resampled, not tokens, since tokens
// of one window are correlated). The text is the held-out split of token shards
// (train/token_shards.h), which no training stage reads, cut into consecutive windows.
//
// The logits come from a LogitsFn (the CPU forward, cpu_logits_fn, or the GPU forward, gpu/gpu_logits.h)
// and the per-row statistics are computed here on the host in double precision; or a WindowStatsFn computes
// them where the logits are (the GPU: gpu/window_stats.h, the same formulas).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/bootstrap.h"
#include "model/llama_model.h"
#include "train/token_shards.h"

namespace hydra {

// tokens (T) from position 0 of a fresh cache -> logits (T, V) row-major.
using LogitsFn = std::function<std::vector<float>(std::span<const int32_t> tokens)>;

// The CPU forward (model/llama_forward.h) in f32, a fresh cache per call.
LogitsFn cpu_logits_fn(const LlamaModel& model);

// Consecutive windows of window + 1 tokens (window inputs, the last one only a target) from the start of
// `split`, the next window starting at the previous one's last token, until max_tokens predicted
// tokens are covered (fewer when the split is shorter; a last window shorter than 2 tokens is dropped).
// Throws hydra::Error for window < 1 or max_tokens < 1.
std::vector<std::vector<int32_t>> heldout_windows(const TokenSplit& split, int64_t window,
                                                  int64_t max_tokens);

// The same windows cut from a token vector already in memory (e.g. a held-out prose file's tokens).
std::vector<std::vector<int32_t>> heldout_windows(std::span<const int32_t> tokens, int64_t window,
                                                  int64_t max_tokens);

// Sums over one window's predicted positions.
struct WindowStats {
    int64_t tokens = 0;
    double kl = 0;           // sum of KL(p_teacher || p_student), nats
    double agree = 0;        // positions where the argmaxes agree
    double nll_student = 0;  // sum of -log p_student(next token)
    double nll_teacher = 0;
};

// Statistics of one window: tokens (n + 1), teacher and student logits of the first n, (n, V) each.
WindowStats window_stats(std::span<const int32_t> tokens, std::span<const float> teacher_logits,
                         std::span<const float> student_logits, int64_t vocab);

struct HeldoutMetrics {
    int64_t tokens = 0, windows = 0;
    double kl = 0, top1 = 0, ppl = 0, teacher_ppl = 0, ppl_ratio = 0;  // ppl_ratio = ppl / teacher_ppl
    Interval kl_ci, top1_ci, ppl_ci, teacher_ppl_ci, ppl_ratio_ci;
};

// Means and bootstrap intervals from per-window sums (throws when there are none).
HeldoutMetrics summarize_windows(const std::vector<WindowStats>& windows, const BootstrapOptions& boot = {});

// Runs both models over every window and summarizes. progress(done, total) after each window. Passing
// the same LogitsFn object twice runs it once per window (the teacher's own perplexity).
HeldoutMetrics heldout_metrics(const LogitsFn& teacher, const LogitsFn& student,
                               const std::vector<std::vector<int32_t>>& windows, int64_t vocab,
                               const BootstrapOptions& boot = {},
                               const std::function<void(int64_t, int64_t)>& progress = {});

// The statistics of one window (n + 1 tokens) computed wherever the logits are: from two LogitsFn on the
// host (window_stats), or on the GPU (gpu/gpu_logits.h: make_gpu_window_stats_fn), which copies back only
// the per-position sums.
using WindowStatsFn = std::function<WindowStats(std::span<const int32_t> window)>;

// The host WindowStatsFn of two LogitsFn (the same object twice: the teacher against itself, one forward).
WindowStatsFn host_window_stats_fn(const LogitsFn& teacher, const LogitsFn& student, int64_t vocab);

// The statistics of every window, in order (for summaries by source: eval/heldout_sources.h).
std::vector<WindowStats> collect_window_stats(const WindowStatsFn& stats,
                                              const std::vector<std::vector<int32_t>>& windows,
                                              const std::function<void(int64_t, int64_t)>& progress = {});

HeldoutMetrics heldout_metrics(const WindowStatsFn& stats, const std::vector<std::vector<int32_t>>& windows,
                               const BootstrapOptions& boot = {},
                               const std::function<void(int64_t, int64_t)>& progress = {});

// {"tokens", "windows", "kl", "kl_ci": {lo, hi}, "top1_agreement", "top1_agreement_ci", "ppl", "ppl_ci",
//  "teacher_ppl", "teacher_ppl_ci", "ppl_ratio", "ppl_ratio_ci"}; the keys kl / top1_agreement / ppl /
// tokens are those of the pipeline's earlier agreement.json, so old reports still read.
nlohmann::json heldout_metrics_json(const HeldoutMetrics& m);

}  // namespace hydra
