// The teacher's forward pass over a whole prompt for head scoring, templated on float (scoring) and
// double (finite-difference checks). It computes exactly what model/llama_forward.cpp computes for an
// all-FA model (same ops, same order) but keeps what the scorers read afterwards: every layer's
// keys/values (the cache the answer-position re-runs attend to), each layer's input residual and
// per-head outputs (at the answer position, or at every position for attribution over all
// positions), and the final residual. One pass per prompt; the patched re-runs never redo it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "interp/fa_weights.h"

namespace hydra {

// One prompt's run. Rows of x_in / heads / x_final start at position saved_from: T - 1 (only the
// answer position) or 0 (every position).
template <typename T>
struct FaRun {
    int64_t num_tokens = 0;             // prompt length T
    int64_t shared_prefix = 0;          // leading positions copied from a shared run (not recomputed)
    int64_t saved_from = 0;             // first position whose rows are kept in x_in, heads, x_final
    std::vector<std::vector<T>> x_in;   // [L] (T - saved_from, C) input residual of each layer
    std::vector<std::vector<T>> k, v;   // [L] (T, Hkv, Dh): keys after RoPE, values (the KV cache)
    std::vector<std::vector<T>> heads;  // [L] (T - saved_from, H, Dh) per-head outputs before o_proj
    std::vector<T> x_final;  // (T - saved_from, C) residual after the last layer, before the final norm

    int64_t answer_pos() const { return num_tokens - 1; }
    int64_t saved_rows() const { return num_tokens - saved_from; }
    // The answer position's rows.
    const T* x_in_last(int64_t l, int64_t C) const { return x_in[size_t(l)].data() + (saved_rows() - 1) * C; }
    const T* heads_last(int64_t l, int64_t HDh) const {
        return heads[size_t(l)].data() + (saved_rows() - 1) * HDh;
    }
    const T* x_final_last(int64_t C) const { return x_final.data() + (saved_rows() - 1) * C; }
};

// Everything one layer computes over N rows, kept for its backward pass (and reused as scratch).
template <typename T>
struct FaLayerActs {
    std::vector<T> xn1, rstd1;      // (N, C), (N): RMSNorm of the layer input
    std::vector<T> q_pre, k_pre;    // (N, H*Dh), (N, Hkv*Dh) before q/k norm (qk_norm only)
    std::vector<T> rstd_q, rstd_k;  // (N*H), (N*Hkv) (qk_norm only)
    std::vector<T> q, k, v;         // (N, H, Dh), (N, Hkv, Dh), (N, Hkv, Dh) after RoPE
    std::vector<T> heads;           // (N, H, Dh) per-head attention output (after the hook)
    std::vector<T> x_mid;           // (N, C) residual after attention
    std::vector<T> xn2, rstd2;      // (N, C), (N)
    std::vector<T> gate, up, act;   // (N, F): projections and silu(gate) * up
    std::vector<T> proj;            // (N, C) scratch for o_proj / down_proj outputs
};

// Called with a layer's per-head outputs (N, H, Dh) before o_proj; may modify them.
template <typename T>
using HeadHook = std::function<void(int64_t layer, T* heads)>;

// One decoder layer over N tokens at positions pos0..pos0+N-1: x (N, C) is the layer input on entry
// and its output on return; acts receives the intermediates (acts.k/v: the N new rows). With
// k_cache/v_cache ((pos0+N, Hkv, Dh) at least) the new rows are written there at pos0 and attention
// reads rows [0, pos0+N); without them pos0 must be 0 and the tokens attend to each other only.
template <typename T>
void fa_layer_forward(const FaWeights<T>& w, int64_t layer, T* x, int64_t N, FaLayerActs<T>& acts,
                      const HeadHook<T>& hook = {}, int64_t pos0 = 0, T* k_cache = nullptr,
                      T* v_cache = nullptr);

// The whole prompt. Token ids are checked (hydra::Error). save_all_positions keeps x_in/heads/x_final
// at every position (attribution over all positions) instead of the answer position only.
// share: an earlier run (same weights) of a prompt that starts with the same tokens, e.g. the other
// prompt of a patching pair: its keys/values (and saved rows) of the common prefix are reused and only
// positions from the first differing token are computed (a value swap at depth d costs 1 - d of a
// pass, a key swap in the question almost nothing). Not allowed with a hook.
template <typename T>
FaRun<T> fa_forward(const FaWeights<T>& w, std::span<const int32_t> tokens, bool save_all_positions = false,
                    const HeadHook<T>& hook = {}, const FaRun<T>* share = nullptr,
                    std::span<const int32_t> share_tokens = {});

}  // namespace hydra
