// The teacher's forward pass over a whole prompt for head scoring, templated on float (scoring) and
// double (finite-difference checks). It runs the model's one decoder layer (model/decoder_layer.h) in
// cache mode, as model/llama_forward.cpp does, and keeps what the scorers read afterwards: every layer's
// keys/values (the cache the answer-position re-runs attend to), each layer's input residual and
// per-head outputs (at the answer position, or at every position for attribution over all
// positions), and the final residual. One pass per prompt; the patched re-runs never redo it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "interp/fa_weights.h"
#include "model/decoder_layer.h"

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
    // A scoring backend's own copy of the run (interp/scoring_backend.h), e.g. the keys/values on the GPU;
    // then k and v may be empty.
    std::shared_ptr<const void> device;

    int64_t answer_pos() const { return num_tokens - 1; }
    int64_t saved_rows() const { return num_tokens - saved_from; }
    // The answer position's rows.
    const T* x_in_last(int64_t l, int64_t C) const { return x_in[size_t(l)].data() + (saved_rows() - 1) * C; }
    const T* heads_last(int64_t l, int64_t HDh) const {
        return heads[size_t(l)].data() + (saved_rows() - 1) * HDh;
    }
    const T* x_final_last(int64_t C) const { return x_final.data() + (saved_rows() - 1) * C; }
};

// Called with a layer's per-head outputs (N, H, Dh) before o_proj; may modify them.
template <typename T>
using HeadHook = std::function<void(int64_t layer, T* heads)>;

// A HeadHook as the layer's tap on head_out.
template <typename T>
class HeadHookTap final : public LayerTapSink<T> {
  public:
    HeadHookTap(const HeadHook<T>& hook, int64_t layer) : hook_(hook), layer_(layer) {}
    bool wants(std::string_view point) const override { return point == "head_out"; }
    void fire(std::string_view point, T* data, const Shape&) const override {
        if (point == "head_out") hook_(layer_, data);
    }

  private:
    const HeadHook<T>& hook_;
    int64_t layer_;
};

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
