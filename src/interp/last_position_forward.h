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

// One layer's intermediates for n rows at the answer position (scratch, and the saved state of the
// single-row backward in attribution_patching).
template <typename T>
struct LastPosActs {
    int64_t rows = 0, prefix = 0;   // n, P
    std::vector<T> xn1, rstd1;      // (n, C), (n)
    std::vector<T> q_pre, k_pre;    // (n, H*Dh), (n, Hkv*Dh) before q/k norm (qk_norm only)
    std::vector<T> rstd_q, rstd_k;  // (n*H), (n*Hkv) (qk_norm only)
    std::vector<T> q, k, v;  // (n, H, Dh), (n, Hkv, Dh), (n, Hkv, Dh): the copies' own query, key, value
    // (Hkv, n*G, P+1) attention weights, group-major: row b*G + j of group g is head g*G + j of copy b;
    // columns 0..P-1 are the cached prefix, column P the copy's own key.
    std::vector<T> probs;
    std::vector<T> heads;          // (n, H, Dh)
    std::vector<T> x_mid;          // (n, C)
    std::vector<T> xn2, rstd2;     // (n, C), (n)
    std::vector<T> gate, up, act;  // (n, F)
    std::vector<T> proj;           // (n, C)
    std::vector<T> qg, og;         // (n*G, Dh) packed group scratch
};

// The attention half of layer `layer` for n copies whose layer inputs (answer position) are x (n, C):
// a.heads (n, H, Dh) receives the per-head outputs; a.xn1 .. a.probs the intermediates.
template <typename T>
void last_position_heads(const FaWeights<T>& w, const FaRun<T>& base, int64_t layer, const T* x, int64_t n,
                         LastPosActs<T>& a);

// The rest of the layer from a.heads (after any patch): x (n, C) += o_proj(heads), then the SwiGLU block.
template <typename T>
void last_position_finish(const FaWeights<T>& w, int64_t layer, T* x, int64_t n, LastPosActs<T>& a);

// Runs every copy through the network and returns their final residuals at the answer position
// (before the final norm): (copies, C). At most max_batch copies share one batch; batches run as
// parallel jobs (parallel_jobs.h), so a copy's rounding may depend on the thread count (1e-6 level).
template <typename T>
std::vector<T> last_position_sweep(const FaWeights<T>& w, const FaRun<T>& base,
                                   std::span<const PatchedCopy<T>> copies, int64_t max_batch = 96);

}  // namespace hydra
