// GPU parity of the element-wise and normalisation layer ops against their CPU float references:
// embedding, RMSNorm, RoPE (unscaled and with each RoPE scaling's frequencies), SwiGLU, the GDN short conv,
// GDN gates, gated RMSNorm, head fusion (every FusionKind) and the element-wise helpers, forward and
// backward. Accumulated (+=) outputs start from random values and are compared as increments. Tolerance 1e-2
// where the GPU output is bf16, 1e-5 where it is fp32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "device_io.h"
#include "gpu/gpu_rope.h"
#include "model/fusion.h"
#include "model/hybrid_plan.h"
#include "model/model_config.h"
#include "model/rope_scaling.h"
#include "op_case.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/gated_rmsnorm.h"
#include "ops/cpu/gdn_gates.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/short_conv.h"
#include "ops/cpu/swiglu.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/fusion.h"
#include "ops/cuda/gated_rmsnorm.h"
#include "ops/cuda/gdn_gates.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/short_conv.h"
#include "ops/cuda/swiglu.h"
#include "parity.h"
#include "train/token_groups.h"

// fusion.cu maps hydra::FusionKind by its enumerator values.
static_assert(int(hydra::FusionKind::ScaleNorm) == 0 && int(hydra::FusionKind::None) == 1 &&
                  int(hydra::FusionKind::Hymba) == 2 && int(hydra::FusionKind::LaOnly) == 3,
              "ops/cuda/fusion.cu assumes these FusionKind values");

namespace hydra::gputest {

namespace cu = hydra::cuda;

namespace {

size_t sz(int64_t n) {
    return size_t(n);
}

void run_embedding(int64_t N, int64_t V, int64_t C, Rng& rng) {
    std::vector<int32_t> ids(sz(N));
    for (auto& i : ids) i = int32_t(uniform_below(rng, V));
    for (int64_t n = 5; n < N; n += 7) ids[sz(n)] = ids[sz(n - 3)];  // repeated tokens
    auto table = bf16_values(sz(V * C), rng);
    auto dx = f32_values(sz(N * C), rng);
    auto dt0 = f32_values(sz(V * C), rng, 0.1f);
    std::vector<float> x_ref(sz(N * C)), dt_ref = dt0;
    cpu::embedding_forward<float>(x_ref.data(), ids.data(), table.data(), N, V, C);
    cpu::embedding_backward<float>(dt_ref.data(), dx.data(), ids.data(), N, V, C);

    auto dids = dev_i32(ids);
    auto dtab = dev_bf16(table);
    auto dtab32 = dev_f32(table);
    auto ddx = dev_f32(dx);
    auto ddt = dev_f32(dt0);
    Dev<float> x(N * C);
    cu::embedding_forward(x.p(), dids.p(), dtab.p(), N, V, C);
    expect_rel("embedding fwd x", host(x), x_ref, kTolF32);
    x.poison();
    cu::embedding_forward(x.p(), dids.p(), dtab32.p(), N, V, C);
    expect_rel("embedding fwd f32 table x", host(x), x_ref, kTolF32);
    cu::embedding_backward(ddt.p(), ddx.p(), dids.p(), N, V, C);
    expect_delta("embedding bwd dtable+=", host(ddt), dt_ref, dt0, kTolF32);
    // the deterministic backward: the CPU's sums in the CPU's order, so the same bits (a second call too)
    std::vector<int32_t> packed, counts;
    group_tokens(ids, V, packed, counts);
    auto dgroups = dev_i32(packed);
    for (int call = 0; call < 2; ++call) {
        auto ddt_grouped = dev_f32(dt0);
        cu::embedding_backward_grouped(ddt_grouped.p(), ddx.p(), dgroups.p(), N, C);
        expect_exact("embedding bwd grouped: elements differing from the CPU",
                     bit_mismatches(host(ddt_grouped), dt_ref));
    }
}

// The decode conv of q, k and v in one launch against three short_conv_forward calls (contiguous windows)
// and three short_conv_forward_slots calls (windows in a slot pool, rows on scattered slots): the same
// outputs and next windows, bit for bit.
void run_short_conv_decode(int64_t B, int64_t D, int64_t W, int64_t pad, Rng& rng) {
    const int64_t P = W - 1, xs = 3 * D + pad, n_slots = B + 3, stride = P * D + 5;
    auto x = bf16_values(sz(B * xs), rng);
    std::vector<std::vector<float>> w(3), win(3), pool(3);
    for (int g = 0; g < 3; ++g) {
        w[sz(g)] = f32_values(sz(D * W), rng, 0.5f);
        win[sz(g)] = f32_values(sz(B * P * D), rng);
        pool[sz(g)] = f32_values(sz(n_slots * stride), rng);
    }
    std::vector<int32_t> slots(sz(B));
    for (int64_t b = 0; b < B; ++b) slots[sz(b)] = int32_t((b * 2 + 1) % n_slots);  // distinct for B < 4
    auto dX = dev_bf16(x);
    auto dslots = dev_i32(slots);
    long long out_differ = 0, win_differ = 0;
    for (int with_slots = 0; with_slots < 2; ++with_slots) {
        std::vector<Dev<float>> wd, ref_win, fused_win;
        std::vector<Dev<bf16>> ref_out, fused_out;
        for (int g = 0; g < 3; ++g) {
            wd.push_back(dev_f32(w[sz(g)]));
            const std::vector<float>& w0 = with_slots ? pool[sz(g)] : win[sz(g)];
            ref_win.push_back(dev_f32(w0));
            fused_win.push_back(dev_f32(w0));
            ref_out.emplace_back(B * D);
            fused_out.emplace_back(B * D);
        }
        cu::ConvDecodeGroups cg;
        for (int g = 0; g < 3; ++g) {
            if (with_slots)
                cu::short_conv_forward_slots(ref_out[sz(g)].p(), ref_win[sz(g)].p(), dslots.p(), stride,
                                             dX.p() + g * D, xs, wd[sz(g)].p(), B, 1, D, W);
            else
                cu::short_conv_forward(ref_out[sz(g)].p(), ref_win[sz(g)].p(), dX.p() + g * D, xs,
                                       wd[sz(g)].p(), ref_win[sz(g)].p(), B, 1, D, W);
            cg.out[g] = fused_out[sz(g)].p(), cg.windows[g] = fused_win[sz(g)].p(), cg.w[g] = wd[sz(g)].p();
        }
        cu::short_conv_decode_qkv(cg, dX.p(), xs, with_slots ? dslots.p() : nullptr, with_slots ? stride : 0,
                                  B, D, W);
        for (int g = 0; g < 3; ++g) {
            out_differ += bit_mismatches(host(fused_out[sz(g)]), host(ref_out[sz(g)]));
            win_differ += bit_mismatches(host(fused_win[sz(g)]), host(ref_win[sz(g)]));
        }
    }
    expect_exact("short_conv decode qkv: outputs differing from the per-group calls", out_differ);
    expect_exact("short_conv decode qkv: window elements differing", win_differ);
}

void run_rmsnorm(int64_t N, int64_t C, Rng& rng) {
    const float eps = 1e-5f;
    auto x = f32_values(sz(N * C), rng, 2.f);
    auto w = f32_values(sz(C), rng, 0.2f, 1.f);
    auto dy = bf16_values(sz(N * C), rng);
    auto dx0 = f32_values(sz(N * C), rng);
    auto dw0 = f32_values(sz(C), rng, 0.1f);
    std::vector<float> y_ref(sz(N * C)), rstd_ref(sz(N)), dx_ref = dx0, dw_ref = dw0;
    cpu::rmsnorm_forward<float>(y_ref.data(), rstd_ref.data(), x.data(), w.data(), N, C, eps);
    cpu::rmsnorm_backward<float>(dx_ref.data(), dw_ref.data(), dy.data(), x.data(), w.data(), rstd_ref.data(),
                                 N, C, true);

    auto dX = dev_f32(x), dW = dev_f32(w), dDy32 = dev_f32(dy);
    auto dDy = dev_bf16(dy);
    Dev<bf16> y(N * C);
    Dev<float> y32(N * C), rstd(N);
    cu::rmsnorm_forward(y.p(), rstd.p(), dX.p(), dW.p(), N, C, eps);
    expect_rel("rmsnorm fwd y bf16", host(y), y_ref, kTolBf16);
    expect_rel("rmsnorm fwd rstd", host(rstd), rstd_ref, kTolF32);
    cu::rmsnorm_forward(y32.p(), nullptr, dX.p(), dW.p(), N, C, eps);
    expect_rel("rmsnorm fwd f32 out y", host(y32), y_ref, kTolF32);
    {  // in place fp32 (y aliases x)
        auto xi = dev_f32(x);
        cu::rmsnorm_forward(xi.p(), nullptr, xi.p(), dW.p(), N, C, eps);
        expect_rel("rmsnorm fwd f32 inplace y", host(xi), y_ref, kTolF32);
    }
    for (int f32dy = 0; f32dy < 2; ++f32dy) {
        auto ddx = dev_f32(dx0), ddw = dev_f32(dw0);
        if (f32dy)
            cu::rmsnorm_backward(ddx.p(), ddw.p(), dDy32.p(), dX.p(), dW.p(), rstd.p(), N, C);
        else
            cu::rmsnorm_backward(ddx.p(), ddw.p(), dDy.p(), dX.p(), dW.p(), rstd.p(), N, C);
        const std::string op = f32dy ? "rmsnorm bwd f32 dy" : "rmsnorm bwd";
        expect_delta(op + " dx+=", host(ddx), dx_ref, dx0, kTolF32);
        expect_delta(op + " dw+=", host(ddw), dw_ref, dw0, kTolF32);
    }
    {  // the bf16-copy overload with the copy left out (null)
        auto ddx = dev_f32(dx0), ddw = dev_f32(dw0);
        cu::rmsnorm_backward(ddx.p(), static_cast<bf16*>(nullptr), ddw.p(), dDy32.p(), dX.p(), dW.p(),
                             rstd.p(), N, C);
        expect_delta("rmsnorm bwd bf16 dx=null dx+=", host(ddx), dx_ref, dx0, kTolF32);
    }
    {  // fp32 dy, the updated dx also written as bf16
        auto ddx = dev_f32(dx0), ddw = dev_f32(dw0);
        Dev<bf16> dxb(N * C);
        cu::rmsnorm_backward(ddx.p(), dxb.p(), ddw.p(), dDy32.p(), dX.p(), dW.p(), rstd.p(), N, C);
        expect_delta("rmsnorm bwd +bf16 dx dx+=", host(ddx), dx_ref, dx0, kTolF32);
        expect_rel("rmsnorm bwd +bf16 dx dx bf16", host(dxb), dx_ref, kTolBf16);
        expect_delta("rmsnorm bwd +bf16 dx dw+=", host(ddw), dw_ref, dw0, kTolF32);
    }
}

void run_rope(int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0, Rng& rng) {
    const double theta = 10000.0;
    const int64_t row = H * Dh, n = num_seqs * T * row, half = rope_dim / 2;
    auto x = bf16_values(sz(n), rng);
    std::vector<float> f_ref = x, b_ref = x, cos_ref(sz(T * half)), sin_ref(sz(T * half));
    for (int64_t s = 0; s < num_seqs; ++s) {
        cpu::rope_forward<float>(f_ref.data() + s * T * row, T, H, Dh, rope_dim, pos0, theta);
        cpu::rope_backward<float>(b_ref.data() + s * T * row, T, H, Dh, rope_dim, pos0, theta);
    }
    cpu::rope_table<float>(cos_ref.data(), sin_ref.data(), T, rope_dim, pos0, theta);

    Dev<float> c(T * half), sn(T * half);
    cu::rope_table(c.p(), sn.p(), T, rope_dim, pos0, theta);
    expect_rel("rope table cos", host(c), cos_ref, kTolF32);
    expect_rel("rope table sin", host(sn), sin_ref, kTolF32);
    {
        auto d = dev_bf16(x);
        cu::rope_forward(d.p(), num_seqs, T, H, Dh, rope_dim, c.p(), sn.p());
        expect_rel("rope fwd table x", host(d), f_ref, kTolBf16);
    }
    {
        auto d = dev_bf16(x);
        cu::rope_backward(d.p(), num_seqs, T, H, Dh, rope_dim, c.p(), sn.p());
        expect_rel("rope bwd table dx", host(d), b_ref, kTolBf16);
    }
    {
        auto d = dev_bf16(x);
        cu::rope_forward(d.p(), num_seqs, T, H, Dh, rope_dim, pos0, theta);
        expect_rel("rope fwd angles x", host(d), f_ref, kTolBf16);
    }
    {
        auto d = dev_bf16(x);
        cu::rope_backward(d.p(), num_seqs, T, H, Dh, rope_dim, pos0, theta);
        expect_rel("rope bwd angles dx", host(d), b_ref, kTolBf16);
    }
    {  // strided: the tensor is the middle slice of a wider (fused QKV-like) row; the rest must not move
        const int64_t pre = 2 * Dh, stride = pre + row + 3 * Dh, rows = num_seqs * T;
        auto buf = bf16_values(sz(rows * stride), rng);
        std::vector<float> fw = buf, bw = buf;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t k = 0; k < row; ++k) {
                fw[sz(r * stride + pre + k)] = f_ref[sz(r * row + k)];
                bw[sz(r * stride + pre + k)] = b_ref[sz(r * row + k)];
                buf[sz(r * stride + pre + k)] = x[sz(r * row + k)];
            }
        auto d = dev_bf16(buf);
        cu::rope_forward_strided(d.p() + pre, stride, num_seqs, T, H, Dh, rope_dim, c.p(), sn.p());
        expect_rel("rope fwd strided x", host(d), fw, kTolBf16);
        auto e = dev_bf16(buf);
        cu::rope_backward_strided(e.p() + pre, stride, num_seqs, T, H, Dh, rope_dim, c.p(), sn.p());
        expect_rel("rope bwd strided dx", host(e), bw, kTolBf16);
    }
}

// RoPE with a scaled model's frequencies (gpu_rope_freqs from model/rope_scaling) against the CPU table of
// the same call (rope_frequencies at L = pos0 + T): the device table, rotation by it forward and backward,
// the on-the-fly angles, and the device-position decode form at the last position (L = p + 1: dynamic NTK's
// base computed in the kernel).
void run_rope_scaled(const std::string& spec, int64_t max_pos, int64_t num_seqs, int64_t T, int64_t H,
                     int64_t Dh, int64_t pos0, Rng& rng) {
    ModelConfig mc;
    mc.head_dim = mc.rope_dim = Dh;
    mc.rope_theta = 10000.f;
    mc.max_position_embeddings = max_pos;
    mc.rope_scaling = parse_rope_scaling_spec(spec);
    validate_rope_scaling(mc.rope_scaling, max_pos, spec);
    const cu::RopeFreqs freqs = gpu::gpu_rope_freqs(mc);
    const int64_t row = H * Dh, n = num_seqs * T * row, half = Dh / 2;
    auto cpu_table = [&](int64_t t0, int64_t count, int64_t seq_len, std::vector<float>& cs,
                         std::vector<float>& sn) {
        const RopeFrequencies f = rope_frequencies(mc, seq_len);
        cs.resize(sz(count * half)), sn.resize(sz(count * half));
        cpu::rope_table<float>(cs.data(), sn.data(), count, Dh, t0, f.inv_freq.data(), f.attention_scale);
    };
    std::vector<float> cos_ref, sin_ref;
    cpu_table(pos0, T, pos0 + T, cos_ref, sin_ref);
    auto x = bf16_values(sz(n), rng);
    std::vector<float> f_ref = x, b_ref = x;
    for (int64_t s = 0; s < num_seqs; ++s) {
        cpu::rope_forward<float>(f_ref.data() + s * T * row, T, H, Dh, Dh, cos_ref.data(), sin_ref.data());
        cpu::rope_backward<float>(b_ref.data() + s * T * row, T, H, Dh, Dh, cos_ref.data(), sin_ref.data());
    }
    Dev<float> c(T * half), sn(T * half);
    cu::rope_table(c.p(), sn.p(), T, Dh, pos0, freqs);
    expect_rel(spec + " table cos", host(c), cos_ref, kTolF32);
    expect_rel(spec + " table sin", host(sn), sin_ref, kTolF32);
    {
        auto d = dev_bf16(x);
        cu::rope_forward(d.p(), num_seqs, T, H, Dh, Dh, c.p(), sn.p());
        expect_rel(spec + " fwd table x", host(d), f_ref, kTolBf16);
        auto e = dev_bf16(x);
        cu::rope_backward(e.p(), num_seqs, T, H, Dh, Dh, c.p(), sn.p());
        expect_rel(spec + " bwd table dx", host(e), b_ref, kTolBf16);
    }
    {
        auto d = dev_bf16(x);
        cu::rope_forward(d.p(), num_seqs, T, H, Dh, Dh, pos0, freqs);
        expect_rel(spec + " fwd angles x", host(d), f_ref, kTolBf16);
    }
    {  // one token at the last position, its position read on the device
        const int64_t p = pos0 + T - 1;
        std::vector<float> cs, snv, one(x.begin(), x.begin() + row);
        cpu_table(p, 1, p + 1, cs, snv);
        std::vector<float> ref = one;
        cpu::rope_forward<float>(ref.data(), 1, H, Dh, Dh, cs.data(), snv.data());
        auto d = dev_bf16(one);
        auto pos = dev_i32({int32_t(p)});
        cu::rope_forward_decode(d.p(), H, Dh, Dh, pos.p(), freqs);
        expect_rel(spec + " decode x", host(d), ref, kTolBf16);
    }
}

void run_swiglu(int64_t N, int64_t I, Rng& rng) {
    const size_t n = sz(N * I);
    auto gate = bf16_values(n, rng, 2.f), upv = bf16_values(n, rng), dout = bf16_values(n, rng);
    std::vector<float> out_ref(n), dg_ref(n), du_ref(n);
    cpu::swiglu_forward<float>(out_ref.data(), gate.data(), upv.data(), int64_t(n));
    cpu::swiglu_backward<float>(dg_ref.data(), du_ref.data(), dout.data(), gate.data(), upv.data(),
                                int64_t(n));

    auto dG = dev_bf16(gate), dU = dev_bf16(upv), dO = dev_bf16(dout);
    Dev<bf16> out{int64_t(n)}, dg{int64_t(n)}, du{int64_t(n)};
    cu::swiglu_forward(out.p(), dG.p(), dU.p(), N, I, 0);
    expect_rel("swiglu fwd out", host(out), out_ref, kTolBf16);
    cu::swiglu_backward(dg.p(), du.p(), dO.p(), dG.p(), dU.p(), N, I, 0, 0);
    expect_rel("swiglu bwd dgate", host(dg), dg_ref, kTolBf16);
    expect_rel("swiglu bwd dup", host(du), du_ref, kTolBf16);

    // fused (N, 2I) gate_up rows, gradients into a fused (N, 2I) buffer
    std::vector<float> fused(2 * n);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t i = 0; i < I; ++i) {
            fused[sz(r * 2 * I + i)] = gate[sz(r * I + i)];
            fused[sz(r * 2 * I + I + i)] = upv[sz(r * I + i)];
        }
    auto dF = dev_bf16(fused);
    Dev<bf16> dfused{int64_t(2 * n)};
    out.poison();
    cu::swiglu_forward(out.p(), dF.p(), dF.p() + I, N, I, 2 * I);
    expect_rel("swiglu fwd fused out", host(out), out_ref, kTolBf16);
    cu::swiglu_backward(dfused.p(), dfused.p() + I, dO.p(), dF.p(), dF.p() + I, N, I, 2 * I, 2 * I);
    std::vector<float> dref(2 * n);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t i = 0; i < I; ++i) {
            dref[sz(r * 2 * I + i)] = dg_ref[sz(r * I + i)];
            dref[sz(r * 2 * I + I + i)] = du_ref[sz(r * I + i)];
        }
    expect_rel("swiglu bwd fused dgate|dup", host(dfused), dref, kTolBf16);
}

void run_short_conv(int64_t B, int64_t T, int64_t D, int64_t W, bool with_prev, int64_t pad, Rng& rng) {
    const int64_t P = W - 1, xs = D + pad;
    auto x = bf16_values(sz(B * T * D), rng);
    auto w = f32_values(sz(D * W), rng, 0.5f);
    auto prev = f32_values(sz(B * P * D), rng);
    auto dout = bf16_values(sz(B * T * D), rng);
    auto dprev_out = f32_values(sz(B * P * D), rng);
    auto dw0 = f32_values(sz(D * W), rng, 0.1f);
    std::vector<float> out_ref(x.size()), pout_ref(prev.size()), dx_ref(x.size()), dprev_ref(prev.size()),
        dw_ref = dw0;
    for (int64_t b = 0; b < B; ++b) {
        const float* pv = with_prev ? prev.data() + b * P * D : nullptr;
        const float* xb = x.data() + b * T * D;
        cpu::short_conv_forward<float>(out_ref.data() + b * T * D, xb, w.data(), pv, T, D, W);
        cpu::short_conv_next_prev<float>(pout_ref.data() + b * P * D, pv, xb, T, D, W);
        cpu::short_conv_backward<float>(dx_ref.data() + b * T * D, dw_ref.data(),
                                        dprev_ref.data() + b * P * D, dout.data() + b * T * D, xb, w.data(),
                                        pv, T, D, W);
        cpu::short_conv_next_prev_backward<float>(dx_ref.data() + b * T * D, dprev_ref.data() + b * P * D,
                                                  dprev_out.data() + b * P * D, T, D, W);
    }
    std::vector<float> xpad(sz(B * T * xs), 0.f);
    for (int64_t r = 0; r < B * T; ++r)
        for (int64_t d = 0; d < D; ++d) xpad[sz(r * xs + d)] = x[sz(r * D + d)];

    auto dX = dev_bf16(xpad), dO = dev_bf16(dout);
    auto dW = dev_f32(w), dP = dev_f32(prev), dPO = dev_f32(dprev_out);
    Dev<bf16> out(int64_t(x.size()));
    Dev<float> pout(int64_t(prev.size()));
    const float* pv = with_prev ? dP.p() : nullptr;
    cu::short_conv_forward(out.p(), pout.p(), dX.p(), xs, dW.p(), pv, B, T, D, W);
    expect_rel("short_conv fwd out", host(out), out_ref, kTolBf16);
    if (P > 0) expect_rel("short_conv fwd prev_out", host(pout), pout_ref, kTolF32);
    if (P > 0 && with_prev) {  // window update in place (prev_out aliases prev)
        auto inplace = dev_f32(prev);
        out.poison();
        cu::short_conv_forward(out.p(), inplace.p(), dX.p(), xs, dW.p(), inplace.p(), B, T, D, W);
        expect_rel("short_conv fwd inplace prev_out", host(inplace), pout_ref, kTolF32);
        expect_rel("short_conv fwd inplace out", host(out), out_ref, kTolBf16);
    }
    Dev<bf16> dx(B * T * xs);
    Dev<float> dprev(int64_t(prev.size()));
    auto ddw = dev_f32(dw0);
    cu::short_conv_backward(dx.p(), xs, ddw.p(), dprev.p(), dO.p(), dPO.p(), dX.p(), xs, dW.p(), pv, B, T, D,
                            W);
    std::vector<float> dxg = host(dx), dxc(x.size());
    for (int64_t r = 0; r < B * T; ++r)
        for (int64_t d = 0; d < D; ++d) dxc[sz(r * D + d)] = dxg[sz(r * xs + d)];
    expect_rel("short_conv bwd dx", dxc, dx_ref, kTolBf16);
    expect_delta("short_conv bwd dw+=", host(ddw), dw_ref, dw0, kTolF32);
    if (P > 0) expect_rel("short_conv bwd dprev", host(dprev), dprev_ref, kTolF32);
}

void run_gdn_gates(int64_t N, int64_t HV, bool neg, Rng& rng) {
    const int64_t st = 2 * HV + 5;  // a and b inside one fused projection row
    const size_t n = sz(N * HV);
    auto a = bf16_values(n, rng, 3.f), b = bf16_values(n, rng, 2.f);
    for (size_t i = 0; i < n; i += 11) a[i] = round_bf16(24.f + rng.normal());  // above the softplus shortcut
    auto A_log = f32_values(sz(HV), rng, 0.5f), dt_bias = f32_values(sz(HV), rng, 0.5f);
    auto dg = f32_values(n, rng), dbeta = f32_values(n, rng);
    auto dA0 = f32_values(sz(HV), rng, 0.1f), ddt0 = f32_values(sz(HV), rng, 0.1f);
    std::vector<float> g_ref(n), beta_ref(n), da_ref(n), db_ref(n), dA_ref = dA0, ddt_ref = ddt0;
    cpu::gdn_gate_forward<float>(g_ref.data(), a.data(), A_log.data(), dt_bias.data(), N, HV);
    cpu::gdn_beta_forward<float>(beta_ref.data(), b.data(), int64_t(n), neg);
    cpu::gdn_gate_backward<float>(da_ref.data(), dA_ref.data(), ddt_ref.data(), dg.data(), a.data(),
                                  A_log.data(), dt_bias.data(), N, HV);
    cpu::gdn_beta_backward<float>(db_ref.data(), dbeta.data(), b.data(), int64_t(n), neg);

    std::vector<float> ab(sz(N * st), 0.f);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t h = 0; h < HV; ++h) {
            ab[sz(r * st + h)] = a[sz(r * HV + h)];
            ab[sz(r * st + HV + h)] = b[sz(r * HV + h)];
        }
    auto dAB = dev_bf16(ab);
    auto dAl = dev_f32(A_log), dDt = dev_f32(dt_bias), dDg = dev_f32(dg), dDb = dev_f32(dbeta);
    Dev<float> g{int64_t(n)}, beta{int64_t(n)};
    cu::gdn_gates_forward(g.p(), beta.p(), dAB.p(), dAB.p() + HV, st, dAl.p(), dDt.p(), N, HV, neg);
    expect_rel("gdn_gates fwd g", host(g), g_ref, kTolF32);
    expect_rel("gdn_gates fwd beta", host(beta), beta_ref, kTolF32);
    Dev<bf16> dab(N * st);
    auto dA = dev_f32(dA0), ddt = dev_f32(ddt0);
    cu::gdn_gates_backward(dab.p(), dab.p() + HV, st, dA.p(), ddt.p(), dDg.p(), dDb.p(), dAB.p(),
                           dAB.p() + HV, st, dAl.p(), dDt.p(), N, HV, neg);
    std::vector<float> dabg = host(dab), da(n), db(n);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t h = 0; h < HV; ++h) {
            da[sz(r * HV + h)] = dabg[sz(r * st + h)];
            db[sz(r * HV + h)] = dabg[sz(r * st + HV + h)];
        }
    expect_rel("gdn_gates bwd da", da, da_ref, kTolBf16);
    expect_rel("gdn_gates bwd db", db, db_ref, kTolBf16);
    expect_delta("gdn_gates bwd dA_log+=", host(dA), dA_ref, dA0, kTolF32);
    expect_delta("gdn_gates bwd ddt_bias+=", host(ddt), ddt_ref, ddt0, kTolF32);
}

void run_gated_rmsnorm(int64_t N, int64_t HV, int64_t D, int64_t zpad, Rng& rng) {
    const float eps = 1e-5f;
    const int64_t row = HV * D, zs = row + zpad;
    const size_t n = sz(N * row);
    auto o = bf16_values(n, rng, 0.7f), z = bf16_values(n, rng, 2.f), dout = bf16_values(n, rng);
    auto w = f32_values(sz(row), rng, 0.2f, 1.f), dw0 = f32_values(sz(row), rng, 0.1f);
    std::vector<float> out_ref(n), rstd_ref(sz(N * HV)), do_ref(n), dz_ref(n), dw_ref = dw0;
    cpu::gated_rmsnorm_forward<float>(out_ref.data(), rstd_ref.data(), o.data(), z.data(), w.data(), N, HV, D,
                                      eps);
    cpu::gated_rmsnorm_backward<float>(do_ref.data(), dz_ref.data(), dw_ref.data(), dout.data(), o.data(),
                                       z.data(), w.data(), rstd_ref.data(), N, HV, D);
    std::vector<float> zbuf(sz(N * zs), 0.f);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t k = 0; k < row; ++k) zbuf[sz(r * zs + k)] = z[sz(r * row + k)];

    auto dO = dev_bf16(o), dZ = dev_bf16(zbuf), dDo = dev_bf16(dout);
    auto dW = dev_f32(w);
    Dev<bf16> out{int64_t(n)};
    Dev<float> rstd(N * HV);
    cu::gated_rmsnorm_forward(out.p(), rstd.p(), dO.p(), dZ.p(), zs, dW.p(), N, HV, D, eps);
    expect_rel("gated_rmsnorm fwd out", host(out), out_ref, kTolBf16);
    expect_rel("gated_rmsnorm fwd rstd", host(rstd), rstd_ref, kTolF32);
    Dev<bf16> d_o{int64_t(n)}, dz(N * zs);
    auto ddw = dev_f32(dw0);
    cu::gated_rmsnorm_backward(d_o.p(), dz.p(), zs, ddw.p(), dDo.p(), dO.p(), dZ.p(), zs, dW.p(), rstd.p(), N,
                               HV, D);
    std::vector<float> dzg = host(dz), dzc(n);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t k = 0; k < row; ++k) dzc[sz(r * row + k)] = dzg[sz(r * zs + k)];
    expect_rel("gated_rmsnorm bwd d_o", host(d_o), do_ref, kTolBf16);
    expect_rel("gated_rmsnorm bwd dz", dzc, dz_ref, kTolBf16);
    expect_delta("gated_rmsnorm bwd dw+=", host(ddw), dw_ref, dw0, kTolF32);
}

const char* fusion_case_name(FusionKind kind) {
    static const char* const names[] = {"scalenorm", "none", "hymba", "laonly"};  // FusionKind order
    return names[int(kind)];
}

void run_fusion(FusionKind kind, int64_t N, int64_t n_fa, int64_t n_la, int64_t Dh, bool inplace,
                bool la_bias, Rng& rng) {
    const float eps = 1e-6f;
    const int64_t H = n_fa + n_la;
    const size_t n = sz(N * H * Dh);
    auto heads = bf16_values(n, rng, 0.8f), dout = bf16_values(n, rng);
    // one vector per parameter slot; only those the kind uses are read
    auto hs = f32_values(sz(H * Dh), rng, 0.2f, 1.f),
         fa = f32_values(sz(std::max<int64_t>(1, n_fa * Dh)), rng, 0.2f, 1.f),
         la = f32_values(sz(std::max<int64_t>(1, n_la * Dh)), rng, 0.2f, 1.f);
    auto ghs0 = f32_values(hs.size(), rng, 0.1f), gfa0 = f32_values(fa.size(), rng, 0.1f),
         gla0 = f32_values(la.size(), rng, 0.1f);
    auto lb = f32_values(sz(std::max<int64_t>(1, n_la * Dh)), rng, 1.f),
         glb0 = f32_values(lb.size(), rng, 0.1f);
    std::vector<float> out_ref(n), din_ref(n), ghs = ghs0, gfa = gfa0, gla = gla0, glb = glb0;
    FusionParams<float> P{hs.data(), fa.data(), la.data(), la_bias ? lb.data() : nullptr};
    FusionGrads<float> G{ghs.data(), gfa.data(), gla.data(), la_bias ? glb.data() : nullptr};
    fusion_forward<float>(out_ref.data(), heads.data(), N, n_fa, n_la, Dh, kind, P, eps);
    fusion_backward<float>(din_ref.data(), G, dout.data(), heads.data(), N, n_fa, n_la, Dh, kind, P, eps);

    auto dH = dev_bf16(heads), dDo = dev_bf16(dout);
    auto dhs = dev_f32(hs), dfa = dev_f32(fa), dla = dev_f32(la);
    auto g_hs = dev_f32(ghs0), g_fa = dev_f32(gfa0), g_la = dev_f32(gla0);
    auto dlb = dev_f32(lb), g_lb = dev_f32(glb0);
    const cu::FusionScales cs{dhs.p(), dfa.p(), dla.p(), la_bias ? dlb.p() : nullptr};
    const cu::FusionScaleGrads cg{g_hs.p(), g_fa.p(), g_la.p(), la_bias ? g_lb.p() : nullptr};
    Dev<bf16> out = inplace ? dev_bf16(heads) : Dev<bf16>(int64_t(n));
    cu::fusion_forward(out.p(), inplace ? out.p() : dH.p(), N, n_fa, n_la, Dh, kind, cs, eps);
    expect_rel("fusion fwd out", host(out), out_ref, kTolBf16);
    Dev<bf16> din = inplace ? dev_bf16(dout) : Dev<bf16>(int64_t(n));
    cu::fusion_backward(din.p(), cg, inplace ? din.p() : dDo.p(), dH.p(), N, n_fa, n_la, Dh, kind, cs, eps);
    expect_rel("fusion bwd dheads", host(din), din_ref, kTolBf16);
    const bool act = fusion_active(kind, n_la);
    if (act && kind != FusionKind::Hymba) {
        const size_t used = sz((kind == FusionKind::LaOnly ? n_la : H) * Dh);
        auto got = minus(host(g_hs), ghs0), ref = minus(ghs, ghs0);
        got.resize(used);
        ref.resize(used);
        expect_rel("fusion bwd dscale+=", got, ref, kTolF32);
    }
    if (act && kind == FusionKind::Hymba) {
        if (n_fa > 0) expect_delta("fusion bwd dfa+=", host(g_fa), gfa, gfa0, kTolF32);
        expect_delta("fusion bwd dla+=", host(g_la), gla, gla0, kTolF32);
    }
    if (act && la_bias) expect_delta("fusion bwd dla_bias+=", host(g_lb), glb, glb0, kTolF32);
}

void run_elementwise(int64_t N, int64_t F, Rng& rng) {
    const size_t n = sz(N * F);
    auto xf = f32_values(n, rng, 3.f);
    {
        auto d = dev_f32(xf);
        Dev<bf16> o{int64_t(n)};
        cu::cast_f32_to_bf16(o.p(), d.p(), int64_t(n));
        expect_rel("cast f32->bf16", host(o), round_all_bf16(xf), kTolBf16);
        Dev<float> back{int64_t(n)};
        cu::cast_bf16_to_f32(back.p(), o.p(), int64_t(n));
        expect_rel("cast bf16->f32", host(back), round_all_bf16(xf), kTolF32);
    }
    {
        auto xb = bf16_values(n, rng), y0 = f32_values(n, rng);
        std::vector<float> ref(n), ref2(n);
        for (size_t i = 0; i < n; ++i) {
            ref[i] = y0[i] + 0.5f * xb[i];
            ref2[i] = ref[i] + xf[i];
        }
        auto y = dev_f32(y0), dxf = dev_f32(xf);
        auto dxb = dev_bf16(xb);
        cu::add_to_f32(y.p(), dxb.p(), int64_t(n), 0.5f);
        expect_rel("add_to_f32 bf16 y+=", host(y), ref, kTolF32);
        cu::add_to_f32(y.p(), dxf.p(), int64_t(n));
        expect_rel("add_to_f32 f32 y+=", host(y), ref2, kTolF32);
    }
    {  // bias on a strided (N, F) view, and its backward
        const int64_t st = F + 24;
        auto y0 = bf16_values(sz(N * st), rng);
        auto bias = f32_values(sz(F), rng);
        auto db0 = f32_values(sz(F), rng, 0.1f);
        std::vector<float> ref = y0, dbias_ref(sz(F), 0.f);
        for (int64_t r = 0; r < N; ++r)
            for (int64_t f = 0; f < F; ++f) ref[sz(r * st + f)] += bias[sz(f)];
        for (int64_t f = 0; f < F; ++f) {
            double s = 0;
            for (int64_t r = 0; r < N; ++r) s += y0[sz(r * st + f)];
            dbias_ref[sz(f)] = float(s);
        }
        auto y = dev_bf16(y0);
        auto b = dev_f32(bias), db = dev_f32(db0);
        cu::bias_backward(db.p(), y.p(), N, F, st);  // column sums of y0 (before the add)
        expect_rel("bias bwd dbias+=", minus(host(db), db0), dbias_ref, kTolF32);
        cu::bias_add(y.p(), b.p(), N, F, st);
        expect_rel("bias add y", host(y), ref, kTolBf16);
    }
    {  // head gather / scatter
        const int64_t H = 9, D = 64;
        const std::vector<int32_t> sel = {7, 0, 4, 8};
        const int64_t ns = int64_t(sel.size());
        auto src = bf16_values(sz(N * H * D), rng), dst0 = bf16_values(sz(N * H * D), rng);
        std::vector<float> g_ref(sz(N * ns * D)), s_ref = dst0, a_ref = dst0;
        for (int64_t r = 0; r < N; ++r)
            for (int64_t j = 0; j < ns; ++j)
                for (int64_t d = 0; d < D; ++d)
                    g_ref[sz((r * ns + j) * D + d)] = src[sz((r * H + sel[sz(j)]) * D + d)];
        for (int64_t r = 0; r < N; ++r)
            for (int64_t j = 0; j < ns; ++j)
                for (int64_t d = 0; d < D; ++d) {
                    const size_t o = sz((r * H + sel[sz(j)]) * D + d);
                    s_ref[o] = g_ref[sz((r * ns + j) * D + d)];
                    a_ref[o] = dst0[o] + g_ref[sz((r * ns + j) * D + d)];
                }
        auto dsrc = dev_bf16(src);
        auto dsel = dev_i32(sel);
        Dev<bf16> gath(int64_t(g_ref.size()));
        cu::gather_heads(gath.p(), dsrc.p(), dsel.p(), N, H, ns, D);
        expect_rel("gather_heads H9 sel4 D64 dst", host(gath), g_ref, kTolBf16);
        auto sc = dev_bf16(dst0);
        cu::scatter_heads(sc.p(), gath.p(), dsel.p(), N, H, ns, D, false);
        expect_rel("scatter_heads H9 sel4 D64 dst", host(sc), s_ref, kTolBf16);
        auto ac = dev_bf16(dst0);
        cu::scatter_heads(ac.p(), gath.p(), dsel.p(), N, H, ns, D, true);
        expect_rel("scatter_heads accumulate dst+=", host(ac), a_ref, kTolBf16);
    }
}

}  // namespace

OpCase embedding_case(int64_t N, int64_t V, int64_t C) {
    return {case_name("embedding", {{"N", N}, {"V", V}, {"C", C}}),
            [=](Rng& r) { run_embedding(N, V, C, r); }};
}

OpCase rmsnorm_case(int64_t N, int64_t C) {
    return {case_name("rmsnorm", {{"N", N}, {"C", C}}), [=](Rng& r) { run_rmsnorm(N, C, r); }};
}

OpCase rope_case(int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0) {
    return {
        case_name("rope", {{"S", num_seqs}, {"T", T}, {"H", H}, {"Dh", Dh}, {"R", rope_dim}, {"p", pos0}}),
        [=](Rng& r) { run_rope(num_seqs, T, H, Dh, rope_dim, pos0, r); }};
}

OpCase rope_scaled_case(const std::string& spec, int64_t max_pos, int64_t num_seqs, int64_t T, int64_t H,
                        int64_t Dh, int64_t pos0) {
    return {case_name("rope_scaled_" + spec.substr(0, spec.find(':')),
                      {{"S", num_seqs}, {"T", T}, {"H", H}, {"Dh", Dh}, {"p", pos0}, {"ctx", max_pos}}),
            [=](Rng& r) { run_rope_scaled(spec, max_pos, num_seqs, T, H, Dh, pos0, r); }};
}

OpCase swiglu_case(int64_t N, int64_t I) {
    return {case_name("swiglu", {{"N", N}, {"I", I}}), [=](Rng& r) { run_swiglu(N, I, r); }};
}

OpCase short_conv_decode_case(int64_t B, int64_t D, int64_t W, int64_t pad) {
    return {case_name("short_conv_decode", {{"B", B}, {"D", D}, {"W", W}, {"pad", pad}}),
            [=](Rng& r) { run_short_conv_decode(B, D, W, pad, r); }};
}

OpCase short_conv_case(int64_t B, int64_t T, int64_t D, int64_t W, bool with_prev, int64_t pad) {
    return {case_name("short_conv", {{"B", B}, {"T", T}, {"D", D}, {"W", W}}) +
                (with_prev ? "_prev" : "_noprev") + (pad ? "_strided" : ""),
            [=](Rng& r) { run_short_conv(B, T, D, W, with_prev, pad, r); }};
}

OpCase gdn_gates_case(int64_t N, int64_t HV, bool neg) {
    return {case_name("gdn_gates", {{"N", N}, {"HV", HV}}) + (neg ? "_neg" : ""),
            [=](Rng& r) { run_gdn_gates(N, HV, neg, r); }};
}

OpCase gated_rmsnorm_case(int64_t N, int64_t HV, int64_t D, int64_t zpad) {
    return {case_name("gated_rmsnorm", {{"N", N}, {"HV", HV}, {"D", D}}) + (zpad ? "_zstrided" : ""),
            [=](Rng& r) { run_gated_rmsnorm(N, HV, D, zpad, r); }};
}

OpCase fusion_case(FusionKind kind, int64_t N, int64_t n_fa, int64_t n_la, int64_t Dh, bool inplace,
                   bool la_bias) {
    return {case_name(std::string("fusion_") + fusion_case_name(kind),
                      {{"N", N}, {"fa", n_fa}, {"la", n_la}, {"Dh", Dh}}) +
                (inplace ? "_inplace" : "") + (la_bias ? "_labias" : ""),
            [=](Rng& r) { run_fusion(kind, N, n_fa, n_la, Dh, inplace, la_bias, r); }};
}

OpCase elementwise_case(int64_t N, int64_t F) {
    return {case_name("elementwise", {{"N", N}, {"F", F}}), [=](Rng& r) { run_elementwise(N, F, r); }};
}

}  // namespace hydra::gputest
