// Answer-position re-runs: the core of exact activation and path patching at decode-step cost.
//
// Every patch in head scoring touches head outputs at the answer-producing position only (the last
// prompt token, methods.md §5). By causality such a patch changes nothing at earlier positions, so the
// base run's keys/values of positions [0, P) (P = T - 1) stay valid for every patched copy, and only
// the last position has to be recomputed, from the first patched layer upward. A copy is one
// independent single-token step at position P that attends to the shared cached prefix plus its own
// key/value; B copies are a batch of B rows sharing that prefix (one GEMM per weight for all of them).
//
// The sweep runs many copies at once: copies are ordered by their first patched layer; at layer l the
// copies that start at l join the batch (their input is the base run's layer input there), so the
// batch grows from the heads of layer 0 to all copies by the last layer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "interp/fa_forward.h"
#include "interp/fa_weights.h"
#include "model/decoder_layer.h"

namespace hydra {

// Replace head `head` of layer `layer` at the answer position by `value` (Dh), which the caller
// keeps alive (usually a row of another run's heads).
template <typename T>
struct HeadPatch {
    int64_t layer = 0, head = 0;
    const T* value = nullptr;
};

// One patched copy of the base run: any number of head patches, in any layers.
template <typename T>
struct PatchedCopy {
    std::vector<HeadPatch<T>> patches;
    int64_t first_layer(int64_t num_layers) const;  // num_layers when there is no patch
};

// The copies' indices by their first patched layer (stable), after checking every patch against a model of
// num_layers x num_heads (a clear error naming the patch). A sweep runs them in this order, so that the
// copies active at a layer are a prefix. start (copies) is OVERWRITTEN with each copy's first layer.
template <typename T>
std::vector<int64_t> copies_by_first_layer(std::span<const PatchedCopy<T>> copies, int64_t num_layers,
                                           int64_t num_heads, std::vector<int64_t>& start);

// The decoder layer's shared-prefix mode for n copies at the answer position of `base` in layer
// `layer`: each row attends to the base run's keys/values of [0, P) plus its own (model/decoder_layer.h).
template <typename T>
LayerRun<T> last_position_run(const FaRun<T>& base, int64_t layer, int64_t n) {
    LayerRun<T> run;
    run.batch = n;
    run.seq_len = 1;
    run.pos0 = base.answer_pos();
    run.prefix_k = base.k[size_t(layer)].data();
    run.prefix_v = base.v[size_t(layer)].data();
    return run;
}

// Runs every copy through the network and returns their final residuals at the answer position
// (before the final norm): (copies, C). At most max_batch copies share one batch; batches run as
// parallel jobs (parallel_jobs.h), so a copy's rounding may depend on the thread count (1e-6 level).
template <typename T>
std::vector<T> last_position_sweep(const FaWeights<T>& w, const FaRun<T>& base,
                                   std::span<const PatchedCopy<T>> copies, int64_t max_batch = 96);

// heads (n, H, Dh) OVERWRITTEN with layer `layer`'s mixer outputs at the answer position of `base` for
// the n inputs X (n, C), at most max_batch rows per call of the layer.
template <typename T>
void answer_position_mixer(const FaWeights<T>& w, const FaRun<T>& base, int64_t layer, const T* X, int64_t n,
                           T* heads, int64_t max_batch);

}  // namespace hydra
