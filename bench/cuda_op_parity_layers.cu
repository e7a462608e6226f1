// Op parity of the CUDA element-wise / normalisation layer ops against the CPU reference (float):
// embedding, RMSNorm, RoPE, SwiGLU, GDN short conv, GDN gates, gated RMSNorm, head fusion (every
// FusionKind) and the element-wise helpers, forward and backward. Same method as cuda_op_parity: fresh
// random inputs every run (seed printed; --seed N repeats one), odd shapes (N 77, C 576, H 9, Dh 64,
// T 130), overwritten outputs poisoned with NaN before each call so unwritten elements fail, accumulated
// (+=) outputs start from random values and are compared as increments. Metric: relative RMS error
// ||gpu - ref|| / ||ref|| per output; tolerance 1e-2 where the GPU output is bf16, 1e-5 where it is fp32
// (DESIGN.md §3). Prints a table; exit status 1 on any failure.
//
// Usage: cuda_op_parity_layers [--seed N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/fusion.h"
#include "model/hybrid_plan.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/gated_rmsnorm.h"
#include "ops/cpu/gdn_gates.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/short_conv.h"
#include "ops/cpu/swiglu.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/fusion.h"
#include "ops/cuda/gated_rmsnorm.h"
#include "ops/cuda/gdn_gates.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/short_conv.h"
#include "ops/cuda/swiglu.h"

using hydra::cuda::bf16;
namespace cu = hydra::cuda;
namespace cpu = hydra::cpu;

// fusion.cu maps hydra::FusionKind by its enumerator values.
static_assert(int(hydra::FusionKind::ScaleNorm) == 0 && int(hydra::FusionKind::None) == 1 &&
                  int(hydra::FusionKind::Hymba) == 2 && int(hydra::FusionKind::LaOnly) == 3,
              "ops/cuda/fusion.cu assumes these FusionKind values");

namespace {

constexpr double kTolBf16 = 1e-2;
constexpr double kTolF32 = 1e-5;

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
    if (got.size() != ref.size()) {
        *nan = true;
        return INFINITY;
    }
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(got[i])) *nan = true;
        const double d = double(got[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void record(const std::string& op, const std::string& shape, const std::string& out, const std::vector<float>& got,
            const std::vector<float>& ref, double tol) {
    bool nan = false;
    const double e = rel_rms(got, ref, &nan);
    const bool pass = !nan && e <= tol;
    g_rows.push_back({op, shape, out, e, tol, nan, pass});
    std::printf("  %-24s %-30s %-9s rel_rms %.3e (tol %.0e) %s\n", op.c_str(), shape.c_str(), out.c_str(), e, tol,
                nan ? "NaN/unwritten" : (pass ? "ok" : "FAIL"));
    std::fflush(stdout);
}

struct Rng {
    std::mt19937_64 gen;
    std::normal_distribution<float> nd{0.f, 1.f};
    explicit Rng(uint64_t s) : gen(s) {}
    float normal() { return nd(gen); }
    int uniform(int n) { return int(gen() % uint64_t(n)); }
};

float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

// Random values rounded to bf16 (so the CPU sees exactly what the GPU reads).
std::vector<float> bf16_values(size_t n, Rng& r, float scale = 1.f, float offset = 0.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = round_bf16(offset + scale * r.normal());
    return v;
}
std::vector<float> f32_values(size_t n, Rng& r, float scale = 1.f, float offset = 0.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = offset + scale * r.normal();
    return v;
}
std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
    return d;
}
std::vector<float> round_all(std::vector<float> v) {
    for (auto& x : v) x = round_bf16(x);
    return v;
}

template <typename T>
struct Dev {
    T* p = nullptr;
    size_t n = 0;
    explicit Dev(size_t n_) : n(n_) {
        CUDA_CHECK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
        poison();
    }
    ~Dev() {
        if (cudaFree(p) != cudaSuccess) std::printf("warning: cudaFree failed\n");
    }
    void poison() { CUDA_CHECK(cudaMemset(p, 0xFF, (n ? n : 1) * sizeof(T))); }  // NaN in bf16 and fp32
    Dev(const Dev&) = delete;
};
using DB = std::unique_ptr<Dev<bf16>>;
using DF = std::unique_ptr<Dev<float>>;

DB up_bf16(const std::vector<float>& v) {
    std::vector<bf16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16(v[i]);
    DB d(new Dev<bf16>(v.size()));
    CUDA_CHECK(cudaMemcpy(d->p, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    return d;
}
DF up_f32(const std::vector<float>& v) {
    DF d(new Dev<float>(v.size()));
    CUDA_CHECK(cudaMemcpy(d->p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
std::unique_ptr<Dev<int32_t>> up_i32(const std::vector<int32_t>& v) {
    std::unique_ptr<Dev<int32_t>> d(new Dev<int32_t>(v.size()));
    CUDA_CHECK(cudaMemcpy(d->p, v.data(), v.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    return d;
}
DB new_bf16(size_t n) { return DB(new Dev<bf16>(n)); }
DF new_f32(size_t n) { return DF(new Dev<float>(n)); }
std::vector<float> down(const Dev<bf16>& d) {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<bf16> h(d.n);
    CUDA_CHECK(cudaMemcpy(h.data(), d.p, d.n * sizeof(bf16), cudaMemcpyDeviceToHost));
    std::vector<float> v(d.n);
    for (size_t i = 0; i < d.n; ++i) v[i] = __bfloat162float(h[i]);
    return v;
}
std::vector<float> down(const Dev<float>& d) {
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> v(d.n);
    CUDA_CHECK(cudaMemcpy(v.data(), d.p, d.n * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
}

std::string S(const char* k, int64_t v) { return std::string(k) + std::to_string(v); }

// ---- embedding ------------------------------------------------------------------------------------------

void embedding_case(int64_t N, int64_t V, int64_t C, Rng& rng) {
    const std::string shape = S("N", N) + S(" V", V) + S(" C", C);
    std::vector<int32_t> ids(static_cast<size_t>(N));
    for (auto& i : ids) i = rng.uniform(int(V));
    for (int64_t n = 5; n < N; n += 7) ids[size_t(n)] = ids[size_t(n - 3)];  // repeated tokens
    auto table = bf16_values(static_cast<size_t>(V * C), rng);
    auto dx = f32_values(static_cast<size_t>(N * C), rng);
    auto dt0 = f32_values(static_cast<size_t>(V * C), rng, 0.1f);
    std::vector<float> x_ref(static_cast<size_t>(N * C)), dt_ref = dt0;
    cpu::embedding_forward<float>(x_ref.data(), ids.data(), table.data(), N, V, C);
    cpu::embedding_backward<float>(dt_ref.data(), dx.data(), ids.data(), N, V, C);

    auto dids = up_i32(ids);
    auto dtab = up_bf16(table);
    auto dtab32 = up_f32(table);
    auto ddx = up_f32(dx);
    auto ddt = up_f32(dt0);
    auto x = new_f32(static_cast<size_t>(N * C));
    cu::embedding_forward(x->p, dids->p, dtab->p, N, V, C);
    record("embedding fwd", shape, "x", down(*x), x_ref, kTolF32);
    x->poison();
    cu::embedding_forward(x->p, dids->p, dtab32->p, N, V, C);
    record("embedding fwd f32tab", shape, "x", down(*x), x_ref, kTolF32);
    cu::embedding_backward(ddt->p, ddx->p, dids->p, N, V, C);
    record("embedding bwd", shape, "dtable+=", minus(down(*ddt), dt0), minus(dt_ref, dt0), kTolF32);
}

// ---- RMSNorm ------------------------------------------------------------------------------------------

void rmsnorm_case(int64_t N, int64_t C, Rng& rng) {
    const std::string shape = S("N", N) + S(" C", C);
    const float eps = 1e-5f;
    auto x = f32_values(static_cast<size_t>(N * C), rng, 2.f);
    auto w = f32_values(static_cast<size_t>(C), rng, 0.2f, 1.f);
    auto dy = bf16_values(static_cast<size_t>(N * C), rng);
    auto dx0 = f32_values(static_cast<size_t>(N * C), rng);
    auto dw0 = f32_values(static_cast<size_t>(C), rng, 0.1f);
    std::vector<float> y_ref(static_cast<size_t>(N * C)), rstd_ref(static_cast<size_t>(N)), dx_ref = dx0, dw_ref = dw0;
    cpu::rmsnorm_forward<float>(y_ref.data(), rstd_ref.data(), x.data(), w.data(), N, C, eps);
    cpu::rmsnorm_backward<float>(dx_ref.data(), dw_ref.data(), dy.data(), x.data(), w.data(), rstd_ref.data(), N, C,
                                 true);

    auto dX = up_f32(x), dW = up_f32(w), dDy32 = up_f32(dy);
    auto dDy = up_bf16(dy);
    auto y = new_bf16(static_cast<size_t>(N * C));
    auto y32 = new_f32(static_cast<size_t>(N * C));
    auto rstd = new_f32(static_cast<size_t>(N));
    cu::rmsnorm_forward(y->p, rstd->p, dX->p, dW->p, N, C, eps);
    record("rmsnorm fwd", shape, "y bf16", down(*y), y_ref, kTolBf16);
    record("rmsnorm fwd", shape, "rstd", down(*rstd), rstd_ref, kTolF32);
    cu::rmsnorm_forward(y32->p, nullptr, dX->p, dW->p, N, C, eps);
    record("rmsnorm fwd f32out", shape, "y f32", down(*y32), y_ref, kTolF32);
    {  // in place fp32 (y aliases x)
        auto xi = up_f32(x);
        cu::rmsnorm_forward(xi->p, nullptr, xi->p, dW->p, N, C, eps);
        record("rmsnorm fwd f32 inplace", shape, "y f32", down(*xi), y_ref, kTolF32);
    }
    for (int f32dy = 0; f32dy < 2; ++f32dy) {
        auto ddx = up_f32(dx0), ddw = up_f32(dw0);
        if (f32dy)
            cu::rmsnorm_backward(ddx->p, ddw->p, dDy32->p, dX->p, dW->p, rstd->p, N, C);
        else
            cu::rmsnorm_backward(ddx->p, ddw->p, dDy->p, dX->p, dW->p, rstd->p, N, C);
        const char* op = f32dy ? "rmsnorm bwd f32dy" : "rmsnorm bwd";
        record(op, shape, "dx+=", minus(down(*ddx), dx0), minus(dx_ref, dx0), kTolF32);
        record(op, shape, "dw+=", minus(down(*ddw), dw0), minus(dw_ref, dw0), kTolF32);
    }
    {  // the bf16-copy overload with the copy left out (null)
        auto ddx = up_f32(dx0), ddw = up_f32(dw0);
        cu::rmsnorm_backward(ddx->p, static_cast<bf16*>(nullptr), ddw->p, dDy32->p, dX->p, dW->p, rstd->p, N,
                             C);
        record("rmsnorm bwd bf16 dx=null", shape, "dx+=", minus(down(*ddx), dx0), minus(dx_ref, dx0),
               kTolF32);
    }
    {  // fp32 dy, the updated dx also written as bf16
        auto ddx = up_f32(dx0), ddw = up_f32(dw0);
        auto dxb = new_bf16(static_cast<size_t>(N * C));
        cu::rmsnorm_backward(ddx->p, dxb->p, ddw->p, dDy32->p, dX->p, dW->p, rstd->p, N, C);
        record("rmsnorm bwd +bf16 dx", shape, "dx+=", minus(down(*ddx), dx0), minus(dx_ref, dx0), kTolF32);
        record("rmsnorm bwd +bf16 dx", shape, "dx bf16", down(*dxb), dx_ref, kTolBf16);
        record("rmsnorm bwd +bf16 dx", shape, "dw+=", minus(down(*ddw), dw0), minus(dw_ref, dw0), kTolF32);
    }
}

// ---- RoPE -------------------------------------------------------------------------------------------------

void rope_case(int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0, Rng& rng) {
    const std::string shape = S("S", num_seqs) + S(" T", T) + S(" H", H) + S(" Dh", Dh) + S(" R", rope_dim) +
                              S(" p", pos0);
    const double theta = 10000.0;
    const int64_t row = H * Dh, n = num_seqs * T * row, half = rope_dim / 2;
    auto x = bf16_values(static_cast<size_t>(n), rng);
    std::vector<float> f_ref = x, b_ref = x, cos_ref(static_cast<size_t>(T * half)), sin_ref(static_cast<size_t>(T * half));
    for (int64_t s = 0; s < num_seqs; ++s) {
        cpu::rope_forward<float>(f_ref.data() + s * T * row, T, H, Dh, rope_dim, pos0, theta);
        cpu::rope_backward<float>(b_ref.data() + s * T * row, T, H, Dh, rope_dim, pos0, theta);
    }
    cpu::rope_table<float>(cos_ref.data(), sin_ref.data(), T, rope_dim, pos0, theta);

    auto c = new_f32(static_cast<size_t>(T * half)), sn = new_f32(static_cast<size_t>(T * half));
    cu::rope_table(c->p, sn->p, T, rope_dim, pos0, theta);
    record("rope table", shape, "cos", down(*c), cos_ref, kTolF32);
    record("rope table", shape, "sin", down(*sn), sin_ref, kTolF32);
    {
        auto d = up_bf16(x);
        cu::rope_forward(d->p, num_seqs, T, H, Dh, rope_dim, c->p, sn->p);
        record("rope fwd table", shape, "x", down(*d), f_ref, kTolBf16);
    }
    {
        auto d = up_bf16(x);
        cu::rope_backward(d->p, num_seqs, T, H, Dh, rope_dim, c->p, sn->p);
        record("rope bwd table", shape, "dx", down(*d), b_ref, kTolBf16);
    }
    {
        auto d = up_bf16(x);
        cu::rope_forward(d->p, num_seqs, T, H, Dh, rope_dim, pos0, theta);
        record("rope fwd angles", shape, "x", down(*d), f_ref, kTolBf16);
    }
    {
        auto d = up_bf16(x);
        cu::rope_backward(d->p, num_seqs, T, H, Dh, rope_dim, pos0, theta);
        record("rope bwd angles", shape, "dx", down(*d), b_ref, kTolBf16);
    }
    {  // strided: the tensor is the middle slice of a wider (fused QKV-like) row; the rest must not move
        const int64_t pre = 2 * Dh, stride = pre + row + 3 * Dh, rows = num_seqs * T;
        auto buf = bf16_values(static_cast<size_t>(rows * stride), rng);
        std::vector<float> fw = buf, bw = buf;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t k = 0; k < row; ++k) {
                fw[size_t(r * stride + pre + k)] = f_ref[size_t(r * row + k)];
                bw[size_t(r * stride + pre + k)] = b_ref[size_t(r * row + k)];
                buf[size_t(r * stride + pre + k)] = x[size_t(r * row + k)];
            }
        auto d = up_bf16(buf);
        cu::rope_forward_strided(d->p + pre, stride, num_seqs, T, H, Dh, rope_dim, c->p, sn->p);
        record("rope fwd strided", shape, "x", down(*d), fw, kTolBf16);
        auto e = up_bf16(buf);
        cu::rope_backward_strided(e->p + pre, stride, num_seqs, T, H, Dh, rope_dim, c->p, sn->p);
        record("rope bwd strided", shape, "dx", down(*e), bw, kTolBf16);
    }
}

// ---- SwiGLU -----------------------------------------------------------------------------------------------

void swiglu_case(int64_t N, int64_t I, Rng& rng) {
    const std::string shape = S("N", N) + S(" I", I);
    const size_t n = size_t(N * I);
    auto gate = bf16_values(n, rng, 2.f), upv = bf16_values(n, rng), dout = bf16_values(n, rng);
    std::vector<float> out_ref(n), dg_ref(n), du_ref(n);
    cpu::swiglu_forward<float>(out_ref.data(), gate.data(), upv.data(), int64_t(n));
    cpu::swiglu_backward<float>(dg_ref.data(), du_ref.data(), dout.data(), gate.data(), upv.data(), int64_t(n));

    auto dG = up_bf16(gate), dU = up_bf16(upv), dO = up_bf16(dout);
    auto out = new_bf16(n), dg = new_bf16(n), du = new_bf16(n);
    cu::swiglu_forward(out->p, dG->p, dU->p, N, I, 0);
    record("swiglu fwd", shape, "out", down(*out), out_ref, kTolBf16);
    cu::swiglu_backward(dg->p, du->p, dO->p, dG->p, dU->p, N, I, 0, 0);
    record("swiglu bwd", shape, "dgate", down(*dg), dg_ref, kTolBf16);
    record("swiglu bwd", shape, "dup", down(*du), du_ref, kTolBf16);

    // fused (N, 2I) gate_up rows, gradients into a fused (N, 2I) buffer
    std::vector<float> fused(2 * n);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t i = 0; i < I; ++i) {
            fused[size_t(r * 2 * I + i)] = gate[size_t(r * I + i)];
            fused[size_t(r * 2 * I + I + i)] = upv[size_t(r * I + i)];
        }
    auto dF = up_bf16(fused);
    auto dfused = new_bf16(2 * n);
    out->poison();
    cu::swiglu_forward(out->p, dF->p, dF->p + I, N, I, 2 * I);
    record("swiglu fwd fused", shape, "out", down(*out), out_ref, kTolBf16);
    cu::swiglu_backward(dfused->p, dfused->p + I, dO->p, dF->p, dF->p + I, N, I, 2 * I, 2 * I);
    std::vector<float> dref(2 * n);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t i = 0; i < I; ++i) {
            dref[size_t(r * 2 * I + i)] = dg_ref[size_t(r * I + i)];
            dref[size_t(r * 2 * I + I + i)] = du_ref[size_t(r * I + i)];
        }
    record("swiglu bwd fused", shape, "dgate|dup", down(*dfused), dref, kTolBf16);
}

// ---- short conv -------------------------------------------------------------------------------------------

void short_conv_case(int64_t B, int64_t T, int64_t D, int64_t W, bool with_prev, int64_t pad, Rng& rng) {
    const std::string shape = S("B", B) + S(" T", T) + S(" D", D) + S(" W", W) + (with_prev ? " prev" : " noprev") +
                              (pad ? " strided" : "");
    const int64_t P = W - 1, xs = D + pad;
    auto x = bf16_values(static_cast<size_t>(B * T * D), rng);
    auto w = f32_values(static_cast<size_t>(D * W), rng, 0.5f);
    auto prev = f32_values(static_cast<size_t>(B * P * D), rng);
    auto dout = bf16_values(static_cast<size_t>(B * T * D), rng);
    auto dprev_out = f32_values(static_cast<size_t>(B * P * D), rng);
    auto dw0 = f32_values(static_cast<size_t>(D * W), rng, 0.1f);
    std::vector<float> out_ref(x.size()), pout_ref(prev.size()), dx_ref(x.size()), dprev_ref(prev.size()),
        dw_ref = dw0;
    for (int64_t b = 0; b < B; ++b) {
        const float* pv = with_prev ? prev.data() + b * P * D : nullptr;
        const float* xb = x.data() + b * T * D;
        cpu::short_conv_forward<float>(out_ref.data() + b * T * D, xb, w.data(), pv, T, D, W);
        cpu::short_conv_next_prev<float>(pout_ref.data() + b * P * D, pv, xb, T, D, W);
        cpu::short_conv_backward<float>(dx_ref.data() + b * T * D, dw_ref.data(), dprev_ref.data() + b * P * D,
                                        dout.data() + b * T * D, xb, w.data(), pv, T, D, W);
        cpu::short_conv_next_prev_backward<float>(dx_ref.data() + b * T * D, dprev_ref.data() + b * P * D,
                                                  dprev_out.data() + b * P * D, T, D, W);
    }
    std::vector<float> xpad(static_cast<size_t>(B * T * xs), 0.f);
    for (int64_t r = 0; r < B * T; ++r)
        for (int64_t d = 0; d < D; ++d) xpad[size_t(r * xs + d)] = x[size_t(r * D + d)];

    auto dX = up_bf16(xpad), dO = up_bf16(dout);
    auto dW = up_f32(w), dP = up_f32(prev), dPO = up_f32(dprev_out);
    auto out = new_bf16(x.size());
    auto pout = new_f32(prev.size());
    const float* pv = with_prev ? dP->p : nullptr;
    cu::short_conv_forward(out->p, pout->p, dX->p, xs, dW->p, pv, B, T, D, W);
    record("short_conv fwd", shape, "out", down(*out), out_ref, kTolBf16);
    if (P > 0) record("short_conv fwd", shape, "prev_out", down(*pout), pout_ref, kTolF32);
    if (P > 0 && with_prev) {  // window update in place (prev_out aliases prev)
        auto inplace = up_f32(prev);
        out->poison();
        cu::short_conv_forward(out->p, inplace->p, dX->p, xs, dW->p, inplace->p, B, T, D, W);
        record("short_conv fwd inplace", shape, "prev_out", down(*inplace), pout_ref, kTolF32);
        record("short_conv fwd inplace", shape, "out", down(*out), out_ref, kTolBf16);
    }
    auto dx = new_bf16(static_cast<size_t>(B * T * xs));
    auto dprev = new_f32(prev.size());
    auto ddw = up_f32(dw0);
    cu::short_conv_backward(dx->p, xs, ddw->p, dprev->p, dO->p, dPO->p, dX->p, xs, dW->p, pv, B, T, D, W);
    std::vector<float> dxg = down(*dx), dxc(x.size());
    for (int64_t r = 0; r < B * T; ++r)
        for (int64_t d = 0; d < D; ++d) dxc[size_t(r * D + d)] = dxg[size_t(r * xs + d)];
    record("short_conv bwd", shape, "dx", dxc, dx_ref, kTolBf16);
    record("short_conv bwd", shape, "dw+=", minus(down(*ddw), dw0), minus(dw_ref, dw0), kTolF32);
    if (P > 0) record("short_conv bwd", shape, "dprev", down(*dprev), dprev_ref, kTolF32);
}

// ---- GDN gates --------------------------------------------------------------------------------------------

void gates_case(int64_t N, int64_t HV, bool neg, Rng& rng) {
    const std::string shape = S("N", N) + S(" HV", HV) + (neg ? " neg" : "");
    const int64_t st = 2 * HV + 5;  // a and b inside one fused projection row
    const size_t n = size_t(N * HV);
    auto a = bf16_values(n, rng, 3.f), b = bf16_values(n, rng, 2.f);
    for (size_t i = 0; i < n; i += 11) a[i] = round_bf16(24.f + rng.normal());  // above the softplus shortcut
    auto A_log = f32_values(static_cast<size_t>(HV), rng, 0.5f), dt_bias = f32_values(static_cast<size_t>(HV), rng, 0.5f);
    auto dg = f32_values(n, rng), dbeta = f32_values(n, rng);
    auto dA0 = f32_values(static_cast<size_t>(HV), rng, 0.1f), ddt0 = f32_values(static_cast<size_t>(HV), rng, 0.1f);
    std::vector<float> g_ref(n), beta_ref(n), da_ref(n), db_ref(n), dA_ref = dA0, ddt_ref = ddt0;
    cpu::gdn_gate_forward<float>(g_ref.data(), a.data(), A_log.data(), dt_bias.data(), N, HV);
    cpu::gdn_beta_forward<float>(beta_ref.data(), b.data(), int64_t(n), neg);
    cpu::gdn_gate_backward<float>(da_ref.data(), dA_ref.data(), ddt_ref.data(), dg.data(), a.data(), A_log.data(),
                                  dt_bias.data(), N, HV);
    cpu::gdn_beta_backward<float>(db_ref.data(), dbeta.data(), b.data(), int64_t(n), neg);

    std::vector<float> ab(static_cast<size_t>(N * st), 0.f);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t h = 0; h < HV; ++h) {
            ab[size_t(r * st + h)] = a[size_t(r * HV + h)];
            ab[size_t(r * st + HV + h)] = b[size_t(r * HV + h)];
        }
    auto dAB = up_bf16(ab);
    auto dAl = up_f32(A_log), dDt = up_f32(dt_bias), dDg = up_f32(dg), dDb = up_f32(dbeta);
    auto g = new_f32(n), beta = new_f32(n);
    cu::gdn_gates_forward(g->p, beta->p, dAB->p, dAB->p + HV, st, dAl->p, dDt->p, N, HV, neg);
    record("gdn_gates fwd", shape, "g", down(*g), g_ref, kTolF32);
    record("gdn_gates fwd", shape, "beta", down(*beta), beta_ref, kTolF32);
    auto dab = new_bf16(static_cast<size_t>(N * st));
    auto dA = up_f32(dA0), ddt = up_f32(ddt0);
    cu::gdn_gates_backward(dab->p, dab->p + HV, st, dA->p, ddt->p, dDg->p, dDb->p, dAB->p, dAB->p + HV, st, dAl->p,
                           dDt->p, N, HV, neg);
    std::vector<float> dabg = down(*dab), da(n), db(n);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t h = 0; h < HV; ++h) {
            da[size_t(r * HV + h)] = dabg[size_t(r * st + h)];
            db[size_t(r * HV + h)] = dabg[size_t(r * st + HV + h)];
        }
    record("gdn_gates bwd", shape, "da", da, da_ref, kTolBf16);
    record("gdn_gates bwd", shape, "db", db, db_ref, kTolBf16);
    record("gdn_gates bwd", shape, "dA_log+=", minus(down(*dA), dA0), minus(dA_ref, dA0), kTolF32);
    record("gdn_gates bwd", shape, "ddt_b+=", minus(down(*ddt), ddt0), minus(ddt_ref, ddt0), kTolF32);
}

// ---- gated RMSNorm ----------------------------------------------------------------------------------------

void gated_case(int64_t N, int64_t HV, int64_t D, int64_t zpad, Rng& rng) {
    const std::string shape = S("N", N) + S(" HV", HV) + S(" D", D) + (zpad ? " z strided" : "");
    const float eps = 1e-5f;
    const int64_t row = HV * D, zs = row + zpad;
    const size_t n = size_t(N * row);
    auto o = bf16_values(n, rng, 0.7f), z = bf16_values(n, rng, 2.f), dout = bf16_values(n, rng);
    auto w = f32_values(static_cast<size_t>(row), rng, 0.2f, 1.f), dw0 = f32_values(static_cast<size_t>(row), rng, 0.1f);
    std::vector<float> out_ref(n), rstd_ref(static_cast<size_t>(N * HV)), do_ref(n), dz_ref(n), dw_ref = dw0;
    cpu::gated_rmsnorm_forward<float>(out_ref.data(), rstd_ref.data(), o.data(), z.data(), w.data(), N, HV, D, eps);
    cpu::gated_rmsnorm_backward<float>(do_ref.data(), dz_ref.data(), dw_ref.data(), dout.data(), o.data(), z.data(),
                                       w.data(), rstd_ref.data(), N, HV, D);
    std::vector<float> zbuf(static_cast<size_t>(N * zs), 0.f);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t k = 0; k < row; ++k) zbuf[size_t(r * zs + k)] = z[size_t(r * row + k)];

    auto dO = up_bf16(o), dZ = up_bf16(zbuf), dDo = up_bf16(dout);
    auto dW = up_f32(w);
    auto out = new_bf16(n);
    auto rstd = new_f32(static_cast<size_t>(N * HV));
    cu::gated_rmsnorm_forward(out->p, rstd->p, dO->p, dZ->p, zs, dW->p, N, HV, D, eps);
    record("gated_rmsnorm fwd", shape, "out", down(*out), out_ref, kTolBf16);
    record("gated_rmsnorm fwd", shape, "rstd", down(*rstd), rstd_ref, kTolF32);
    auto d_o = new_bf16(n), dz = new_bf16(static_cast<size_t>(N * zs));
    auto ddw = up_f32(dw0);
    cu::gated_rmsnorm_backward(d_o->p, dz->p, zs, ddw->p, dDo->p, dO->p, dZ->p, zs, dW->p, rstd->p, N, HV, D);
    std::vector<float> dzg = down(*dz), dzc(n);
    for (int64_t r = 0; r < N; ++r)
        for (int64_t k = 0; k < row; ++k) dzc[size_t(r * row + k)] = dzg[size_t(r * zs + k)];
    record("gated_rmsnorm bwd", shape, "d_o", down(*d_o), do_ref, kTolBf16);
    record("gated_rmsnorm bwd", shape, "dz", dzc, dz_ref, kTolBf16);
    record("gated_rmsnorm bwd", shape, "dw+=", minus(down(*ddw), dw0), minus(dw_ref, dw0), kTolF32);
}

// ---- fusion -----------------------------------------------------------------------------------------------

void fusion_case(hydra::FusionKind kind, int64_t N, int64_t n_fa, int64_t n_la, int64_t Dh, bool inplace, Rng& rng) {
    static const char* const names[] = {"scale-norm", "none", "hymba", "la-only"};  // FusionKind order
    const std::string shape = std::string(names[int(kind)]) + S(" N", N) + S(" fa", n_fa) + S(" la", n_la) +
                              S(" Dh", Dh) + (inplace ? " inpl" : "");
    const float eps = 1e-6f;
    const int64_t H = n_fa + n_la;
    const size_t n = size_t(N * H * Dh);
    auto heads = bf16_values(n, rng, 0.8f), dout = bf16_values(n, rng);
    // one vector per parameter slot; only those the kind uses are read
    auto hs = f32_values(static_cast<size_t>(H * Dh), rng, 0.2f, 1.f), fa = f32_values(static_cast<size_t>(std::max<int64_t>(1, n_fa * Dh)), rng, 0.2f, 1.f),
         la = f32_values(static_cast<size_t>(std::max<int64_t>(1, n_la * Dh)), rng, 0.2f, 1.f);
    auto ghs0 = f32_values(hs.size(), rng, 0.1f), gfa0 = f32_values(fa.size(), rng, 0.1f),
         gla0 = f32_values(la.size(), rng, 0.1f);
    std::vector<float> out_ref(n), din_ref(n), ghs = ghs0, gfa = gfa0, gla = gla0;
    hydra::FusionParams<float> P{hs.data(), fa.data(), la.data()};
    hydra::FusionGrads<float> G{ghs.data(), gfa.data(), gla.data()};
    hydra::fusion_forward<float>(out_ref.data(), heads.data(), N, n_fa, n_la, Dh, kind, P, eps);
    hydra::fusion_backward<float>(din_ref.data(), G, dout.data(), heads.data(), N, n_fa, n_la, Dh, kind, P, eps);

    auto dH = up_bf16(heads), dDo = up_bf16(dout);
    auto dhs = up_f32(hs), dfa = up_f32(fa), dla = up_f32(la);
    auto g_hs = up_f32(ghs0), g_fa = up_f32(gfa0), g_la = up_f32(gla0);
    const cu::FusionScales cs{dhs->p, dfa->p, dla->p};
    const cu::FusionScaleGrads cg{g_hs->p, g_fa->p, g_la->p};
    DB out;
    if (inplace) {
        out = up_bf16(heads);
        cu::fusion_forward(out->p, out->p, N, n_fa, n_la, Dh, kind, cs, eps);
    } else {
        out = new_bf16(n);
        cu::fusion_forward(out->p, dH->p, N, n_fa, n_la, Dh, kind, cs, eps);
    }
    record("fusion fwd", shape, "out", down(*out), out_ref, kTolBf16);
    DB din;
    if (inplace) {
        din = up_bf16(dout);
        cu::fusion_backward(din->p, cg, din->p, dH->p, N, n_fa, n_la, Dh, kind, cs, eps);
    } else {
        din = new_bf16(n);
        cu::fusion_backward(din->p, cg, dDo->p, dH->p, N, n_fa, n_la, Dh, kind, cs, eps);
    }
    record("fusion bwd", shape, "dheads", down(*din), din_ref, kTolBf16);
    const bool act = hydra::fusion_active(kind, n_la);
    if (act && kind != hydra::FusionKind::Hymba) {
        const size_t used = size_t((kind == hydra::FusionKind::LaOnly ? n_la : H) * Dh);
        auto got = minus(down(*g_hs), ghs0), ref = minus(ghs, ghs0);
        got.resize(used);
        ref.resize(used);
        record("fusion bwd", shape, "dscale+=", got, ref, kTolF32);
    }
    if (act && kind == hydra::FusionKind::Hymba) {
        if (n_fa > 0) record("fusion bwd", shape, "dfa+=", minus(down(*g_fa), gfa0), minus(gfa, gfa0), kTolF32);
        record("fusion bwd", shape, "dla+=", minus(down(*g_la), gla0), minus(gla, gla0), kTolF32);
    }
}

// ---- element-wise helpers ---------------------------------------------------------------------------------

void elementwise_case(int64_t N, int64_t F, Rng& rng) {
    const std::string shape = S("N", N) + S(" F", F);
    const size_t n = size_t(N * F);
    auto xf = f32_values(n, rng, 3.f);
    {
        auto d = up_f32(xf);
        auto o = new_bf16(n);
        cu::cast_f32_to_bf16(o->p, d->p, int64_t(n));
        record("cast f32->bf16", shape, "y", down(*o), round_all(xf), kTolBf16);
        auto back = new_f32(n);
        cu::cast_bf16_to_f32(back->p, o->p, int64_t(n));
        record("cast bf16->f32", shape, "y", down(*back), round_all(xf), kTolF32);
    }
    {
        auto xb = bf16_values(n, rng), y0 = f32_values(n, rng);
        std::vector<float> ref(n), ref2(n);
        for (size_t i = 0; i < n; ++i) {
            ref[i] = y0[i] + 0.5f * xb[i];
            ref2[i] = ref[i] + xf[i];
        }
        auto y = up_f32(y0), dxf = up_f32(xf);
        auto dxb = up_bf16(xb);
        cu::add_to_f32(y->p, dxb->p, int64_t(n), 0.5f);
        record("add_to_f32 bf16", shape, "y+=", down(*y), ref, kTolF32);
        cu::add_to_f32(y->p, dxf->p, int64_t(n));
        record("add_to_f32 f32", shape, "y+=", down(*y), ref2, kTolF32);
    }
    {  // bias on a strided (N, F) view, and its backward
        const int64_t st = F + 24;
        auto y0 = bf16_values(static_cast<size_t>(N * st), rng);
        auto bias = f32_values(static_cast<size_t>(F), rng);
        auto db0 = f32_values(static_cast<size_t>(F), rng, 0.1f);
        std::vector<float> ref = y0, dbias_ref(static_cast<size_t>(F), 0.f);
        for (int64_t r = 0; r < N; ++r)
            for (int64_t f = 0; f < F; ++f) ref[size_t(r * st + f)] += bias[size_t(f)];
        for (int64_t f = 0; f < F; ++f) {
            double s = 0;
            for (int64_t r = 0; r < N; ++r) s += y0[size_t(r * st + f)];
            dbias_ref[size_t(f)] = float(s);
        }
        auto y = up_bf16(y0);
        auto b = up_f32(bias), db = up_f32(db0);
        cu::bias_backward(db->p, y->p, N, F, st);  // column sums of y0 (before the add)
        record("bias bwd", shape, "dbias+=", minus(down(*db), db0), dbias_ref, kTolF32);
        cu::bias_add(y->p, b->p, N, F, st);
        record("bias add", shape, "y", down(*y), ref, kTolBf16);
    }
    {  // head gather / scatter
        const int64_t H = 9, D = 64;
        const std::vector<int32_t> sel = {7, 0, 4, 8};
        const int64_t ns = int64_t(sel.size());
        auto src = bf16_values(static_cast<size_t>(N * H * D), rng), dst0 = bf16_values(static_cast<size_t>(N * H * D), rng);
        std::vector<float> g_ref(static_cast<size_t>(N * ns * D)), s_ref = dst0, a_ref = dst0;
        for (int64_t r = 0; r < N; ++r)
            for (int64_t j = 0; j < ns; ++j)
                for (int64_t d = 0; d < D; ++d) {
                    const float v = src[size_t((r * H + sel[size_t(j)]) * D + d)];
                    g_ref[size_t((r * ns + j) * D + d)] = v;
                }
        for (int64_t r = 0; r < N; ++r)
            for (int64_t j = 0; j < ns; ++j)
                for (int64_t d = 0; d < D; ++d) {
                    const size_t o = size_t((r * H + sel[size_t(j)]) * D + d);
                    s_ref[o] = g_ref[size_t((r * ns + j) * D + d)];
                    a_ref[o] = dst0[o] + g_ref[size_t((r * ns + j) * D + d)];
                }
        const std::string sh = S("N", N) + S(" H", H) + S(" sel", ns) + S(" D", D);
        auto dsrc = up_bf16(src);
        auto dsel = up_i32(sel);
        auto gath = new_bf16(g_ref.size());
        cu::gather_heads(gath->p, dsrc->p, dsel->p, N, H, ns, D);
        record("gather_heads", sh, "dst", down(*gath), g_ref, kTolBf16);
        auto sc = up_bf16(dst0);
        cu::scatter_heads(sc->p, gath->p, dsel->p, N, H, ns, D, false);
        record("scatter_heads", sh, "dst", down(*sc), s_ref, kTolBf16);
        auto ac = up_bf16(dst0);
        cu::scatter_heads(ac->p, gath->p, dsel->p, N, H, ns, D, true);
        record("scatter_heads accum", sh, "dst+=", down(*ac), a_ref, kTolBf16);
    }
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    for (int i = 1; i < argc; ++i)
        if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    std::printf("cuda_op_parity_layers: seed %llu, tolerance %.0e bf16 outputs / %.0e fp32 outputs (relative RMS vs "
                "the CPU float reference)\n",
                (unsigned long long)seed, kTolBf16, kTolF32);
    Rng rng(seed);
    using FK = hydra::FusionKind;
    try {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        std::printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
        embedding_case(77, 1000, 576, rng);
        rmsnorm_case(77, 576, rng);
        rmsnorm_case(4099, 960, rng);  // several rows per reduction part
        rmsnorm_case(20000, 576, rng);  // 5 rows per part (vector path, 5 float4 groups per lane)
        rmsnorm_case(45, 64, rng);      // vector path, half the lanes idle
        rmsnorm_case(130, 130, rng);    // C % 4 != 0: scalar path
        rmsnorm_case(33, 1100, rng);    // C > 1024: scalar path
        rope_case(2, 130, 9, 64, 64, 0, rng);
        rope_case(3, 37, 5, 128, 64, 1000, rng);  // partial rotary, offset positions
        rope_case(2, 33, 3, 64, 18, 5, rng);      // odd half (9 pairs): one pair per thread
        rope_case(2, 41, 4, 64, 24, 3, rng);      // 12 pairs: 4 per thread (8 per thread when half % 8 == 0)
        rope_case(1, 29, 3, 64, 20, 7, rng);      // 10 pairs: 2 per thread
        rope_case(1, 5, 40, 64, 62, 0, rng);      // 40 x 31 pairs per row > 1024 threads: the flat kernel
        swiglu_case(77, 1536, rng);  // 16-byte path
        swiglu_case(33, 100, rng);   // element path (rows not a multiple of 8)
        short_conv_case(2, 130, 576, 4, false, 0, rng);
        short_conv_case(3, 130, 320, 4, true, 96, rng);
        short_conv_case(2, 2, 200, 4, true, 0, rng);   // segment shorter than the window
        short_conv_case(4, 1, 256, 4, true, 0, rng);   // decode step
        short_conv_case(1, 77, 128, 3, true, 0, rng);
        short_conv_case(1, 20, 64, 1, false, 0, rng);  // no window
        gates_case(260, 9, false, rng);
        gates_case(77, 16, true, rng);
        gated_case(130, 9, 64, 0, rng);
        gated_case(77, 6, 128, 200, rng);
        gated_case(3000, 4, 64, 0, rng);  // several rows per reduction part
        for (FK k : {FK::ScaleNorm, FK::None, FK::Hymba, FK::LaOnly}) fusion_case(k, 77, 3, 6, 64, false, rng);
        fusion_case(FK::ScaleNorm, 77, 3, 6, 64, true, rng);
        fusion_case(FK::Hymba, 130, 0, 9, 64, true, rng);  // pure LA layer
        fusion_case(FK::LaOnly, 77, 9, 0, 64, false, rng);  // pure FA layer: copy
        fusion_case(FK::Hymba, 2500, 2, 7, 128, false, rng);      // 896-wide segment: element path
        fusion_case(FK::Hymba, 300, 2, 6, 64, false, rng);        // pair path, 8 pairs per lane
        fusion_case(FK::ScaleNorm, 5000, 1, 8, 128, false, rng);  // pair path, 2 pairs, several rows per part
        fusion_case(FK::LaOnly, 77, 2, 5, 64, true, rng);
        elementwise_case(77, 576, rng);
    } catch (const std::exception& e) {
        std::printf("ERROR: %s\n", e.what());
        return 2;
    }
    int fails = 0;
    std::printf("\n%-24s %-30s %-9s %12s %7s  %s\n", "op", "shape", "output", "rel_rms", "tol", "result");
    for (const auto& r : g_rows) {
        std::printf("%-24s %-30s %-9s %12.3e %7.0e  %s\n", r.op.c_str(), r.shape.c_str(), r.out.c_str(), r.err, r.tol,
                    r.nan ? "FAIL (NaN/unwritten)" : (r.pass ? "pass" : "FAIL"));
        fails += r.pass ? 0 : 1;
    }
    std::printf("%d passed, %d failed\n", int(g_rows.size()) - fails, fails);
    return fails ? 1 : 0;
}
