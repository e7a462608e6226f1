// GdnBlock forward and backward (see gdn_block.h): the ops of ops/cpu chained in the order of
// research/gdn.md §1.1, with the carried conv windows and recurrent state.
#include "model/gdn_block.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/cpu/gated_rmsnorm.h"
#include "ops/cpu/gdn_gates.h"
#include "ops/cpu/l2norm.h"
#include "ops/cpu/short_conv.h"

namespace hydra {

namespace {

constexpr double kL2Eps = 1e-6;  // fla's in-kernel q/k L2 norm, inside the square root

template <typename T>
void copy_or_zero(std::vector<T>& dst, const T* src) {
    if (src) std::copy(src, src + dst.size(), dst.begin());
    else std::fill(dst.begin(), dst.end(), T(0));
}

}  // namespace

void GdnConfig::validate() const {
    HYDRA_CHECK(H > 0 && HV > 0 && K > 0 && V > 0, "GDN config: heads and head dims must be positive (H={}, HV={}, "
                "K={}, V={})", H, HV, K, V);
    HYDRA_CHECK(HV % H == 0, "GDN config: value heads HV={} must be a multiple of q/k heads H={}", HV, H);
    HYDRA_CHECK(conv_width >= 1, "GDN config: conv_width={} must be at least 1", conv_width);
    HYDRA_CHECK(chunk_size >= 1, "GDN config: chunk_size={} must be at least 1", chunk_size);
    HYDRA_CHECK(norm_eps > 0, "GDN config: norm_eps={} must be positive", norm_eps);
}

template <typename T>
void GdnState<T>::resize(const GdnConfig& c) {
    const size_t P = size_t(c.conv_width - 1);
    conv_q.assign(P * size_t(c.key_dim()), T(0));
    conv_k.assign(P * size_t(c.key_dim()), T(0));
    conv_v.assign(P * size_t(c.value_dim()), T(0));
    ssm.assign(size_t(c.HV * c.V * c.K), T(0));
}

template <typename T>
int64_t GdnState<T>::numel(const GdnConfig& c) {
    return (c.conv_width - 1) * (2 * c.key_dim() + c.value_dim()) + c.HV * c.V * c.K;
}

template <typename T>
size_t GdnSaved<T>::bytes() const {
    size_t n = 0;
    for (const std::vector<T>* x : {&q, &k, &rstd_q, &rstd_k, &v, &g, &beta, &o, &norm_rstd, &chunk_states})
        n += x->size();
    return n * sizeof(T) + state_in.bytes();
}

template <typename T>
void gdn_block_forward(T* out, const GdnConfig& cfg, const GdnParams<T>& p, const GdnInputs<T>& in,
                       int64_t num_tokens, const GdnStateView<T>* state_in, const GdnStateView<T>* state_out,
                       GdnSaved<T>* saved) {
    cfg.validate();
    HYDRA_ASSERT(num_tokens >= 0, "gdn_block_forward: num_tokens={}", num_tokens);
    const int64_t Tn = num_tokens, H = cfg.H, HV = cfg.HV, K = cfg.K, V = cfg.V, W = cfg.conv_width;
    const int64_t Dk = cfg.key_dim(), Dv = cfg.value_dim();
    thread_local GdnSaved<T> scratch;
    GdnSaved<T>& s = saved ? *saved : scratch;
    s.num_tokens = Tn;
    s.chunked = cfg.use_chunked && Tn > 1;
    s.chunk_size = cfg.chunk_size;
    s.q.resize(size_t(Tn * Dk)), s.k.resize(size_t(Tn * Dk)), s.v.resize(size_t(Tn * Dv));
    s.rstd_q.resize(size_t(Tn * H)), s.rstd_k.resize(size_t(Tn * H));
    s.g.resize(size_t(Tn * HV)), s.beta.resize(size_t(Tn * HV)), s.norm_rstd.resize(size_t(Tn * HV));
    s.o.resize(size_t(Tn * Dv));

    // The entering state. When saving for the backward it is copied first, so that state_out may
    // update the same memory in place.
    const T* prev_q = state_in ? state_in->conv_q : nullptr;
    const T* prev_k = state_in ? state_in->conv_k : nullptr;
    const T* prev_v = state_in ? state_in->conv_v : nullptr;
    const T* ssm_in = state_in ? state_in->ssm : nullptr;
    if (saved) {
        s.has_state_in = state_in != nullptr;
        if (state_in) {
            s.state_in.resize(cfg);
            copy_or_zero(s.state_in.conv_q, prev_q), copy_or_zero(s.state_in.conv_k, prev_k);
            copy_or_zero(s.state_in.conv_v, prev_v), copy_or_zero(s.state_in.ssm, ssm_in);
            prev_q = s.state_in.conv_q.data(), prev_k = s.state_in.conv_k.data();
            prev_v = s.state_in.conv_v.data(), ssm_in = s.state_in.ssm.data();
        } else {
            s.state_in = GdnState<T>();
        }
    }

    cpu::short_conv_forward(s.q.data(), in.q_raw, p.conv_q, prev_q, Tn, Dk, W);
    cpu::short_conv_forward(s.k.data(), in.k_raw, p.conv_k, prev_k, Tn, Dk, W);
    cpu::short_conv_forward(s.v.data(), in.v_raw, p.conv_v, prev_v, Tn, Dv, W);
    cpu::l2norm_forward(s.q.data(), s.rstd_q.data(), s.q.data(), Tn * H, K, kL2Eps);
    cpu::l2norm_forward(s.k.data(), s.rstd_k.data(), s.k.data(), Tn * H, K, kL2Eps);
    cpu::gdn_gate_forward(s.g.data(), in.a_raw, p.A_log, p.dt_bias, Tn, HV);
    cpu::gdn_beta_forward(s.beta.data(), in.b_raw, Tn * HV, cfg.allow_neg_eigval);

    const cpu::GdnDims d = cfg.dims(Tn);
    T* ssm_out = state_out ? state_out->ssm : nullptr;
    if (s.chunked) {
        T* cs = nullptr;
        if (saved) {
            s.chunk_states.resize(size_t(cpu::gdn_chunk_states_numel(d, cfg.chunk_size)));
            cs = s.chunk_states.data();
        }
        cpu::gdn_chunked_forward(s.o.data(), ssm_out, cs, s.q.data(), s.k.data(), s.v.data(), s.g.data(),
                                 s.beta.data(), ssm_in, d, cfg.scale(), cfg.chunk_size);
    } else {
        if (saved) s.chunk_states.clear();
        cpu::gdn_recurrent_forward(s.o.data(), ssm_out, s.q.data(), s.k.data(), s.v.data(), s.g.data(),
                                   s.beta.data(), ssm_in, d, cfg.scale());
    }
    cpu::gated_rmsnorm_forward(out, s.norm_rstd.data(), s.o.data(), in.z, p.norm_w, Tn, HV, V, cfg.norm_eps);

    // Conv windows last: with state_out == state_in they overwrite the windows read above.
    if (state_out) {
        if (state_out->conv_q) cpu::short_conv_next_prev(state_out->conv_q, prev_q, in.q_raw, Tn, Dk, W);
        if (state_out->conv_k) cpu::short_conv_next_prev(state_out->conv_k, prev_k, in.k_raw, Tn, Dk, W);
        if (state_out->conv_v) cpu::short_conv_next_prev(state_out->conv_v, prev_v, in.v_raw, Tn, Dv, W);
    }
}

template <typename T>
void gdn_block_backward(const GdnInputGrads<T>& di, const GdnParamGrads<T>& dp, const GdnStateView<T>* d_state_in,
                        const T* d_out, const GdnStateView<T>* d_state_out, const GdnConfig& cfg,
                        const GdnParams<T>& p, const GdnInputs<T>& in, int64_t num_tokens, const GdnSaved<T>& s) {
    cfg.validate();
    HYDRA_ASSERT(s.num_tokens == num_tokens, "gdn_block_backward: saved record is for {} tokens, not {}",
                 s.num_tokens, num_tokens);
    HYDRA_ASSERT(!s.chunked || s.chunk_size == cfg.chunk_size, "gdn_block_backward: chunk size {} != forward's {}",
                 cfg.chunk_size, s.chunk_size);
    const int64_t Tn = num_tokens, H = cfg.H, HV = cfg.HV, K = cfg.K, V = cfg.V, W = cfg.conv_width;
    const int64_t Dk = cfg.key_dim(), Dv = cfg.value_dim();
    std::vector<T> d_core(size_t(Tn * Dv)), dq(size_t(Tn * Dk)), dk(size_t(Tn * Dk)), dv(size_t(Tn * Dv));
    std::vector<T> dg(size_t(Tn * HV)), dbeta(size_t(Tn * HV));

    cpu::gated_rmsnorm_backward(d_core.data(), di.z, dp.norm_w, d_out, s.o.data(), in.z, p.norm_w,
                                s.norm_rstd.data(), Tn, HV, V);

    const GdnState<T>* st = s.has_state_in ? &s.state_in : nullptr;
    const T* ssm_in = st ? st->ssm.data() : nullptr;
    const T* dso = d_state_out ? d_state_out->ssm : nullptr;
    T* dsi = d_state_in ? d_state_in->ssm : nullptr;
    const cpu::GdnDims d = cfg.dims(Tn);
    if (s.chunked)
        cpu::gdn_chunked_backward(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dsi, d_core.data(), dso,
                                  s.q.data(), s.k.data(), s.v.data(), s.g.data(), s.beta.data(), ssm_in,
                                  s.chunk_states.empty() ? nullptr : s.chunk_states.data(), d, cfg.scale(),
                                  s.chunk_size);
    else
        cpu::gdn_recurrent_backward(dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), dsi, d_core.data(),
                                    dso, s.q.data(), s.k.data(), s.v.data(), s.g.data(), s.beta.data(), ssm_in, d,
                                    cfg.scale());

    cpu::gdn_beta_backward(di.b_raw, dbeta.data(), in.b_raw, Tn * HV, cfg.allow_neg_eigval);
    cpu::gdn_gate_backward(di.a_raw, dp.A_log, dp.dt_bias, dg.data(), in.a_raw, p.A_log, p.dt_bias, Tn, HV);
    cpu::l2norm_backward(dq.data(), dq.data(), s.q.data(), s.rstd_q.data(), Tn * H, K);
    cpu::l2norm_backward(dk.data(), dk.data(), s.k.data(), s.rstd_k.data(), Tn * H, K);

    // Each short conv: through the conv (dx overwritten, d prev overwritten), then the window the
    // forward handed on (both accumulated).
    auto conv_back = [&](T* dx, T* dw, T* dprev_in, const T* dprev_out, const T* dy, const T* x, const T* w,
                         const T* prev, int64_t D) {
        cpu::short_conv_backward(dx, dw, dprev_in, dy, x, w, prev, Tn, D, W);
        if (dprev_out) cpu::short_conv_next_prev_backward(dx, dprev_in, dprev_out, Tn, D, W);
    };
    conv_back(di.q_raw, dp.conv_q, d_state_in ? d_state_in->conv_q : nullptr,
              d_state_out ? d_state_out->conv_q : nullptr, dq.data(), in.q_raw, p.conv_q,
              st ? st->conv_q.data() : nullptr, Dk);
    conv_back(di.k_raw, dp.conv_k, d_state_in ? d_state_in->conv_k : nullptr,
              d_state_out ? d_state_out->conv_k : nullptr, dk.data(), in.k_raw, p.conv_k,
              st ? st->conv_k.data() : nullptr, Dk);
    conv_back(di.v_raw, dp.conv_v, d_state_in ? d_state_in->conv_v : nullptr,
              d_state_out ? d_state_out->conv_v : nullptr, dv.data(), in.v_raw, p.conv_v,
              st ? st->conv_v.data() : nullptr, Dv);
}

template struct GdnState<float>;
template struct GdnState<double>;
template struct GdnSaved<float>;
template struct GdnSaved<double>;

#define HYDRA_INSTANTIATE(T)                                                                                     \
    template void gdn_block_forward<T>(T*, const GdnConfig&, const GdnParams<T>&, const GdnInputs<T>&, int64_t, \
                                       const GdnStateView<T>*, const GdnStateView<T>*, GdnSaved<T>*);            \
    template void gdn_block_backward<T>(const GdnInputGrads<T>&, const GdnParamGrads<T>&, const GdnStateView<T>*, \
                                        const T*, const GdnStateView<T>*, const GdnConfig&, const GdnParams<T>&,  \
                                        const GdnInputs<T>&, int64_t, const GdnSaved<T>&);
HYDRA_INSTANTIATE(float)
HYDRA_INSTANTIATE(double)
#undef HYDRA_INSTANTIATE

}  // namespace hydra
