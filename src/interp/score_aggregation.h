// From per-pair patching results to one score per head and per KV group (methods.md §5).
//
// Per pair: PE, NE (patching_metric.h) clipped to [clip_lo, clip_hi] = [-1, 2]; s = 1/2 (PE+ + NE+)
// (+ = positive part), so a head counts when it is sufficient or necessary and negative heads do not
// cancel positive ones. Per (method, task): the mean over pairs and lengths. Retrieval gives its
// copy-paste score directly (mean over correct trials).
// Per method, over tasks: the max-aware mean S = lambda max_t s_t + (1 - lambda) mean_t s_t
// (lambda = 0.5), which keeps specialists (a head vital for one task only).
// Over methods (our formula, methods.md §5 steps 3-5): each method's S is divided by its maximum over
// heads (so methods with different units become comparable, top head = 1), then
//   combined = sum_m w_m S_m / sum_m w_m   over the methods that were run, with
//   w_activation = 1, w_attribution = 1 only when activation patching was not run (it estimates the
//   same quantity; the exact value supersedes it) else 0, w_path = 0.5 (path patching through the
//   receivers' q/k/v: the indirect importance of query-forming / key-matching heads),
//   w_retrieval = 0.25 (copy-paste evidence, a tie-breaker). path_direct (sender -> logits) is
//   reported with weight 0: it is part of the total effect activation patching already measures.
// KV group score = max over the group's query heads of the combined score.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "interp/patching_metric.h"

namespace hydra {

struct ScoreConfig {
    double clip_lo = -1.0, clip_hi = 2.0;  // normalised effects are clipped to this range
    double lambda = 0.5;                   // max-aware mean over tasks
    double min_gap = 0.5;                  // pairs with LD_clean - LD_corrupted below this are skipped
};

// Per-head scores of one method on one task: means over the pairs (or correct trials).
struct TaskHeadScores {
    int64_t count = 0;              // pairs / correct trials averaged
    int64_t skipped = 0;            // pairs below min_gap / incorrect trials
    std::vector<double> score;      // (L*H) mean s (retrieval: mean copy-paste score)
    std::vector<double> denoising;  // (L*H) mean clipped PE (empty for retrieval)
    std::vector<double> noising;    // (L*H) mean clipped NE (empty for retrieval)
};

// Sums pairs into a TaskHeadScores; mean() divides by the count.
class TaskScoreAccumulator {
  public:
    explicit TaskScoreAccumulator(int64_t num_heads_total = 0) : n_(num_heads_total) {}
    // One patching pair. Returns false (and counts it as skipped) when its gap is below min_gap.
    bool add_pair(const HeadPatchResult& r, const ScoreConfig& config);
    // One retrieval trial; correct == false only counts it as skipped.
    void add_trial(const std::vector<double>& scores, bool correct);
    TaskHeadScores mean() const;

  private:
    int64_t n_ = 0, count_ = 0, skipped_ = 0;
    std::vector<double> score_, pe_, ne_;
};

// s = 1/2 (clip(PE)+ + clip(NE)+) of one pair, with the clipped PE and NE.
struct PairHeadScores {
    std::vector<double> score, denoising, noising;  // (L*H)
};
PairHeadScores pair_head_scores(const HeadPatchResult& r, const ScoreConfig& config);

// lambda * max_t + (1 - lambda) * mean_t, elementwise over equally long vectors (at least one).
std::vector<double> max_aware_mean(const std::vector<std::vector<double>>& per_task, double lambda);

struct MethodScores {
    std::map<std::string, TaskHeadScores> tasks;  // by task name
    std::vector<double> heads;                    // (L*H) over tasks (max_aware_mean of the task scores)
    double weight = 0;                            // its weight in the combined score
};

struct ScoreSet {
    int64_t layers = 0, heads = 0, kv_heads = 0;
    ScoreConfig config;
    std::map<std::string, MethodScores> methods;  // activation, attribution, path, path_direct, retrieval
    std::vector<double> aggregate;                // (L*H) combined
    std::vector<double> aggregate_kv;             // (L*Hkv) max over each group's heads
};

// The default weight of a method given which methods are present (see the header comment).
double method_weight(const std::string& method, const std::map<std::string, MethodScores>& present);
// Fills every method's `heads` and `weight`, then `aggregate` and `aggregate_kv`. Methods without a
// task (or whose tasks counted nothing) get zeros. Throws hydra::Error when no method is present.
void aggregate_scores(ScoreSet& set);

// Spearman rank correlation (average ranks for ties); NaN when either side is constant.
double spearman(const std::vector<double>& a, const std::vector<double>& b);
// The k highest-scoring heads as (layer, head), best first (ties: lower index first).
std::vector<std::pair<int64_t, int64_t>> top_heads(const std::vector<double>& scores, int64_t heads_per_layer,
                                                   int64_t k);

}  // namespace hydra
