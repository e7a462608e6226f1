// GPU parity of the training building blocks against the CPU float references: the cuBLAS bf16 GEMM
// (every transpose pair, strided-batched) and the HF-layout linear layer (ops/cpu/linear.h), the
// vocabulary-chunked LM-head losses CE and tau^2 KL with a kl_max_position row mask, MSE (train/losses.h),
// and the fused AdamW with grad norm, clipping and the non-finite count (train/adamw.h). Tolerances: bf16
// paths 1e-2, loss values 1e-3, AdamW fp32 1e-5 (and 1e-9 for its double-precision norm and coefficient).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/gemm.h"
#include "device_io.h"
#include "op_case.h"
#include "ops/cpu/linear.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/device_arena.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/losses.h"
#include "ops/cuda/row_gemv.h"
#include "parity.h"
#include "train/adamw.h"
#include "train/losses.h"

namespace hydra::gputest {

namespace cu = hydra::cuda;

namespace {

constexpr double kTolLoss = 1e-3, kTolAdam = 1e-5;

size_t sz(int64_t n) {
    return size_t(n);
}

void run_gemm(int64_t M, int64_t N, int64_t K, Rng& rng) {
    cu::BlasContext ctx;
    for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const std::string tr = std::string(ta ? " tA" : "") + (tb ? " tB" : "");
        const int64_t lda = ta ? M : K, ldb = tb ? K : N;
        auto A = bf16_values(sz(M * K), rng), B = bf16_values(sz(K * N), rng),
             C0 = f32_values(sz(M * N), rng);
        std::vector<float> ref = C0;
        hydra::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, ref.data(), N);
        auto dA = dev_bf16(A), dB = dev_bf16(B);
        auto dC = dev_f32(C0);
        cu::gemm_bf16(ctx, ta, tb, M, N, K, 0.5f, dA.p(), lda, dB.p(), ldb, 1.0f, dC.p(), N);
        expect_delta("gemm f32 beta=1" + tr + " C", host(dC), ref, C0, kTolBf16);
        std::vector<float> ref0(sz(M * N));
        hydra::gemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, ref0.data(), N);
        Dev<bf16> dCb(M * N);
        cu::gemm_bf16(ctx, ta, tb, M, N, K, 1.0f, dA.p(), lda, dB.p(), ldb, 0.0f, dCb.p(), N);
        expect_rel("gemm bf16 out" + tr + " C", host(dCb), ref0, kTolBf16);
        // D = 0.5 A B + C into another buffer (the residual add of the training step): C must not change
        auto dC2 = dev_f32(C0);
        Dev<float> dD(M * N);
        cu::gemm_bf16(ctx, ta, tb, M, N, K, 0.5f, dA.p(), lda, dB.p(), ldb, 1.0f, dC2.p(), dD.p(), N);
        expect_delta("gemm f32 C->D" + tr + " D", host(dD), ref, C0, kTolBf16);
        expect_rel("gemm f32 C->D" + tr + " C unchanged", host(dC2), C0, kTolBf16);
        // the same product again gives the same bits (single rows: row_gemv's fixed order)
        Dev<float> dD2(M * N);
        cu::gemm_bf16(ctx, ta, tb, M, N, K, 0.5f, dA.p(), lda, dB.p(), ldb, 1.0f, dC2.p(), dD2.p(), N);
        expect_exact("gemm f32 C->D" + tr + " repeated: differing elements",
                     bit_mismatches(host(dD2), host(dD)));
    }
    if (M > 1 && M <= cu::kRowGemvMaxRows) {  // a small decode bucket: each row of X @ W^T gets the bits it
                                              // gets alone (row_gemv)
        auto A = bf16_values(sz(M * K), rng), B = bf16_values(sz(N * K), rng);
        auto dA = dev_bf16(A), dB = dev_bf16(B);
        Dev<bf16> all(M * N), one(N);
        cu::gemm_bf16(ctx, false, true, M, N, K, 1.0f, dA.p(), K, dB.p(), K, 0.0f, all.p(), N);
        const std::vector<float> got = host(all);  // bf16 widened: equal floats, equal bits
        long long differ = 0;
        for (int64_t m = 0; m < M; ++m) {
            cu::gemm_bf16(ctx, false, true, 1, N, K, 1.0f, dA.p() + m * K, K, dB.p(), K, 0.0f, one.p(), N);
            differ += bit_mismatches(host(one),
                                     std::vector<float>(got.begin() + m * N, got.begin() + (m + 1) * N)) != 0;
        }
        expect_exact("gemm bf16 tB: rows of the bucket differing from the row alone", differ);
    }
    // strided batched, B shared (stride 0) and a padded C stride
    const int64_t batch = 3, sc = M * N + 7;
    auto A = bf16_values(sz(batch * M * K), rng), B = bf16_values(sz(N * K), rng);
    std::vector<float> ref(sz(batch * sc), 0.0f);
    for (int64_t b = 0; b < batch; ++b)
        hydra::gemm(false, true, M, N, K, 1.0f, A.data() + b * M * K, K, B.data(), K, 0.0f,
                    ref.data() + b * sc, N);
    auto dA = dev_bf16(A), dB = dev_bf16(B);
    Dev<float> dC(batch * sc);
    cu::gemm_bf16_batched(ctx, false, true, M, N, K, 1.0f, dA.p(), K, M * K, dB.p(), K, 0, 0.0f, dC.p(), N,
                          sc, batch);
    std::vector<float> got = host(dC);
    std::vector<float> g2, r2;  // the padding between matrices is not written
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < M * N; ++i)
            g2.push_back(got[sz(b * sc + i)]), r2.push_back(ref[sz(b * sc + i)]);
    expect_rel("gemm batched b3 tB C", g2, r2, kTolBf16);
}

void run_linear(int64_t N, int64_t in, int64_t out, Rng& rng) {
    cu::BlasContext ctx;
    auto X = bf16_values(sz(N * in), rng), W = bf16_values(sz(out * in), rng, 0.05f),
         dY = bf16_values(sz(N * out), rng);
    auto Y0 = f32_values(sz(N * out), rng), dX0 = f32_values(sz(N * in), rng),
         dW0 = f32_values(sz(out * in), rng, 10.f);
    std::vector<float> y_ref(sz(N * out)), dx_ref(sz(N * in)), dw_ref = dW0;
    cpu::linear_forward<float>(y_ref.data(), X.data(), W.data(), nullptr, N, in, out);
    cpu::linear_backward<float>(dx_ref.data(), dw_ref.data(), nullptr, dY.data(), X.data(), W.data(), N, in,
                                out);
    auto dXd = dev_bf16(X), dWd = dev_bf16(W), dYd = dev_bf16(dY);
    Dev<bf16> y(N * out);
    cu::linear_forward(ctx, dXd.p(), dWd.p(), N, in, out, y.p());
    expect_rel("linear fwd bf16 Y", host(y), y_ref, kTolBf16);
    auto yf = dev_f32(Y0);
    cu::linear_forward(ctx, dXd.p(), dWd.p(), N, in, out, yf.p(), 1.0f);
    std::vector<float> y_acc(Y0.size());
    for (size_t i = 0; i < y_acc.size(); ++i) y_acc[i] = Y0[i] + y_ref[i];
    expect_delta("linear fwd f32 += Y", host(yf), y_acc, Y0, kTolBf16);
    Dev<float> yf0(N * out);
    cu::linear_forward(ctx, dXd.p(), dWd.p(), N, in, out, yf0.p(), 0.0f);
    expect_rel("linear fwd f32 = Y", host(yf0), y_ref, kTolBf16);
    Dev<bf16> dx(N * in);
    cu::linear_backward_dx(ctx, dYd.p(), dWd.p(), N, in, out, dx.p());
    expect_rel("linear bwd dx bf16 dX", host(dx), dx_ref, kTolBf16);
    auto dxf = dev_f32(dX0);
    cu::linear_backward_dx(ctx, dYd.p(), dWd.p(), N, in, out, dxf.p(), 1.0f);
    std::vector<float> dx_acc(dX0.size());
    for (size_t i = 0; i < dx_acc.size(); ++i) dx_acc[i] = dX0[i] + dx_ref[i];
    expect_delta("linear bwd dx f32 += dX", host(dxf), dx_acc, dX0, kTolBf16);
    auto dwf = dev_f32(dW0);
    cu::linear_backward_dw(ctx, dYd.p(), dXd.p(), N, in, out, dwf.p());
    expect_delta("linear bwd dW f32 += dW", host(dwf), dw_ref, dW0, kTolBf16);
}

void run_cross_entropy(int64_t N, int64_t C, int64_t V, const cu::LmHeadChunking& ck, Rng& rng) {
    cu::BlasContext ctx;
    auto h = bf16_values(sz(N * C), rng), W = bf16_values(sz(V * C), rng, 0.06f);
    std::vector<int32_t> tg(sz(N));
    for (auto& t : tg) t = rng.uniform() < 0.1 ? -1 : int32_t(uniform_below(rng, V));
    tg[0] = 0, tg[sz(N - 1)] = int32_t(V - 1);  // both ends of the vocabulary
    int64_t scored = 0;
    for (auto t : tg) scored += t >= 0;
    const float gs = 1.0f / float(scored);
    auto dW0 = f32_values(sz(V * C), rng, 1e-3f);
    std::vector<float> dh_ref(sz(N * C)), dW_ref = dW0;
    const LossResult ref =
        cross_entropy_lm_head(h.data(), W.data(), tg.data(), N, C, V, dh_ref.data(), dW_ref.data(), gs);

    auto dh = dev_bf16(h), dWh = dev_bf16(W);
    auto dtg = dev_i32(tg);
    cu::DeviceBuffer<cu::LossTotals> tot(1);
    cu::LmHeadLossWorkspace ws(ck, false, C);
    Dev<float> g_dh(N * C);
    auto g_dW = dev_f32(dW0);
    cu::zero_totals(tot.data());
    cu::LmHeadGrads gr;
    gr.dh_f32 = g_dh.p(), gr.dW = g_dW.p(), gr.grad_scale = gs;
    cu::cross_entropy_lm_head(ctx, dh.p(), dWh.p(), dtg.p(), N, C, V, gr, tot.data(), ws);
    const cu::LossTotals t = cu::read_totals(tot.data());
    expect_scalar("ce loss (sum)", t.loss, ref.loss, kTolLoss);
    expect_exact("ce count (and no invalid target)", std::llabs(t.count - ref.count) + t.invalid);
    expect_rel("ce bwd dh f32", host(g_dh), dh_ref, kTolBf16);
    expect_delta("ce bwd dW +=", host(g_dW), dW_ref, dW0, kTolBf16);
    // bf16 dh, loss only accumulated twice, no dW
    Dev<bf16> g_dhb(N * C);
    cu::LmHeadGrads gb;
    gb.dh_bf16 = g_dhb.p(), gb.grad_scale = gs;
    cu::zero_totals(tot.data());
    cu::cross_entropy_lm_head(ctx, dh.p(), dWh.p(), dtg.p(), N, C, V, gb, tot.data(), ws);
    cu::cross_entropy_lm_head(ctx, dh.p(), dWh.p(), dtg.p(), N, C, V, cu::LmHeadGrads{}, tot.data(), ws);
    const cu::LossTotals t2 = cu::read_totals(tot.data());
    expect_rel("ce bwd dh bf16", host(g_dhb), dh_ref, kTolBf16);
    expect_scalar("ce loss x2 (totals +=)", t2.loss, 2 * ref.loss, kTolLoss);
}

void run_kl(int64_t N, int64_t Cs, int64_t Ct, int64_t V, float tau, int64_t seq_len, int64_t kl_max_position,
            const cu::LmHeadChunking& ck, Rng& rng) {
    cu::BlasContext ctx;
    auto hs = bf16_values(sz(N * Cs), rng), Ws = bf16_values(sz(V * Cs), rng, 0.06f);
    auto ht = bf16_values(sz(N * Ct), rng), Wt = bf16_values(sz(V * Ct), rng, 0.06f);
    // the student as a perturbed copy of the teacher where widths match, so the KL is realistic
    if (Cs == Ct)
        for (size_t i = 0; i < hs.size(); ++i) hs[i] = round_bf16(ht[i] + 0.5f * hs[i]);
    std::vector<uint8_t> mask(sz(N), 1);
    std::vector<int64_t> rows;
    for (int64_t n = 0; n < N; ++n) {
        if (kl_max_position > 0) mask[sz(n)] = n % seq_len < kl_max_position;
        if (mask[sz(n)]) rows.push_back(n);
    }
    const int64_t M = int64_t(rows.size());
    const float gs = 1.0f / float(M);
    // CPU: the trainer's compaction to the kept rows (model_step.cpp)
    std::vector<float> sh(sz(M * Cs)), th(sz(M * Ct)), dsh(sz(M * Cs));
    for (int64_t i = 0; i < M; ++i) {
        std::copy_n(hs.data() + rows[sz(i)] * Cs, Cs, sh.data() + i * Cs);
        std::copy_n(ht.data() + rows[sz(i)] * Ct, Ct, th.data() + i * Ct);
    }
    auto dW0 = f32_values(sz(V * Cs), rng, 1e-3f);
    std::vector<float> dW_ref = dW0, dh_ref(sz(N * Cs), 0.0f);
    const LossResult ref = kl_lm_head(sh.data(), Ws.data(), Cs, th.data(), Wt.data(), Ct, M, V, tau,
                                      dsh.data(), dW_ref.data(), gs);
    for (int64_t i = 0; i < M; ++i) std::copy_n(dsh.data() + i * Cs, Cs, dh_ref.data() + rows[sz(i)] * Cs);

    auto d_hs = dev_bf16(hs), d_Ws = dev_bf16(Ws), d_ht = dev_bf16(ht), d_Wt = dev_bf16(Wt);
    auto dmask = dev_u8(mask);
    cu::DeviceBuffer<cu::LossTotals> tot(1);
    cu::LmHeadLossWorkspace ws(ck, true, Cs);
    // dh fp32 ACCUMULATED onto a random start (as after the CE of the same step)
    auto dh0 = f32_values(sz(N * Cs), rng, 1e-3f);
    auto g_dh = dev_f32(dh0);
    auto g_dW = dev_f32(dW0);
    cu::zero_totals(tot.data());
    cu::LmHeadGrads gr;
    gr.dh_f32 = g_dh.p(), gr.accumulate_dh = true, gr.dW = g_dW.p(), gr.grad_scale = gs;
    const uint8_t* row_mask = kl_max_position ? dmask.p() : nullptr;
    cu::kl_lm_head(ctx, d_hs.p(), d_Ws.p(), Cs, d_ht.p(), d_Wt.p(), Ct, row_mask, N, V, tau, gr, tot.data(),
                   ws);
    const cu::LossTotals t = cu::read_totals(tot.data());
    expect_scalar("kl loss (sum)", t.loss, ref.loss, kTolLoss);
    expect_exact("kl count", std::llabs(t.count - ref.count));
    std::vector<float> dh_acc_ref(dh0.size());
    for (size_t i = 0; i < dh0.size(); ++i) dh_acc_ref[i] = dh0[i] + dh_ref[i];
    expect_delta("kl bwd dh f32 +=", host(g_dh), dh_acc_ref, dh0, kTolBf16);
    expect_delta("kl bwd dW +=", host(g_dW), dW_ref, dW0, kTolBf16);
    // bf16 dh, overwrite (masked rows must come out 0)
    Dev<bf16> g_dhb(N * Cs);
    cu::LmHeadGrads gb;
    gb.dh_bf16 = g_dhb.p(), gb.grad_scale = gs;
    cu::zero_totals(tot.data());
    cu::kl_lm_head(ctx, d_hs.p(), d_Ws.p(), Cs, d_ht.p(), d_Wt.p(), Ct, row_mask, N, V, tau, gb, tot.data(),
                   ws);
    expect_rel("kl bwd dh bf16", host(g_dhb), dh_ref, kTolBf16);
}

void run_mse(int64_t n, Rng& rng) {
    auto a = f32_values(sz(n), rng), b = f32_values(sz(n), rng);
    std::vector<float> da_ref(sz(n));
    const float gs = 1.0f / float(n);
    const LossResult ref = mse(a.data(), b.data(), n, da_ref.data(), gs);
    auto da = dev_f32(a), db = dev_f32(b);
    Dev<float> g(n);
    cu::DeviceBuffer<cu::LossTotals> tot(1);
    cu::MseWorkspace ws;
    cu::zero_totals(tot.data());
    cu::mse(da.p(), db.p(), n, g.p(), false, gs, tot.data(), ws);
    const cu::LossTotals t = cu::read_totals(tot.data());
    expect_scalar("mse loss (sum)", t.loss, ref.loss, kTolLoss);
    expect_exact("mse count", std::llabs(t.count - ref.count));
    expect_rel("mse bwd da", host(g), da_ref, kTolAdam);
    cu::mse(da.p(), db.p(), n, g.p(), true, gs, tot.data(), ws);
    std::vector<float> twice(da_ref.size());
    for (size_t i = 0; i < twice.size(); ++i) twice[i] = 2 * da_ref[i];
    expect_rel("mse bwd accumulate da", host(g), twice, kTolAdam);
}

void run_adamw(Rng& rng) {
    // spans: a matrix, odd sizes, a frozen one, lr/wd multipliers; 64-byte aligned offsets with padding
    struct S {
        int64_t size;
        float lr_scale, wd_scale;
        bool trainable;
    };
    const std::vector<S> layout = {{576 * 1536, 1.0f, 1.0f, true},   {577, 1.0f, 0.0f, true},
                                   {3 * 4096 + 5, 0.5f, 1.0f, true}, {1000, 1.0f, 1.0f, false},
                                   {49152 + 3, 2.0f, 0.5f, true},    {10, 1.0f, 0.0f, true}};
    std::vector<ParamSpan> spans;
    std::vector<cu::AdamWSpan> dspans;
    int64_t off = 0;
    for (size_t i = 0; i < layout.size(); ++i) {
        ParamSpan s;
        s.name = std::string("p").append(std::to_string(i));
        s.offset = off, s.size = layout[i].size, s.lr_scale = layout[i].lr_scale,
        s.wd_scale = layout[i].wd_scale;
        s.trainable = layout[i].trainable;
        spans.push_back(s);
        cu::AdamWSpan d;
        d.offset = s.offset, d.size = s.size, d.lr_scale = s.lr_scale, d.wd_scale = s.wd_scale;
        d.trainable = s.trainable, d.mirror = i != 5;  // one span without a mirror
        dspans.push_back(d);
        off = (off + s.size + 15) / 16 * 16 + 16;  // padding after every span
    }
    const int64_t n = off;
    AdamWConfig cfg;
    cfg.lr = 3e-3f, cfg.weight_decay = 0.1f;
    cu::AdamWHyper hy;
    hy.lr = cfg.lr, hy.beta1 = cfg.beta1, hy.beta2 = cfg.beta2, hy.eps = cfg.eps,
    hy.weight_decay = cfg.weight_decay;
    AdamW cpu_opt(cfg, n);
    cu::DeviceAdamW gpu(hy, n, dspans);
    std::vector<float> p = f32_values(sz(n), rng, 0.02f);
    const std::vector<float> p_init = p;
    auto dp = dev_f32(p);
    Dev<bf16> mirror(n);
    cu::cast_f32_to_bf16(dp.p(), mirror.p(), n);  // the initial mirror of everything
    cu::DeviceBuffer<float> dg(n);
    cu::DeviceBuffer<float> dfac(1);
    const double max_norm = 1.0;
    for (int step = 1; step <= 4; ++step) {
        const std::string st = std::string("step ").append(std::to_string(step)).append(" ");
        // gradients of magnitude ~ step so that clipping is active in some steps and not in others
        std::vector<float> g = f32_values(sz(n), rng, step == 2 ? 1e-4f : 2e-3f);
        for (size_t i = 0; i < g.size(); ++i) g[i] *= 1.0f + 0.5f * float(i % 7);
        dg.upload(g.data());
        // CPU
        const double norm_ref = grad_norm(g.data(), spans);
        const bool fin_ref = all_finite(g.data(), spans);
        const double coef_ref = clip_grads(g.data(), spans, max_norm, norm_ref);
        const std::vector<float> p_before = p;
        cpu_opt.set_lr(cfg.lr * (1.0f - 0.1f * float(step)));
        cpu_opt.step(p.data(), g.data(), n, spans);
        // GPU
        gpu.grad_norm(dg.data());
        const cu::GradNormResult r = gpu.read_result();
        const double coef = cu::DeviceAdamW::clip_coefficient(r.norm, max_norm);
        gpu.set_lr(cfg.lr * (1.0f - 0.1f * float(step)));
        if (step == 3) {  // clip on the device through grad_factor_dev
            const float f = float(coef);
            dfac.upload(&f);
            gpu.step(dp.p(), mirror.p(), dg.data(), nullptr, 1.0f, dfac.data());
        } else if (step == 4) {  // explicit clip kernel, then a plain step
            gpu.clip_grads(dg.data(), float(coef));
            expect_rel(st + "adamw clip_grads g", cu::download_f32(dg.data(), n), g, 1e-7);
            gpu.step(dp.p(), mirror.p(), dg.data());
        } else {
            gpu.step(dp.p(), mirror.p(), dg.data(), nullptr, float(coef));
        }
        expect_scalar(st + "grad_norm", r.norm, norm_ref, 1e-9);
        expect_exact(st + "all_finite (nonfinite count)", r.nonfinite + (fin_ref ? 0 : 1));
        expect_scalar(st + "clip coefficient", coef, coef_ref, 1e-9);
        const std::vector<float> gp = host(dp);
        std::vector<float> upd(sz(n)), upd_ref(sz(n));
        for (int64_t i = 0; i < n; ++i)
            upd[sz(i)] = gp[sz(i)] - p_before[sz(i)], upd_ref[sz(i)] = p[sz(i)] - p_before[sz(i)];
        expect_rel(st + "adamw update dp", upd, upd_ref, kTolAdam);
        if (step == 4) {
            expect_rel(st + "adamw master p", gp, p, kTolAdam);
            expect_rel(st + "adamw state m", cu::download_f32(gpu.m(), n),
                       std::vector<float>(cpu_opt.m(), cpu_opt.m() + n), kTolAdam);
            expect_rel(st + "adamw state v", cu::download_f32(gpu.v(), n),
                       std::vector<float>(cpu_opt.v(), cpu_opt.v() + n), kTolAdam);
            // mirror == bf16(p) where mirrored; frozen span + padding bit-identical to the start
            const std::vector<float> mir = host(mirror);
            long long bad_mirror = 0, bad_frozen = 0;
            std::vector<char> covered(sz(n), 0);
            for (size_t si = 0; si < spans.size(); ++si) {
                for (int64_t i = spans[si].offset; i < spans[si].offset + spans[si].size; ++i) {
                    covered[sz(i)] = spans[si].trainable;
                    if (!spans[si].trainable) continue;
                    const float want = dspans[si].mirror ? round_bf16(gp[sz(i)]) : round_bf16(p_init[sz(i)]);
                    bad_mirror += std::memcmp(&mir[sz(i)], &want, 4) != 0;
                }
            }
            for (int64_t i = 0; i < n; ++i)
                if (!covered[sz(i)]) bad_frozen += std::memcmp(&gp[sz(i)], &p_init[sz(i)], 4) != 0;
            expect_exact(st + "adamw bf16 mirror", bad_mirror);
            expect_exact(st + "adamw frozen + padding p", bad_frozen);
        }
    }
    // non-finite detection: NaN and Inf in trainable spans, NaN in the frozen span (not counted)
    std::vector<float> g = f32_values(sz(n), rng, 1e-3f);
    g[5] = NAN;
    g[sz(spans[2].offset + 7)] = INFINITY;
    g[sz(spans[3].offset + 1)] = NAN;
    g[sz(spans[0].offset + spans[0].size + 1)] = NAN;  // padding
    dg.upload(g.data());
    gpu.grad_norm(dg.data());
    const cu::GradNormResult r = gpu.read_result();
    expect_exact("grad nonfinite count (2 expected)", std::llabs(r.nonfinite - 2));
    expect_exact("all_finite (cpu) agrees", all_finite(g.data(), spans) ? 1 : 0);
    cu::zero_grads(dg.data(), n);
    const std::vector<float> z = cu::download_f32(dg.data(), n);
    long long nz = 0;
    for (float x : z) nz += x != 0.0f;
    expect_exact("zero_grads", nz);
}

}  // namespace

OpCase gemm_case(int64_t M, int64_t N, int64_t K) {
    return {case_name("gemm", {{"M", M}, {"N", N}, {"K", K}}), [=](Rng& r) { run_gemm(M, N, K, r); }};
}

OpCase linear_case(int64_t N, int64_t in, int64_t out) {
    return {case_name("linear", {{"N", N}, {"in", in}, {"out", out}}),
            [=](Rng& r) { run_linear(N, in, out, r); }};
}

OpCase cross_entropy_case(int64_t N, int64_t C, int64_t V, int64_t row_block, int64_t vocab_chunk) {
    return {
        case_name("cross_entropy", {{"N", N}, {"C", C}, {"V", V}, {"rb", row_block}, {"vc", vocab_chunk}}),
        [=](Rng& r) {
            run_cross_entropy(N, C, V, cu::LmHeadChunking{row_block, vocab_chunk}, r);
        }};
}

OpCase kl_case(int64_t N, int64_t Cs, int64_t Ct, int64_t V, float tau, int64_t seq_len,
               int64_t kl_max_position, int64_t row_block, int64_t vocab_chunk) {
    return {case_name("kl", {{"N", N},
                             {"Cs", Cs},
                             {"Ct", Ct},
                             {"V", V},
                             {"tau", int64_t(tau)},
                             {"mask", kl_max_position},
                             {"rb", row_block},
                             {"vc", vocab_chunk}}),
            [=](Rng& r) {
                run_kl(N, Cs, Ct, V, tau, seq_len, kl_max_position,
                       cu::LmHeadChunking{row_block, vocab_chunk}, r);
            }};
}

OpCase mse_case(int64_t n) {
    return {case_name("mse", {{"n", n}}), [=](Rng& r) { run_mse(n, r); }};
}

OpCase adamw_case() {
    return {"adamw_6spans_4steps", [](Rng& r) { run_adamw(r); }};
}

}  // namespace hydra::gputest
