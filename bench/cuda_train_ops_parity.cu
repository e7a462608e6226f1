// Parity of the CUDA training building blocks against the CPU float reference: the cuBLAS bf16
// GEMM (all transpose pairs, strided-batched) and the HF-layout linear layer (ops/cpu/linear.h), the
// vocabulary-chunked LM-head losses CE and tau^2 KL with a kl_max_position row mask, and MSE
// (train/losses.h), and the fused AdamW with grad norm / clipping / non-finite count
// (train/adamw.h), plus the device arena and caching allocator. Fresh random inputs every run (seed
// printed; --seed N repeats one), odd shapes (N = 301 rows, C = 576, V = 49152, 1000 and 1001), outputs
// poisoned with NaN before each call. Metric: relative RMS ||gpu - ref|| / ||ref|| (for accumulated
// outputs: of the increment); tolerances: bf16 paths 1e-2, loss values 1e-3, AdamW fp32 1e-5.
// Prints a table; exit status 1 on any failure.
//
// Usage: cuda_train_ops_parity [--seed N] [--quick]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/gemm.h"
#include "ops/cpu/linear.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_arena.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/losses.h"
#include "train/adamw.h"
#include "train/losses.h"

namespace cu = hydra::cuda;
using cu::bf16;

namespace {

constexpr double kTolBf16 = 1e-2, kTolLoss = 1e-3, kTolAdam = 1e-5;

struct Row {
    std::string op, shape, out;
    double err, tol;
    bool nan;
    bool pass;
};
std::vector<Row> g_rows;

double rel_rms(const std::vector<float>& got, const std::vector<float>& ref, bool* nan) {
    double num = 0, den = 0;
    *nan = false;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(got[i])) *nan = true;
        const double d = double(got[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void push(const std::string& op, const std::string& shape, const std::string& out, double e, bool nan, double tol) {
    const bool pass = !nan && e <= tol;
    g_rows.push_back({op, shape, out, e, tol, nan, pass});
    std::printf("  %-24s %-26s %-9s rel %.3e (tol %.0e) %s\n", op.c_str(), shape.c_str(), out.c_str(), e, tol,
                nan ? "NaN/unwritten" : (pass ? "ok" : "FAIL"));
    std::fflush(stdout);
}

void record(const std::string& op, const std::string& shape, const std::string& out, const std::vector<float>& got,
            const std::vector<float>& ref, double tol = kTolBf16) {
    bool nan = false;
    const double e = rel_rms(got, ref, &nan);
    push(op, shape, out, e, nan, tol);
}

// Increment of an accumulated output: (got - init) vs (ref - init).
void record_delta(const std::string& op, const std::string& shape, const std::string& out,
                  const std::vector<float>& got, const std::vector<float>& ref, const std::vector<float>& init,
                  double tol = kTolBf16) {
    std::vector<float> g(got.size()), r(ref.size());
    for (size_t i = 0; i < got.size(); ++i) g[i] = got[i] - init[i], r[i] = ref[i] - init[i];
    record(op, shape, out, g, r, tol);
}

void record_scalar(const std::string& op, const std::string& shape, const std::string& out, double got, double ref,
                   double tol) {
    const double e = std::abs(got - ref) / std::max(std::abs(ref), 1e-30);
    push(op, shape, out, e, !std::isfinite(got), tol);
}

// Exact checks (counts, bit-identity): err = number of mismatches.
void record_exact(const std::string& op, const std::string& shape, const std::string& out, long long mismatches) {
    push(op, shape, out, double(mismatches), false, 0.0);
}

struct Rng {
    std::mt19937_64 gen;
    std::normal_distribution<float> nd{0.f, 1.f};
    explicit Rng(uint64_t s) : gen(s) {}
    float normal() { return nd(gen); }
    double uniform() { return std::uniform_real_distribution<double>(0, 1)(gen); }
};

float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// Random values rounded to bf16 (so the CPU sees exactly what the GPU reads).
std::vector<float> bf16_values(size_t n, Rng& r, float scale = 1.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = round_bf16(scale * r.normal());
    return v;
}
std::vector<float> f32_values(size_t n, Rng& r, float scale = 1.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = scale * r.normal();
    return v;
}

template <typename T>
cu::DeviceBuffer<T> poisoned(size_t n) {
    cu::DeviceBuffer<T> b{int64_t(n)};
    b.fill_bytes(0xFF);  // NaN in bf16 and fp32
    return b;
}
cu::DeviceBuffer<bf16> up_bf16(const std::vector<float>& v) {
    cu::DeviceBuffer<bf16> b{int64_t(v.size())};
    cu::upload_f32_as_bf16(b.data(), v.data(), int64_t(v.size()));
    return b;
}
cu::DeviceBuffer<float> up_f32(const std::vector<float>& v) {
    cu::DeviceBuffer<float> b{int64_t(v.size())};
    b.upload(v.data());
    CUDA_CHECK(cudaDeviceSynchronize());
    return b;
}
std::vector<float> down(const cu::DeviceBuffer<float>& b) { return cu::download_f32(b.data(), b.size()); }
std::vector<float> down(const cu::DeviceBuffer<bf16>& b) { return cu::download_bf16_as_f32(b.data(), b.size()); }

std::string dims(std::initializer_list<std::pair<const char*, int64_t>> d) {
    std::string s;
    for (const auto& [k, v] : d) s += (s.empty() ? "" : " ") + std::string(k) + std::to_string(v);
    return s;
}

// ---- GEMM + linear -----------------------------------------------------------------------------------

void gemm_case(cu::BlasContext& ctx, int64_t M, int64_t N, int64_t K, Rng& rng) {
    for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const std::string shape = dims({{"M", M}, {"N", N}, {"K", K}}) + (ta ? " tA" : "") + (tb ? " tB" : "");
        const int64_t lda = ta ? M : K, ldb = tb ? K : N;
        auto A = bf16_values(size_t(M * K), rng), B = bf16_values(size_t(K * N), rng),
             C0 = f32_values(size_t(M * N), rng);
        std::vector<float> ref = C0;
        hydra::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, ref.data(), N);
        auto dA = up_bf16(A), dB = up_bf16(B);
        auto dC = up_f32(C0);
        cu::gemm_bf16(ctx, ta, tb, M, N, K, 0.5f, dA.data(), lda, dB.data(), ldb, 1.0f, dC.data(), N);
        record_delta("gemm f32 beta=1", shape, "C", down(dC), ref, C0);
        std::vector<float> ref0(static_cast<size_t>(M * N));
        hydra::gemm(ta, tb, M, N, K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, ref0.data(), N);
        auto dCb = poisoned<bf16>(size_t(M * N));
        cu::gemm_bf16(ctx, ta, tb, M, N, K, 1.0f, dA.data(), lda, dB.data(), ldb, 0.0f, dCb.data(), N);
        record("gemm bf16 out", shape, "C", down(dCb), ref0);
        // D = 0.5 A B + C into another buffer (the residual add of the training step): C must not change
        auto dC2 = up_f32(C0);
        auto dD = poisoned<float>(size_t(M * N));
        cu::gemm_bf16(ctx, ta, tb, M, N, K, 0.5f, dA.data(), lda, dB.data(), ldb, 1.0f, dC2.data(), dD.data(),
                      N);
        record_delta("gemm f32 C->D", shape, "D", down(dD), ref, C0);
        record("gemm f32 C->D", shape, "C unchanged", down(dC2), C0);
    }
    // strided batched, B shared (stride 0) and a padded C stride
    const int64_t batch = 3, sc = M * N + 7;
    auto A = bf16_values(size_t(batch * M * K), rng), B = bf16_values(size_t(N * K), rng);
    std::vector<float> ref(size_t(batch * sc), 0.0f);
    for (int64_t b = 0; b < batch; ++b)
        hydra::gemm(false, true, M, N, K, 1.0f, A.data() + b * M * K, K, B.data(), K, 0.0f, ref.data() + b * sc, N);
    auto dA = up_bf16(A), dB = up_bf16(B);
    auto dC = poisoned<float>(size_t(batch * sc));
    cu::gemm_bf16_batched(ctx, false, true, M, N, K, 1.0f, dA.data(), K, M * K, dB.data(), K, 0, 0.0f, dC.data(), N,
                          sc, batch);
    std::vector<float> got = down(dC);
    std::vector<float> g2, r2;  // the padding between matrices is not written
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < M * N; ++i) g2.push_back(got[size_t(b * sc + i)]), r2.push_back(ref[size_t(b * sc + i)]);
    record("gemm batched tB", dims({{"b", batch}, {"M", M}, {"N", N}, {"K", K}}), "C", g2, r2);
}

void linear_case(cu::BlasContext& ctx, int64_t N, int64_t in, int64_t out, Rng& rng) {
    const std::string shape = dims({{"N", N}, {"in", in}, {"out", out}});
    auto X = bf16_values(size_t(N * in), rng), W = bf16_values(size_t(out * in), rng, 0.05f),
         dY = bf16_values(size_t(N * out), rng);
    auto Y0 = f32_values(size_t(N * out), rng), dX0 = f32_values(size_t(N * in), rng),
         dW0 = f32_values(size_t(out * in), rng, 10.f);
    std::vector<float> y_ref(static_cast<size_t>(N * out)), dx_ref(size_t(N * in)), dw_ref = dW0;
    hydra::cpu::linear_forward<float>(y_ref.data(), X.data(), W.data(), nullptr, N, in, out);
    hydra::cpu::linear_backward<float>(dx_ref.data(), dw_ref.data(), nullptr, dY.data(), X.data(), W.data(), N, in,
                                       out);
    auto dXd = up_bf16(X), dWd = up_bf16(W), dYd = up_bf16(dY);
    auto y = poisoned<bf16>(size_t(N * out));
    cu::linear_forward(ctx, dXd.data(), dWd.data(), N, in, out, y.data());
    record("linear fwd bf16", shape, "Y", down(y), y_ref);
    auto yf = up_f32(Y0);
    cu::linear_forward(ctx, dXd.data(), dWd.data(), N, in, out, yf.data(), 1.0f);
    std::vector<float> y_acc(Y0.size());
    for (size_t i = 0; i < y_acc.size(); ++i) y_acc[i] = Y0[i] + y_ref[i];
    record_delta("linear fwd f32 +=", shape, "Y", down(yf), y_acc, Y0);
    auto yf0 = poisoned<float>(size_t(N * out));
    cu::linear_forward(ctx, dXd.data(), dWd.data(), N, in, out, yf0.data(), 0.0f);
    record("linear fwd f32 =", shape, "Y", down(yf0), y_ref);
    auto dx = poisoned<bf16>(size_t(N * in));
    cu::linear_backward_dx(ctx, dYd.data(), dWd.data(), N, in, out, dx.data());
    record("linear bwd dx bf16", shape, "dX", down(dx), dx_ref);
    auto dxf = up_f32(dX0);
    cu::linear_backward_dx(ctx, dYd.data(), dWd.data(), N, in, out, dxf.data(), 1.0f);
    std::vector<float> dx_acc(dX0.size());
    for (size_t i = 0; i < dx_acc.size(); ++i) dx_acc[i] = dX0[i] + dx_ref[i];
    record_delta("linear bwd dx f32 +=", shape, "dX", down(dxf), dx_acc, dX0);
    auto dwf = up_f32(dW0);
    cu::linear_backward_dw(ctx, dYd.data(), dXd.data(), N, in, out, dwf.data());
    record_delta("linear bwd dW f32 +=", shape, "dW", down(dwf), dw_ref, dW0);
}

// ---- LM-head losses ----------------------------------------------------------------------------------

void ce_case(cu::BlasContext& ctx, int64_t N, int64_t C, int64_t V, const cu::LmHeadChunking& ck, Rng& rng) {
    const std::string shape = dims({{"N", N}, {"C", C}, {"V", V}});
    auto h = bf16_values(size_t(N * C), rng), W = bf16_values(size_t(V * C), rng, 0.06f);
    std::vector<int32_t> tg(static_cast<size_t>(N));
    int64_t scored = 0;
    for (auto& t : tg) {
        t = rng.uniform() < 0.1 ? -1 : int32_t(rng.uniform() * double(V)) % int32_t(V);
        scored += t >= 0;
    }
    tg[0] = 0, tg[size_t(N - 1)] = int32_t(V - 1);  // both ends of the vocabulary
    scored = 0;
    for (auto t : tg) scored += t >= 0;
    const float gs = 1.0f / float(scored);
    auto dW0 = f32_values(size_t(V * C), rng, 1e-3f);
    std::vector<float> dh_ref(static_cast<size_t>(N * C)), dW_ref = dW0;
    const auto t0 = std::chrono::steady_clock::now();
    const hydra::LossResult ref =
        hydra::cross_entropy_lm_head(h.data(), W.data(), tg.data(), N, C, V, dh_ref.data(), dW_ref.data(), gs);
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    auto dh = up_bf16(h), dWh = up_bf16(W);
    cu::DeviceBuffer<int32_t> dtg(N);
    dtg.upload(tg.data());
    cu::DeviceBuffer<cu::LossTotals> tot(1);
    cu::LmHeadLossWorkspace ws(ck, false, C);
    auto g_dh = poisoned<float>(size_t(N * C));
    auto g_dW = up_f32(dW0);
    cu::zero_totals(tot.data());
    cu::LmHeadGrads gr;
    gr.dh_f32 = g_dh.data(), gr.dW = g_dW.data(), gr.grad_scale = gs;
    cu::cross_entropy_lm_head(ctx, dh.data(), dWh.data(), dtg.data(), N, C, V, gr, tot.data(), ws);
    const cu::LossTotals t = cu::read_totals(tot.data());
    std::printf("ce %s (rb %lld, vc %lld; cpu reference %.1f s): loss %.6f gpu %.6f, count %lld gpu %lld\n",
                shape.c_str(), (long long)ck.row_block, (long long)ck.vocab_chunk, cpu_s, ref.loss, t.loss,
                (long long)ref.count, t.count);
    record_scalar("ce loss (sum)", shape, "loss", t.loss, ref.loss, kTolLoss);
    record_exact("ce count", shape, "count", std::llabs(t.count - ref.count) + t.invalid);
    record("ce bwd", shape, "dh f32", down(g_dh), dh_ref);
    record_delta("ce bwd", shape, "dW +=", down(g_dW), dW_ref, dW0);
    // bf16 dh, loss only accumulated twice, no dW
    auto g_dhb = poisoned<bf16>(size_t(N * C));
    cu::LmHeadGrads gb;
    gb.dh_bf16 = g_dhb.data(), gb.grad_scale = gs;
    cu::zero_totals(tot.data());
    cu::cross_entropy_lm_head(ctx, dh.data(), dWh.data(), dtg.data(), N, C, V, gb, tot.data(), ws);
    cu::cross_entropy_lm_head(ctx, dh.data(), dWh.data(), dtg.data(), N, C, V, cu::LmHeadGrads{}, tot.data(), ws);
    const cu::LossTotals t2 = cu::read_totals(tot.data());
    record("ce bwd", shape, "dh bf16", down(g_dhb), dh_ref);
    record_scalar("ce loss x2 (totals +=)", shape, "loss", t2.loss, 2 * ref.loss, kTolLoss);
}

void kl_case(cu::BlasContext& ctx, int64_t N, int64_t Cs, int64_t Ct, int64_t V, float tau, int64_t seq_len,
             int64_t kl_max_position, const cu::LmHeadChunking& ck, Rng& rng) {
    const std::string shape = dims({{"N", N}, {"Cs", Cs}, {"Ct", Ct}, {"V", V}}) + " tau" +
                              std::to_string(tau).substr(0, 3) + (kl_max_position ? " mask" : "");
    auto hs = bf16_values(size_t(N * Cs), rng), Ws = bf16_values(size_t(V * Cs), rng, 0.06f);
    auto ht = bf16_values(size_t(N * Ct), rng), Wt = bf16_values(size_t(V * Ct), rng, 0.06f);
    // the student as a perturbed copy of the teacher where widths match, so the KL is realistic
    if (Cs == Ct)
        for (size_t i = 0; i < hs.size(); ++i) hs[i] = round_bf16(ht[i] + 0.5f * hs[i]);
    std::vector<uint8_t> mask(size_t(N), 1);
    std::vector<int64_t> rows;
    for (int64_t n = 0; n < N; ++n) {
        if (kl_max_position > 0) mask[size_t(n)] = n % seq_len < kl_max_position;
        if (mask[size_t(n)]) rows.push_back(n);
    }
    const int64_t M = int64_t(rows.size());
    const float gs = 1.0f / float(M);
    // CPU: the trainer's compaction to the kept rows (model_step.cpp)
    std::vector<float> sh(static_cast<size_t>(M * Cs)), th(size_t(M * Ct)), dsh(size_t(M * Cs));
    for (int64_t i = 0; i < M; ++i) {
        std::copy_n(hs.data() + rows[size_t(i)] * Cs, Cs, sh.data() + i * Cs);
        std::copy_n(ht.data() + rows[size_t(i)] * Ct, Ct, th.data() + i * Ct);
    }
    auto dW0 = f32_values(size_t(V * Cs), rng, 1e-3f);
    std::vector<float> dW_ref = dW0, dh_ref(size_t(N * Cs), 0.0f);
    const auto t0 = std::chrono::steady_clock::now();
    const hydra::LossResult ref = hydra::kl_lm_head(sh.data(), Ws.data(), Cs, th.data(), Wt.data(), Ct, M, V, tau,
                                                    dsh.data(), dW_ref.data(), gs);
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int64_t i = 0; i < M; ++i) std::copy_n(dsh.data() + i * Cs, Cs, dh_ref.data() + rows[size_t(i)] * Cs);

    auto d_hs = up_bf16(hs), d_Ws = up_bf16(Ws), d_ht = up_bf16(ht), d_Wt = up_bf16(Wt);
    cu::DeviceBuffer<uint8_t> dmask(N);
    dmask.upload(mask.data());
    cu::DeviceBuffer<cu::LossTotals> tot(1);
    cu::LmHeadLossWorkspace ws(ck, true, Cs);
    // dh fp32 ACCUMULATED onto a random start (as after the CE of the same step)
    auto dh0 = f32_values(size_t(N * Cs), rng, 1e-3f);
    auto g_dh = up_f32(dh0);
    auto g_dW = up_f32(dW0);
    cu::zero_totals(tot.data());
    cu::LmHeadGrads gr;
    gr.dh_f32 = g_dh.data(), gr.accumulate_dh = true, gr.dW = g_dW.data(), gr.grad_scale = gs;
    cu::kl_lm_head(ctx, d_hs.data(), d_Ws.data(), Cs, d_ht.data(), d_Wt.data(), Ct,
                   kl_max_position ? dmask.data() : nullptr, N, V, tau, gr, tot.data(), ws);
    const cu::LossTotals t = cu::read_totals(tot.data());
    std::printf("kl %s (rb %lld, vc %lld; cpu reference %.1f s): loss %.6f gpu %.6f, rows %lld gpu %lld\n",
                shape.c_str(), (long long)ck.row_block, (long long)ck.vocab_chunk, cpu_s, ref.loss, t.loss,
                (long long)ref.count, t.count);
    record_scalar("kl loss (sum)", shape, "loss", t.loss, ref.loss, kTolLoss);
    record_exact("kl count", shape, "count", std::llabs(t.count - ref.count));
    std::vector<float> dh_acc_ref(dh0.size());
    for (size_t i = 0; i < dh0.size(); ++i) dh_acc_ref[i] = dh0[i] + dh_ref[i];
    record_delta("kl bwd", shape, "dh f32+=", down(g_dh), dh_acc_ref, dh0);
    record_delta("kl bwd", shape, "dW +=", down(g_dW), dW_ref, dW0);
    // bf16 dh, overwrite (masked rows must come out 0)
    auto g_dhb = poisoned<bf16>(size_t(N * Cs));
    cu::LmHeadGrads gb;
    gb.dh_bf16 = g_dhb.data(), gb.grad_scale = gs;
    cu::zero_totals(tot.data());
    cu::kl_lm_head(ctx, d_hs.data(), d_Ws.data(), Cs, d_ht.data(), d_Wt.data(), Ct,
                   kl_max_position ? dmask.data() : nullptr, N, V, tau, gb, tot.data(), ws);
    record("kl bwd", shape, "dh bf16", down(g_dhb), dh_ref);
}

void mse_case(int64_t n, Rng& rng) {
    const std::string shape = dims({{"n", n}});
    auto a = f32_values(size_t(n), rng), b = f32_values(size_t(n), rng);
    std::vector<float> da_ref(static_cast<size_t>(n));
    const float gs = 1.0f / float(n);
    const hydra::LossResult ref = hydra::mse(a.data(), b.data(), n, da_ref.data(), gs);
    auto da = up_f32(a), db = up_f32(b);
    auto g = poisoned<float>(size_t(n));
    cu::DeviceBuffer<cu::LossTotals> tot(1);
    cu::MseWorkspace ws;
    cu::zero_totals(tot.data());
    cu::mse(da.data(), db.data(), n, g.data(), false, gs, tot.data(), ws);
    const cu::LossTotals t = cu::read_totals(tot.data());
    record_scalar("mse loss (sum)", shape, "loss", t.loss, ref.loss, kTolLoss);
    record_exact("mse count", shape, "count", std::llabs(t.count - ref.count));
    record("mse bwd", shape, "da", down(g), da_ref, kTolAdam);
    cu::mse(da.data(), db.data(), n, g.data(), true, gs, tot.data(), ws);
    std::vector<float> twice(da_ref.size());
    for (size_t i = 0; i < twice.size(); ++i) twice[i] = 2 * da_ref[i];
    record("mse bwd accumulate", shape, "da", down(g), twice, kTolAdam);
}

// ---- AdamW -------------------------------------------------------------------------------------------

void adamw_case(Rng& rng) {
    // spans: a matrix, odd sizes, a frozen one, lr/wd multipliers; 64-byte aligned offsets with padding
    struct S {
        int64_t size;
        float lr_scale, wd_scale;
        bool trainable;
    };
    const std::vector<S> layout = {{576 * 1536, 1.0f, 1.0f, true}, {577, 1.0f, 0.0f, true},
                                   {3 * 4096 + 5, 0.5f, 1.0f, true}, {1000, 1.0f, 1.0f, false},
                                   {49152 + 3, 2.0f, 0.5f, true},    {10, 1.0f, 0.0f, true}};
    std::vector<hydra::ParamSpan> spans;
    std::vector<cu::AdamWSpan> dspans;
    int64_t off = 0;
    for (size_t i = 0; i < layout.size(); ++i) {
        hydra::ParamSpan s;
        s.name = "p" + std::to_string(i);
        s.offset = off, s.size = layout[i].size, s.lr_scale = layout[i].lr_scale, s.wd_scale = layout[i].wd_scale;
        s.trainable = layout[i].trainable;
        spans.push_back(s);
        cu::AdamWSpan d;
        d.offset = s.offset, d.size = s.size, d.lr_scale = s.lr_scale, d.wd_scale = s.wd_scale;
        d.trainable = s.trainable, d.mirror = i != 5;  // one span without a mirror
        dspans.push_back(d);
        off = (off + s.size + 15) / 16 * 16 + 16;  // padding after every span
    }
    const int64_t n = off;
    const std::string shape = dims({{"n", n}, {"spans", int64_t(spans.size())}});
    hydra::AdamWConfig cfg;
    cfg.lr = 3e-3f, cfg.weight_decay = 0.1f;
    cu::AdamWHyper hy;
    hy.lr = cfg.lr, hy.beta1 = cfg.beta1, hy.beta2 = cfg.beta2, hy.eps = cfg.eps, hy.weight_decay = cfg.weight_decay;
    hydra::AdamW cpu(cfg, n);
    cu::DeviceAdamW gpu(hy, n, dspans);
    std::vector<float> p = f32_values(size_t(n), rng, 0.02f);
    const std::vector<float> p_init = p;
    auto dp = up_f32(p);
    auto mirror = poisoned<bf16>(size_t(n));
    cu::cast_f32_to_bf16(dp.data(), mirror.data(), n);  // the initial mirror of everything
    cu::DeviceBuffer<float> dg(n);
    cu::DeviceBuffer<float> dfac(1);
    const double max_norm = 1.0;
    for (int step = 1; step <= 4; ++step) {
        // gradients of magnitude ~ step so that clipping is active in some steps and not in others
        std::vector<float> g = f32_values(size_t(n), rng, step == 2 ? 1e-4f : 2e-3f);
        for (size_t i = 0; i < g.size(); ++i) g[i] *= 1.0f + 0.5f * float(i % 7);
        dg.upload(g.data());
        // CPU
        const double norm_ref = hydra::grad_norm(g.data(), spans);
        const bool fin_ref = hydra::all_finite(g.data(), spans);
        const double coef_ref = hydra::clip_grads(g.data(), spans, max_norm, norm_ref);
        const std::vector<float> p_before = p;
        cpu.set_lr(cfg.lr * (1.0f - 0.1f * float(step)));
        cpu.step(p.data(), g.data(), n, spans);
        // GPU
        gpu.grad_norm(dg.data());
        const cu::GradNormResult r = gpu.read_result();
        const double coef = cu::DeviceAdamW::clip_coefficient(r.norm, max_norm);
        gpu.set_lr(cfg.lr * (1.0f - 0.1f * float(step)));
        const std::string sh = shape + " step" + std::to_string(step);
        if (step == 3) {  // clip on the device through grad_factor_dev
            const float f = float(coef);
            dfac.upload(&f);
            gpu.step(dp.data(), mirror.data(), dg.data(), nullptr, 1.0f, dfac.data());
        } else if (step == 4) {  // explicit clip kernel, then a plain step
            gpu.clip_grads(dg.data(), float(coef));
            const std::vector<float> gclip = down(dg);
            record("adamw clip_grads", sh, "g", gclip, g, 1e-7);
            gpu.step(dp.data(), mirror.data(), dg.data());
        } else {
            gpu.step(dp.data(), mirror.data(), dg.data(), nullptr, float(coef));
        }
        record_scalar("grad_norm", sh, "norm", r.norm, norm_ref, 1e-9);
        record_exact("all_finite", sh, "nonfin", r.nonfinite + (fin_ref ? 0 : 1));
        record_scalar("clip coefficient", sh, "coef", coef, coef_ref, 1e-9);
        const std::vector<float> gp = down(dp);
        std::vector<float> upd(static_cast<size_t>(n)), upd_ref(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
            upd[size_t(i)] = gp[size_t(i)] - p_before[size_t(i)], upd_ref[size_t(i)] = p[size_t(i)] - p_before[size_t(i)];
        record("adamw update", sh, "dp", upd, upd_ref, kTolAdam);
        if (step == 4) {
            record("adamw master", sh, "p", gp, p, kTolAdam);
            record("adamw state", sh, "m", cu::download_f32(gpu.m(), n), std::vector<float>(cpu.m(), cpu.m() + n),
                   kTolAdam);
            record("adamw state", sh, "v", cu::download_f32(gpu.v(), n), std::vector<float>(cpu.v(), cpu.v() + n),
                   kTolAdam);
            // mirror == bf16(p) where mirrored; frozen span + padding bit-identical to the start
            const std::vector<float> mir = down(mirror);
            long long bad_mirror = 0, bad_frozen = 0;
            std::vector<char> covered(size_t(n), 0);
            for (size_t si = 0; si < spans.size(); ++si) {
                for (int64_t i = spans[si].offset; i < spans[si].offset + spans[si].size; ++i) {
                    covered[size_t(i)] = spans[si].trainable;
                    if (!spans[si].trainable) continue;
                    const float want = dspans[si].mirror ? round_bf16(gp[size_t(i)]) : round_bf16(p_init[size_t(i)]);
                    bad_mirror += std::memcmp(&mir[size_t(i)], &want, 4) != 0;
                }
            }
            for (int64_t i = 0; i < n; ++i)
                if (!covered[size_t(i)]) bad_frozen += std::memcmp(&gp[size_t(i)], &p_init[size_t(i)], 4) != 0;
            record_exact("adamw bf16 mirror", sh, "mirror", bad_mirror);
            record_exact("adamw frozen+padding", sh, "p", bad_frozen);
        }
    }
    // non-finite detection: NaN and Inf in trainable spans, NaN in the frozen span (not counted)
    std::vector<float> g = f32_values(size_t(n), rng, 1e-3f);
    g[5] = NAN;
    g[size_t(spans[2].offset + 7)] = INFINITY;
    g[size_t(spans[3].offset + 1)] = NAN;
    g[size_t(spans[0].offset + spans[0].size + 1)] = NAN;  // padding
    dg.upload(g.data());
    gpu.grad_norm(dg.data());
    const cu::GradNormResult r = gpu.read_result();
    record_exact("grad nonfinite count", shape, "nonfin", std::llabs(r.nonfinite - 2));
    record_exact("all_finite (cpu) agrees", shape, "flag", hydra::all_finite(g.data(), spans) ? 1 : 0);
    cu::zero_grads(dg.data(), n);
    const std::vector<float> z = down(dg);
    long long nz = 0;
    for (float x : z) nz += x != 0.0f;
    record_exact("zero_grads", shape, "g", nz);
}

// ---- device arena / caching allocator ----------------------------------------------------------------

void arena_case() {
    const std::string shape = "1 MiB arena";
    cu::DeviceArena a(1 << 20);
    long long bad = 0;
    float* x = a.alloc<float>(1000);
    const size_t mk = a.mark();
    bf16* y = a.alloc<bf16>(77);
    double* z = a.alloc<double>(3);
    bad += (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(z)) % 256 != 0;
    bad += reinterpret_cast<char*>(y) - reinterpret_cast<char*>(x) != 4096;
    const size_t peak = a.peak_bytes();
    a.reset(mk);
    bad += a.used_bytes() != mk || a.peak_bytes() != peak || peak != 4096 + 256 + 256;
    bad += a.alloc<bf16>(5) != y;  // the same slice again after reset
    bool threw = false;
    try {
        a.alloc_bytes(2 << 20);
    } catch (const std::exception&) {
        threw = true;
    }
    bad += !threw;
    // write through an arena pointer (the memory is real)
    std::vector<float> h(1000, 3.0f);
    cu::upload(x, h.data(), 1000);
    const std::vector<float> back = cu::download_f32(x, 1000);
    bad += back[999] != 3.0f;
    record_exact("device arena", shape, "checks", bad);

    cu::CachingAllocator c;
    long long cbad = 0;
    void* p1 = c.allocate(1000);
    void* p2 = c.allocate(5000);
    cbad += c.in_use_bytes() != cu::CachingAllocator::size_class(1000) + cu::CachingAllocator::size_class(5000);
    c.free(p1);
    void* p3 = c.allocate(900);  // same class as 1000 -> the cached block
    cbad += p3 != p1;
    cbad += cu::CachingAllocator::size_class(5000) < 5000 || cu::CachingAllocator::size_class(5000) % 256 != 0;
    cbad += cu::CachingAllocator::size_class(4097) != 5120;
    c.free(p2);
    c.free(p3);
    cbad += c.in_use_bytes() != 0 || c.cached_bytes() == 0 || c.peak_bytes() < 6000;
    c.release_cached();
    cbad += c.cached_bytes() != 0;
    record_exact("caching allocator", "size classes", "checks", cbad);
}

// ---- timing (informative, no reference) -------------------------------------------------------------

void timing(cu::BlasContext& ctx, Rng& rng) {
    const int64_t N = 8192, C = 576, V = 49152;
    auto h = bf16_values(size_t(N * C), rng), W = bf16_values(size_t(V * C), rng, 0.06f);
    std::vector<int32_t> tg(static_cast<size_t>(N));
    for (auto& t : tg) t = int32_t(rng.uniform() * double(V)) % int32_t(V);
    auto dh = up_bf16(h), dW = up_bf16(W);
    cu::DeviceBuffer<int32_t> dtg(N);
    dtg.upload(tg.data());
    cu::DeviceBuffer<cu::LossTotals> tot(1);
    cu::LmHeadLossWorkspace ws(cu::LmHeadChunking{}, false);
    cu::DeviceBuffer<float> gdh(N * C), gdW(V * C);
    gdW.zero();
    cu::LmHeadGrads gr;
    gr.dh_f32 = gdh.data(), gr.dW = gdW.data(), gr.grad_scale = 1.0f / float(N);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    std::vector<float> ms;
    for (int it = 0; it < 6; ++it) {
        cu::zero_totals(tot.data());
        CUDA_CHECK(cudaEventRecord(e0));
        cu::cross_entropy_lm_head(ctx, dh.data(), dW.data(), dtg.data(), N, C, V, gr, tot.data(), ws);
        CUDA_CHECK(cudaEventRecord(e1));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (it > 0) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const double flops = 4.0 * 2.0 * double(N) * double(V) * double(C);  // 2 logits GEMMs + dh + dW
    std::printf("timing: ce fwd+bwd N%lld C%lld V%lld (rb %lld, vc %lld): median %.3f ms, %.0f TFLOP/s on the 4 GEMMs\n",
                (long long)N, (long long)C, (long long)V, (long long)ws.chunking.row_block,
                (long long)ws.chunking.vocab_chunk, ms[ms.size() / 2], flops / (ms[ms.size() / 2] * 1e-3) / 1e12);
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
        else if (!std::strcmp(argv[i], "--quick")) quick = true;
    }
    std::printf("cuda_train_ops_parity: seed %llu, tolerances bf16 %.0e, loss %.0e, adamw %.0e (relative RMS vs the "
                "CPU float reference)\n",
                (unsigned long long)seed, kTolBf16, kTolLoss, kTolAdam);
    Rng rng(seed);
    try {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        std::printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
        cu::BlasContext ctx;
        gemm_case(ctx, 77, 129, 200, rng);
        linear_case(ctx, 301, 576, 1536, rng);
        if (!quick) linear_case(ctx, 33, 1000, 77, rng);
        // small vocabulary: one partial chunk, several row blocks
        ce_case(ctx, 301, 576, 1000, cu::LmHeadChunking{128, 4096}, rng);
        // the real vocabulary: 12 chunks of 4096 (and 6 of 8192 + one row block with the defaults)
        ce_case(ctx, 301, 576, 49152, cu::LmHeadChunking{128, 4096}, rng);
        if (!quick) ce_case(ctx, 301, 576, 49152, cu::LmHeadChunking{}, rng);
        // one chunk holding the whole vocabulary: pass 2 reuses pass 1's logits (the training step's choice);
        // the fused CE row kernel, 16-byte path (V % 4 == 0, also V = 1000 above) and scalar path (V = 1001)
        ce_case(ctx, 301, 576, 49152, cu::LmHeadChunking{128, 49152}, rng);
        ce_case(ctx, 301, 576, 1001, cu::LmHeadChunking{128, 4096}, rng);
        kl_case(ctx, 301, 576, 576, 1000, 1.0f, 100, 0, cu::LmHeadChunking{128, 384}, rng);
        kl_case(ctx, 301, 576, 640, 49152, 2.0f, 100, 60, cu::LmHeadChunking{128, 8192}, rng);
        kl_case(ctx, 301, 576, 640, 49152, 2.0f, 100, 60, cu::LmHeadChunking{128, 49152}, rng);  // resident
        // V % 4 != 0 (scalar paths): resident, and chunks of 250 (rows not 16-byte aligned, last chunk 1)
        kl_case(ctx, 301, 576, 576, 1001, 1.0f, 100, 60, cu::LmHeadChunking{128, 1001}, rng);
        kl_case(ctx, 301, 576, 576, 1001, 2.0f, 100, 60, cu::LmHeadChunking{128, 250}, rng);
        mse_case(301 * 576, rng);
        adamw_case(rng);
        arena_case();
        timing(ctx, rng);
    } catch (const std::exception& e) {
        std::printf("ERROR: %s\n", e.what());
        return 2;
    }
    int fails = 0;
    std::printf("\n%-24s %-34s %-9s %12s %8s  %s\n", "op", "shape", "output", "rel_rms", "tol", "result");
    for (const auto& r : g_rows) {
        std::printf("%-24s %-34s %-9s %12.3e %8.0e  %s\n", r.op.c_str(), r.shape.c_str(), r.out.c_str(), r.err, r.tol,
                    r.nan ? "FAIL (NaN/unwritten)" : (r.pass ? "pass" : "FAIL"));
        fails += r.pass ? 0 : 1;
    }
    std::printf("%d passed, %d failed\n", int(g_rows.size()) - fails, fails);
    return fails ? 1 : 0;
}
