// Named taps: read or overwrite any intermediate of the forward pass by name. Activation and path
// patching, the retrieval score, stage-1 targets and debugging against a reference all use this one
// mechanism instead of special cases in the model code.
//
// Names: global points "embed" (T, C), "final_norm" (T, C); per-layer points "blk.<L>.<point>" with
//   attn_norm (T, C)   input of the mixer after RMSNorm
//   q (T, n_fa, Dh), k (T, n_kv, Dh)   after RoPE;  v (T, n_kv, Dh)   (FA heads only; the teacher
//                 has n_fa = H, n_kv = Hkv)
//   head_out (T, H, Dh)   per-head mixer output (FA heads first, then LA heads), before the fusion and
//                 o_proj (patch heads here; HybridPlan maps positions back to teacher heads)
//   fused_out (T, H, Dh)  after the fusion (only in layers that have LA heads)
//   attn_probs (T, n_fa, S)  attention weights; only computed when a hook asks for it (read-only)
//   attn_out (T, C)   after o_proj;  resid_mid (T, C)   residual after attention
//   ffn_norm (T, C);  ffn_out (T, C);  resid_out (T, C)   the layer's output hidden state
// A hook registered for "blk.*.<point>" fires for every layer. Hooks may modify the tensor in place.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace hydra {

class Taps {
public:
    // layer is -1 for global points.
    using Hook = std::function<void(std::string_view point, int layer, Tensor& value)>;

    void on(const std::string& name, Hook hook);
    void clear() { hooks_.clear(); }
    bool empty() const { return hooks_.empty(); }
    bool wants(std::string_view point, int layer) const;
    void fire(std::string_view point, int layer, Tensor& value) const;

private:
    struct Entry {
        std::string point;
        int layer;  // -1: global point; -2: every layer
        Hook hook;
    };
    std::vector<Entry> hooks_;
};

}  // namespace hydra
