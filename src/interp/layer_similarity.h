// Layer-to-layer similarity of a model's residual stream, and of a hybrid's against its teacher, on a
// token stream: each window of tokens runs once through model/llama_forward (the one CPU decoder layer
// in cache mode) with a `blk.*.resid_out` tap that copies every layer's output (T, C); those rows feed
// linear CKA accumulators (interp/linear_cka.h) and, with a teacher, the squared error against the
// teacher's output of the same layer on the same tokens. No second forward: the tap is the only reader.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/llama_model.h"

namespace hydra {

struct LayerSimilarityOptions {
    int64_t window = 512;    // tokens per forward (BOS included); the cache is reset between windows
    int64_t skip_first = 1;  // positions of each window left out of the statistics (see analysis.h)
    int32_t bos_id = -1;     // prepended to every window when >= 0
};

struct TeacherDistance {
    std::vector<double> cka, cka_biased;  // (L) CKA(hybrid layer l, teacher layer l)
    std::vector<double> rel_mse;          // (L) sum |h - h_t|^2 / sum |h_t|^2 over the counted rows
};

struct LayerSimilarity {
    int64_t layers = 0;
    int64_t tokens = 0;  // tokens fed (stream tokens, BOS not counted)
    int64_t rows = 0;    // positions counted in the statistics
    int64_t windows = 0;
    std::vector<std::vector<double>> cka, cka_biased;  // (L, L), the debiased and the biased estimator
    // (L) mean L2 norm of the layer output at each window's position 0 and at the counted positions: how
    // far the attention sink stands out (why skip_first defaults to 1).
    std::vector<double> norm_first, norm_counted;
    std::vector<double>
        norm_counted_max;  // (L) the largest norm among the counted positions (outlier tokens)
    bool has_teacher = false;
    TeacherDistance teacher;
    int64_t accumulator_bytes = 0;
    double seconds = 0;
};

// Windows of `window - (bos >= 0)` stream tokens each, in order, over all of `tokens` (the last window
// may be shorter). teacher: null, or a model with the same number of layers, hidden size and vocabulary
// (hydra::Error otherwise). Throws when the windows leave fewer than 4 counted positions, or a window or
// skip makes no sense. progress(windows done, windows total).
LayerSimilarity layer_similarity(const LlamaModel& model, const LlamaModel* teacher,
                                 std::span<const int32_t> tokens, const LayerSimilarityOptions& options,
                                 const std::function<void(int64_t, int64_t)>& progress = {});

// The number of counted positions `tokens` stream tokens give under `options` (the same cut as above).
int64_t counted_rows(int64_t tokens, const LayerSimilarityOptions& options);

}  // namespace hydra
