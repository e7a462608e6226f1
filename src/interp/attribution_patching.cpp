// Attribution patching: backward passes of the teacher with respect to head outputs (see
// attribution_patching.h). The layer backward follows the ops' rules: activation gradients are
// overwritten unless accumulate_dx is set, which the residual stream uses to add a block's input
// gradient to the running dx. Parameter gradients are never formed (dW = null).
#include "interp/attribution_patching.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/gemm.h"
#include "interp/last_position_forward.h"
#include "interp/parallel_jobs.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

namespace hydra {

namespace {

// Backward of the SwiGLU block and its residual for N rows: on entry dx (N, C) is d LD / d(layer
// output); on return d_mid (N, C) holds d LD / d x_mid (x_mid = residual after attention).
template <typename T>
void ffn_backward(const FaWeights<T>& w, int64_t l, int64_t N, const T* dx, const T* x_mid, const T* xn2,
                  const T* rstd2, const T* gate, const T* up, const T* act, T* d_mid) {
    const ModelConfig& c = w.config();
    const FaLayerWeights<T>& p = w.layer(l);
    const int64_t C = c.hidden_size, F = c.intermediate_size;
    std::vector<T> d_act(static_cast<size_t>(N * F)), d_gate(static_cast<size_t>(N * F)),
        d_up(static_cast<size_t>(N * F)), d_xn2(static_cast<size_t>(N * C));
    cpu::linear_backward(d_act.data(), (T*)nullptr, (T*)nullptr, dx, act, p.w_down, N, F, C);
    cpu::swiglu_backward(d_gate.data(), d_up.data(), d_act.data(), gate, up, N * F);
    cpu::linear_backward(d_xn2.data(), (T*)nullptr, (T*)nullptr, d_gate.data(), xn2, p.w_gate, N, C, F);
    cpu::linear_backward(d_xn2.data(), (T*)nullptr, (T*)nullptr, d_up.data(), xn2, p.w_up, N, C, F, true);
    std::memcpy(d_mid, dx, size_t(N * C) * sizeof(T));
    cpu::rmsnorm_backward(d_mid, (T*)nullptr, d_xn2.data(), x_mid, p.ffn_norm, rstd2, N, C, true);
}

// From the gradients of q, k (after RoPE, at positions pos0..pos0+N-1, given as N tokens; or all at
// one position when `one_position` with N rows of H heads) and v down to the layer input:
// dx (N, C) += d LD / d x_in through attention. dq, dk are modified in place.
template <typename T>
void qkv_backward(const FaWeights<T>& w, int64_t l, int64_t N, int64_t pos0, bool one_position, T* dq, T* dk,
                  const T* dv, const T* x_in, const T* xn1, const T* rstd1, const T* q_pre, const T* k_pre,
                  const T* rstd_q, const T* rstd_k, T* dx) {
    const ModelConfig& c = w.config();
    const FaLayerWeights<T>& p = w.layer(l);
    const int64_t C = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, Dh = c.head_dim;
    if (one_position) {
        cpu::rope_backward(dq, 1, N * H, Dh, c.rope_dim, pos0, c.rope_theta);
        cpu::rope_backward(dk, 1, N * Hkv, Dh, c.rope_dim, pos0, c.rope_theta);
    } else {
        cpu::rope_backward(dq, N, H, Dh, c.rope_dim, pos0, c.rope_theta);
        cpu::rope_backward(dk, N, Hkv, Dh, c.rope_dim, pos0, c.rope_theta);
    }
    if (c.qk_norm) {
        cpu::rmsnorm_backward(dq, (T*)nullptr, dq, q_pre, p.q_norm, rstd_q, N * H, Dh);
        cpu::rmsnorm_backward(dk, (T*)nullptr, dk, k_pre, p.k_norm, rstd_k, N * Hkv, Dh);
    }
    std::vector<T> d_xn1(static_cast<size_t>(N * C));
    cpu::linear_backward(d_xn1.data(), (T*)nullptr, (T*)nullptr, dq, xn1, p.wq, N, C, H * Dh);
    cpu::linear_backward(d_xn1.data(), (T*)nullptr, (T*)nullptr, dk, xn1, p.wk, N, C, Hkv * Dh, true);
    cpu::linear_backward(d_xn1.data(), (T*)nullptr, (T*)nullptr, dv, xn1, p.wv, N, C, Hkv * Dh, true);
    cpu::rmsnorm_backward(dx, (T*)nullptr, d_xn1.data(), x_in, p.attn_norm, rstd1, N, C, true);
}

}  // namespace

template <typename T>
std::vector<T> answer_position_head_grad(const FaWeights<T>& w, const FaRun<T>& run, const LogitDiff<T>& ld) {
    const ModelConfig& c = w.config();
    const int64_t L = c.num_layers, C = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, Dh = c.head_dim;
    const int64_t G = H / Hkv, HDh = H * Dh, KVD = Hkv * Dh, P = run.answer_pos(), W = P + 1;
    const T scale = T(1.0 / std::sqrt(double(Dh)));
    // Each layer's answer-position intermediates, recomputed from the run's saved layer input.
    std::vector<LastPosActs<T>> acts(static_cast<size_t>(L));
    std::vector<T> x(static_cast<size_t>(C));
    for (int64_t l = 0; l < L; ++l) {
        std::memcpy(x.data(), run.x_in_last(l, C), size_t(C) * sizeof(T));
        last_position_heads(w, run, l, x.data(), 1, acts[size_t(l)]);
        last_position_finish(w, l, x.data(), 1, acts[size_t(l)]);
    }
    std::vector<T> grad(static_cast<size_t>(L * HDh));
    std::vector<T> dx(static_cast<size_t>(C)), d_mid(static_cast<size_t>(C)), dq(static_cast<size_t>(HDh)),
        dk(static_cast<size_t>(KVD)), dv(static_cast<size_t>(KVD));
    std::vector<T> dp(static_cast<size_t>(G * P)), ds(static_cast<size_t>(G * P));
    ld.backward(run.x_final_last(C), dx.data());
    for (int64_t l = L - 1; l >= 0; --l) {
        const LastPosActs<T>& a = acts[size_t(l)];
        const FaLayerWeights<T>& p = w.layer(l);
        ffn_backward(w, l, 1, dx.data(), a.x_mid.data(), a.xn2.data(), a.rstd2.data(), a.gate.data(),
                     a.up.data(), a.act.data(), d_mid.data());
        T* dz = grad.data() + l * HDh;  // (H, Dh)
        cpu::linear_backward(dz, (T*)nullptr, (T*)nullptr, d_mid.data(), a.heads.data(), p.wo, 1, HDh, C);

        // One query per head over [cached prefix, own key]: with p the weights, dP_j = dz . v_j,
        // dS = p (dP - sum_j p_j dP_j); dq = scale dS K; d k_own = scale dS_P q; d v_own = p_P dz.
        const T* Kc = run.k[size_t(l)].data();
        const T* Vc = run.v[size_t(l)].data();
        std::fill(dk.begin(), dk.end(), T(0));
        std::fill(dv.begin(), dv.end(), T(0));
        for (int64_t g = 0; g < Hkv; ++g) {
            const T* probs = a.probs.data() + g * G * W;  // (G, W): n = 1
            const T* dz_g = dz + g * G * Dh;              // (G, Dh)
            const T* kown = a.k.data() + g * Dh;
            const T* vown = a.v.data() + g * Dh;
            if (P > 0) gemm(false, true, G, P, Dh, T(1), dz_g, Dh, Vc + g * Dh, KVD, T(0), dp.data(), P);
            for (int64_t j = 0; j < G; ++j) {
                const T* pr = probs + j * W;
                const T* dzr = dz_g + j * Dh;
                double dp_own = 0;
                for (int64_t d = 0; d < Dh; ++d) dp_own += double(dzr[d]) * double(vown[d]);
                double D = double(pr[P]) * dp_own;
                for (int64_t t = 0; t < P; ++t) D += double(pr[t]) * double(dp[size_t(j * P + t)]);
                for (int64_t t = 0; t < P; ++t)
                    ds[size_t(j * P + t)] = T(double(pr[t]) * (double(dp[size_t(j * P + t)]) - D));
                const T ds_own = T(double(pr[P]) * (dp_own - D));
                const T* qh = a.q.data() + (g * G + j) * Dh;
                T* dqh = dq.data() + (g * G + j) * Dh;
                for (int64_t d = 0; d < Dh; ++d) {
                    dqh[d] = scale * ds_own * kown[d];
                    dk[size_t(g * Dh + d)] += scale * ds_own * qh[d];
                    dv[size_t(g * Dh + d)] += pr[P] * dzr[d];
                }
            }
            // dq_g += scale dS K_g[0:P]
            if (P > 0)
                gemm(false, false, G, Dh, P, scale, ds.data(), P, Kc + g * Dh, KVD, T(1),
                     dq.data() + g * G * Dh, Dh);
        }
        std::memcpy(dx.data(), d_mid.data(), size_t(C) * sizeof(T));
        qkv_backward(w, l, 1, P, true, dq.data(), dk.data(), dv.data(), run.x_in_last(l, C), a.xn1.data(),
                     a.rstd1.data(), a.q_pre.data(), a.k_pre.data(), a.rstd_q.data(), a.rstd_k.data(),
                     dx.data());
    }
    return grad;
}

template <typename T>
std::vector<std::vector<T>> all_positions_head_grad(const FaWeights<T>& w, const FaRun<T>& run,
                                                    const LogitDiff<T>& ld) {
    const ModelConfig& c = w.config();
    const int64_t L = c.num_layers, C = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, Dh = c.head_dim;
    const int64_t N = run.num_tokens, HDh = H * Dh, KVD = Hkv * Dh;
    HYDRA_CHECK(run.saved_from == 0, "attribution over all positions needs a run that kept every position");
    std::vector<std::vector<T>> grads(static_cast<size_t>(L));
    std::vector<T> dx(size_t(N * C), T(0)), d_mid(static_cast<size_t>(N * C)), x(static_cast<size_t>(N * C));
    std::vector<T> dq(static_cast<size_t>(N * HDh)), dk(static_cast<size_t>(N * KVD)),
        dv(static_cast<size_t>(N * KVD));
    ld.backward(run.x_final_last(C), dx.data() + (N - 1) * C);
    FaLayerActs<T> a;
    for (int64_t l = L - 1; l >= 0; --l) {
        const FaLayerWeights<T>& p = w.layer(l);
        std::memcpy(x.data(), run.x_in[size_t(l)].data(), size_t(N * C) * sizeof(T));
        fa_layer_forward(w, l, x.data(), N, a);  // recompute this layer's intermediates
        ffn_backward(w, l, N, dx.data(), a.x_mid.data(), a.xn2.data(), a.rstd2.data(), a.gate.data(),
                     a.up.data(), a.act.data(), d_mid.data());
        std::vector<T>& dz = grads[size_t(l)];
        dz.resize(size_t(N * HDh));
        cpu::linear_backward(dz.data(), (T*)nullptr, (T*)nullptr, d_mid.data(), a.heads.data(), p.wo, N, HDh,
                             C);
        cpu::causal_attention_backward(dq.data(), dk.data(), dv.data(), dz.data(), a.q.data(), a.k.data(),
                                       a.v.data(), (const T*)nullptr, N, H, Hkv, Dh,
                                       1.0 / std::sqrt(double(Dh)));
        std::memcpy(dx.data(), d_mid.data(), size_t(N * C) * sizeof(T));
        qkv_backward(w, l, N, 0, false, dq.data(), dk.data(), dv.data(), run.x_in[size_t(l)].data(),
                     a.xn1.data(), a.rstd1.data(), a.q_pre.data(), a.k_pre.data(), a.rstd_q.data(),
                     a.rstd_k.data(), dx.data());
    }
    return grads;
}

template <typename T>
HeadPatchResult attribution_patching(const FaWeights<T>& w, const FaRun<T>& clean, const FaRun<T>& corrupted,
                                     const LogitDiff<T>& ld, AttributionPositions positions) {
    const ModelConfig& c = w.config();
    const int64_t L = c.num_layers, H = c.num_heads, Dh = c.head_dim, C = c.hidden_size, HDh = H * Dh;
    HYDRA_CHECK(clean.num_tokens == corrupted.num_tokens,
                "patching pair: the clean prompt has {} tokens, the corrupted one {} (they must be equal)",
                clean.num_tokens, corrupted.num_tokens);
    HeadPatchResult r;
    r.layers = L;
    r.heads = H;
    r.ld_clean = ld(clean.x_final_last(C));
    r.ld_corrupted = ld(corrupted.x_final_last(C));
    // estimate[l*H+h] = base LD + sum over positions of g . (source - base) at that head.
    auto direction = [&](const FaRun<T>& base, const FaRun<T>& source, double ld_base) {
        std::vector<double> est(size_t(L * H), ld_base);
        if (positions == AttributionPositions::Answer) {
            const std::vector<T> g = answer_position_head_grad(w, base, ld);
            for (int64_t l = 0; l < L; ++l)
                for (int64_t h = 0; h < H; ++h) {
                    const T* zs = source.heads_last(l, HDh) + h * Dh;
                    const T* zb = base.heads_last(l, HDh) + h * Dh;
                    const T* gl = g.data() + l * HDh + h * Dh;
                    double s = 0;
                    for (int64_t d = 0; d < Dh; ++d) s += double(gl[d]) * (double(zs[d]) - double(zb[d]));
                    est[size_t(l * H + h)] += s;
                }
        } else {
            HYDRA_CHECK(source.saved_from == 0,
                        "attribution over all positions needs runs that kept every position");
            const auto g = all_positions_head_grad(w, base, ld);
            for (int64_t l = 0; l < L; ++l)
                for (int64_t h = 0; h < H; ++h) {
                    double s = 0;
                    for (int64_t t = 0; t < base.num_tokens; ++t) {
                        const int64_t o = t * HDh + h * Dh;
                        const T* zs = source.heads[size_t(l)].data() + o;
                        const T* zb = base.heads[size_t(l)].data() + o;
                        const T* gl = g[size_t(l)].data() + o;
                        for (int64_t d = 0; d < Dh; ++d) s += double(gl[d]) * (double(zs[d]) - double(zb[d]));
                    }
                    est[size_t(l * H + h)] += s;
                }
        }
        return est;
    };
    // The two directions are independent backward passes: one per thread.
    run_parallel_jobs(2, [&](int64_t d) {
        if (d == 0)
            r.ld_noised = direction(clean, corrupted, r.ld_clean);
        else
            r.ld_denoised = direction(corrupted, clean, r.ld_corrupted);
    });
    return r;
}

template std::vector<float> answer_position_head_grad<float>(const FaWeights<float>&, const FaRun<float>&,
                                                             const LogitDiff<float>&);
template std::vector<double> answer_position_head_grad<double>(const FaWeights<double>&, const FaRun<double>&,
                                                               const LogitDiff<double>&);
template std::vector<std::vector<float>> all_positions_head_grad<float>(const FaWeights<float>&,
                                                                        const FaRun<float>&,
                                                                        const LogitDiff<float>&);
template std::vector<std::vector<double>> all_positions_head_grad<double>(const FaWeights<double>&,
                                                                          const FaRun<double>&,
                                                                          const LogitDiff<double>&);
template HeadPatchResult attribution_patching<float>(const FaWeights<float>&, const FaRun<float>&,
                                                     const FaRun<float>&, const LogitDiff<float>&,
                                                     AttributionPositions);
template HeadPatchResult attribution_patching<double>(const FaWeights<double>&, const FaRun<double>&,
                                                      const FaRun<double>&, const LogitDiff<double>&,
                                                      AttributionPositions);

}  // namespace hydra
