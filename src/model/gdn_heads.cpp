// LA heads of a hybrid layer at inference (see gdn_heads.h).
#include "model/gdn_heads.h"

#include "core/tensor.h"
#include "ops/cpu/linear.h"

namespace hydra {

GdnConfig gdn_config(const GdnSettings& s, int64_t n_la, int64_t head_dim) {
    GdnConfig c;
    c.H = n_la;
    c.HV = n_la;
    c.K = head_dim;
    c.V = head_dim;
    c.conv_width = s.conv_size;
    c.allow_neg_eigval = s.allow_neg_eigval;
    c.use_chunked = true;
    c.chunk_size = s.chunk_size;
    c.norm_eps = s.norm_eps;
    return c;
}

void gdn_heads_forward(float* out, const float* xn, const LayerWeights& w, const GdnSettings& settings,
                       GdnLayerState& state, int64_t T, int64_t C, int64_t Dh) {
    const GdnWeights& g = w.la;
    const int64_t n = w.n_la, D = n * Dh;
    auto bias = [](const Tensor& b) { return b.empty() ? (const float*)nullptr : b.f32(); };
    // (T, D) q/k/v/z and (T, n) a/b projections of the same input.
    Tensor q = Tensor::zeros({T, D}), k = Tensor::zeros({T, D}), v = Tensor::zeros({T, D}), z = Tensor::zeros({T, D});
    Tensor a = Tensor::zeros({T, n}), b = Tensor::zeros({T, n});
    cpu::linear_forward(q.f32(), xn, g.wq.f32(), bias(g.bq), T, C, D);
    cpu::linear_forward(k.f32(), xn, g.wk.f32(), bias(g.bk), T, C, D);
    cpu::linear_forward(v.f32(), xn, g.wv.f32(), bias(g.bv), T, C, D);
    cpu::linear_forward(z.f32(), xn, g.wg.f32(), (const float*)nullptr, T, C, D);
    cpu::linear_forward(a.f32(), xn, g.wa.f32(), (const float*)nullptr, T, C, n);
    cpu::linear_forward(b.f32(), xn, g.wb.f32(), (const float*)nullptr, T, C, n);

    const GdnConfig cfg = gdn_config(settings, n, Dh);
    const GdnParams<float> params{g.conv_q.f32(), g.conv_k.f32(), g.conv_v.f32(),
                                  g.A_log.f32(),  g.dt_bias.f32(), g.o_norm.f32()};
    const GdnInputs<float> in{q.f32(), k.f32(), v.f32(), a.f32(), b.f32(), z.f32()};
    const GdnStateView<float> view{state.conv_q.f32(), state.conv_k.f32(), state.conv_v.f32(), state.recurrent.f32()};
    gdn_block_forward(out, cfg, params, in, T, &view, &view, (GdnSaved<float>*)nullptr);
}

}  // namespace hydra
