// Tests of the Gated DeltaNet CPU ops and head group (research/gdn.md §1-§3):
//  - the recurrent and chunked forms against a plain float64 loop of the §2.1 recurrence written here,
//    over sequence lengths around the chunk size, head dims, gate and beta extremes, GVA, states;
//  - finite-difference gradient checks in double of every op and of GdnBlock, and chunked == BPTT;
//  - prefill in pieces and token-by-token decode against one-shot prefill;
//  - a golden file from an independent PyTorch float64 implementation (tools/make_gdn_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "finite_differences.h"
#include "io/safetensors.h"
#include "model/gdn_block.h"
#include "ops/cpu/gated_rmsnorm.h"
#include "ops/cpu/gdn_gates.h"
#include "ops/cpu/gdn_recurrence.h"
#include "ops/cpu/l2norm.h"
#include "ops/cpu/short_conv.h"

namespace hydra {
namespace {

using test::check_fd;
using test::randn;
using test::SingleThread;
using test::to_float;
using test::Vec;
constexpr double kRelTol = test::kFdRelTol;
using FVec = std::vector<float>;
using cpu::GdnDims;

const double kGarbage = std::numeric_limits<double>::quiet_NaN();

Vec uniform(size_t n, uint32_t seed, double lo, double hi) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    Vec v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

// Rows of length C scaled to unit norm (the recurrence's inputs are L2-normalised q, k).
Vec unit_rows(Vec x, int64_t C) {
    for (size_t r = 0; r < x.size() / size_t(C); ++r) {
        double ss = 0;
        for (int64_t c = 0; c < C; ++c) ss += x[r * C + c] * x[r * C + c];
        for (int64_t c = 0; c < C; ++c) x[r * C + c] /= std::sqrt(ss);
    }
    return x;
}

// ||a - b||_2 / ||b||_2 (fla's metric, gdn.md §2.3).
template <typename A>
double rel_rms(const std::vector<A>& a, const Vec& b) {
    EXPECT_EQ(a.size(), b.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        const double dd = double(a[i]) - b[i];
        num += dd * dd;
        den += b[i] * b[i];
    }
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

// ---- the reference: §2.1 written out in float64 with S = (K x V) per value head -------------------

// Returns o (T, HV, V); final state in the (HV, V, K) layout into state_out.
Vec reference_gdn(Vec& state_out, const Vec& q, const Vec& k, const Vec& v, const Vec& g, const Vec& beta,
                  const Vec* state_in, const GdnDims& d, double scale) {
    const int64_t r = d.HV / d.H;
    Vec o(size_t(d.T * d.HV * d.V));
    state_out.assign(size_t(d.HV * d.V * d.K), 0.0);
    for (int64_t j = 0; j < d.HV; ++j) {
        const int64_t h = j / r;
        std::vector<std::vector<double>> S(size_t(d.K), std::vector<double>(size_t(d.V), 0.0));
        if (state_in)
            for (int64_t c = 0; c < d.K; ++c)
                for (int64_t i = 0; i < d.V; ++i) S[c][i] = (*state_in)[size_t((j * d.V + i) * d.K + c)];
        for (int64_t t = 0; t < d.T; ++t) {
            const double* qt = &q[size_t((t * d.H + h) * d.K)];
            const double* kt = &k[size_t((t * d.H + h) * d.K)];
            const double* vt = &v[size_t((t * d.HV + j) * d.V)];
            const double alpha = std::exp(g[size_t(t * d.HV + j)]), b = beta[size_t(t * d.HV + j)];
            for (auto& row : S)
                for (auto& x : row) x *= alpha;
            for (int64_t i = 0; i < d.V; ++i) {
                double e = 0;
                for (int64_t c = 0; c < d.K; ++c) e += S[c][i] * kt[c];
                const double delta = b * (vt[i] - e);
                for (int64_t c = 0; c < d.K; ++c) S[c][i] += kt[c] * delta;
            }
            for (int64_t i = 0; i < d.V; ++i) {
                double acc = 0;
                for (int64_t c = 0; c < d.K; ++c) acc += S[c][i] * scale * qt[c];
                o[size_t((t * d.HV + j) * d.V + i)] = acc;
            }
        }
        for (int64_t c = 0; c < d.K; ++c)
            for (int64_t i = 0; i < d.V; ++i) state_out[size_t((j * d.V + i) * d.K + c)] = S[c][i];
    }
    return o;
}

enum class Gates { Typical, Strong, Zero };
enum class Betas { Uniform, NearZero, NearOne, NearTwo };

struct CoreCase {
    GdnDims d;
    Gates gates = Gates::Typical;
    Betas betas = Betas::Uniform;
    bool with_state = true;
    int64_t chunk = 64;
};

std::string describe(const CoreCase& c) {
    static const char* gn[] = {"typical", "strong", "zero"};
    static const char* bn[] = {"uniform", "near0", "near1", "near2"};
    char buf[200];
    std::snprintf(buf, sizeof buf, "T=%ld H=%ld HV=%ld K=%ld V=%ld g=%s beta=%s state=%d C=%ld", long(c.d.T),
                  long(c.d.H), long(c.d.HV), long(c.d.K), long(c.d.V), gn[int(c.gates)], bn[int(c.betas)],
                  int(c.with_state), long(c.chunk));
    return buf;
}

struct CoreInputs {
    Vec q, k, v, g, beta, state;
};

CoreInputs make_inputs(const CoreCase& c, uint32_t seed) {
    const GdnDims& d = c.d;
    CoreInputs in;
    in.q = unit_rows(randn(size_t(d.T * d.H * d.K), seed), d.K);
    in.k = unit_rows(randn(size_t(d.T * d.H * d.K), seed + 1), d.K);
    in.v = randn(size_t(d.T * d.HV * d.V), seed + 2);
    const size_t n = size_t(d.T * d.HV);
    switch (c.gates) {
        case Gates::Typical: in.g = uniform(n, seed + 3, -1.0, -0.001); break;
        case Gates::Strong: in.g = uniform(n, seed + 3, -20.0, -0.5); break;
        case Gates::Zero: in.g.assign(n, 0.0); break;
    }
    switch (c.betas) {
        case Betas::Uniform: in.beta = uniform(n, seed + 4, 0.0, 1.0); break;
        case Betas::NearZero: in.beta = uniform(n, seed + 4, 1e-6, 1e-3); break;
        case Betas::NearOne: in.beta = uniform(n, seed + 4, 0.999, 1.0); break;
        case Betas::NearTwo: in.beta = uniform(n, seed + 4, 1.999, 2.0); break;
    }
    if (c.with_state) in.state = randn(size_t(d.HV * d.V * d.K), seed + 5, 0.5);
    return in;
}

// Runs one case through the four implementations (recurrent/chunked x float/double) and returns the
// worst relative RMS error of the float ones (o and final state) against the float64 loop.
double check_core_forward(const CoreCase& c, uint32_t seed) {
    const GdnDims& d = c.d;
    const double scale = 1.0 / std::sqrt(double(d.K));
    const CoreInputs in = make_inputs(c, seed);
    const Vec* st = c.with_state ? &in.state : nullptr;
    Vec ref_state;
    const Vec ref_o = reference_gdn(ref_state, in.q, in.k, in.v, in.g, in.beta, st, d, scale);

    const size_t no = ref_o.size(), ns = ref_state.size();
    double worst = 0;
    {
        Vec o(no, kGarbage), s(ns, kGarbage), o2(no, kGarbage), s2(ns, kGarbage);
        cpu::gdn_recurrent_forward(o.data(), s.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                   in.beta.data(), st ? st->data() : nullptr, d, scale);
        cpu::gdn_chunked_forward(o2.data(), s2.data(), (double*)nullptr, in.q.data(), in.k.data(), in.v.data(),
                                 in.g.data(), in.beta.data(), st ? st->data() : nullptr, d, scale, c.chunk);
        EXPECT_LT(rel_rms(o, ref_o), 1e-12) << describe(c) << " double recurrent o";
        EXPECT_LT(rel_rms(s, ref_state), 1e-12) << describe(c) << " double recurrent state";
        EXPECT_LT(rel_rms(o2, ref_o), 1e-11) << describe(c) << " double chunked o";
        EXPECT_LT(rel_rms(s2, ref_state), 1e-11) << describe(c) << " double chunked state";
    }
    {
        const FVec q = to_float(in.q), k = to_float(in.k), v = to_float(in.v), g = to_float(in.g),
                   b = to_float(in.beta), s0 = to_float(in.state);
        FVec o(no, NAN), s(ns, NAN), o2(no, NAN), s2(ns, NAN);
        cpu::gdn_recurrent_forward(o.data(), s.data(), q.data(), k.data(), v.data(), g.data(), b.data(),
                                   st ? s0.data() : nullptr, d, scale);
        cpu::gdn_chunked_forward(o2.data(), s2.data(), (float*)nullptr, q.data(), k.data(), v.data(), g.data(),
                                 b.data(), st ? s0.data() : nullptr, d, scale, c.chunk);
        const double e[4] = {rel_rms(o, ref_o), rel_rms(s, ref_state), rel_rms(o2, ref_o), rel_rms(s2, ref_state)};
        EXPECT_LT(e[0], 1e-5) << describe(c) << " float recurrent o";
        EXPECT_LT(e[1], 1e-5) << describe(c) << " float recurrent state";
        EXPECT_LT(e[2], 1e-5) << describe(c) << " float chunked o";
        EXPECT_LT(e[3], 1e-5) << describe(c) << " float chunked state";
        worst = *std::max_element(e, e + 4);
    }
    return worst;
}

TEST(GdnCore, ForwardMatchesFloat64Loop) {
    std::vector<CoreCase> cases;
    const int64_t Ts[] = {1, 63, 64, 65, 130};
    const std::pair<int64_t, int64_t> KVs[] = {{16, 16}, {60, 60}, {64, 64}, {16, 60}, {60, 16}};
    const Gates gs[] = {Gates::Typical, Gates::Strong, Gates::Zero};
    const Betas bs[] = {Betas::Uniform, Betas::NearZero, Betas::NearOne};
    int i = 0;
    for (int64_t T : Ts)
        for (auto [K, V] : KVs) {
            CoreCase c;
            c.d = {T, 1, 2, K, V};
            c.gates = gs[i % 3];
            c.betas = bs[(i / 3) % 3];
            c.with_state = (i % 2) == 0;
            cases.push_back(c);
            ++i;
        }
    // Every gate/beta extreme at a partial last chunk, with and without a state.
    for (Gates g : gs)
        for (Betas b : bs)
            for (bool st : {false, true}) {
                CoreCase c;
                c.d = {130, 1, 1, 16, 16};
                c.gates = g, c.betas = b, c.with_state = st;
                cases.push_back(c);
            }
    // Negative eigenvalues (beta near 2, allow_neg_eigval).
    for (Gates g : gs) {
        CoreCase c;
        c.d = {130, 1, 2, 32, 32};
        c.gates = g, c.betas = Betas::NearTwo;
        cases.push_back(c);
    }
    // GVA (HV = 2H and 4H) and other chunk sizes.
    {
        CoreCase c;
        c.d = {97, 2, 4, 16, 24};
        cases.push_back(c);
        c.d = {100, 1, 4, 24, 16}, c.chunk = 16, c.gates = Gates::Strong;
        cases.push_back(c);
        c.d = {77, 2, 4, 16, 16}, c.chunk = 32, c.gates = Gates::Zero, c.betas = Betas::NearOne;
        cases.push_back(c);
    }
    double worst = 0;
    uint32_t seed = 100;
    for (const CoreCase& c : cases) worst = std::max(worst, check_core_forward(c, seed += 10));
    std::printf("  %zu cases, worst float relative RMS error %.2e\n", cases.size(), worst);
}

// Worst case for the UT transform: every key (nearly) the same, so A is full below the diagonal,
// with beta near 2 (eigenvalue 1 - beta near -1) and no decay. The inverse's entries stay bounded
// (|1 - beta| < 1) but alternate in sign with size ~beta, so W = T X and delta = U - W M0^T sum
// cancelling float terms the recurrence never forms: the float chunked form measured 8e-6 (o) and
// 1.1e-5 (state) here against 1.3e-6 and 1.8e-6 for the float recurrence (forming K K^T, A and T in
// double only brought it to 6.7e-6 / 8e-6, so it is not worth the cost). The bound documents that
// gap; random keys stay below 1e-6 (ForwardMatchesFloat64Loop).
TEST(GdnCore, RepeatedKeysNearTwo) {
    const GdnDims d{130, 1, 2, 16, 16};
    const double scale = 0.25;
    CoreCase c;
    c.d = d, c.gates = Gates::Zero, c.betas = Betas::NearTwo;
    CoreInputs in = make_inputs(c, 900);
    const Vec noise = randn(in.k.size(), 901, 1e-3);
    for (int64_t t = 0; t < d.T; ++t)
        for (int64_t x = 0; x < d.K; ++x) in.k[size_t(t * d.K + x)] = in.k[size_t(x)] + noise[size_t(t * d.K + x)];
    in.k = unit_rows(in.k, d.K);
    Vec ref_state;
    const Vec ref_o = reference_gdn(ref_state, in.q, in.k, in.v, in.g, in.beta, &in.state, d, scale);
    const FVec q = to_float(in.q), k = to_float(in.k), v = to_float(in.v), g = to_float(in.g), b = to_float(in.beta),
               s0 = to_float(in.state);
    FVec o(ref_o.size()), s(ref_state.size());
    cpu::gdn_chunked_forward(o.data(), s.data(), (float*)nullptr, q.data(), k.data(), v.data(), g.data(), b.data(),
                             s0.data(), d, scale, 64);
    FVec ro(ref_o.size()), rs(ref_state.size());
    cpu::gdn_recurrent_forward(ro.data(), rs.data(), q.data(), k.data(), v.data(), g.data(), b.data(), s0.data(), d,
                               scale);
    const double eo = rel_rms(o, ref_o), es = rel_rms(s, ref_state);
    const double ro_e = rel_rms(ro, ref_o), rs_e = rel_rms(rs, ref_state);
    EXPECT_LT(eo, 4e-5);
    EXPECT_LT(es, 4e-5);
    EXPECT_LT(ro_e, 1e-5);
    EXPECT_LT(rs_e, 1e-5);
    std::printf("  repeated keys, beta ~ 2: float chunked o %.2e, state %.2e; recurrent o %.2e, state %.2e\n", eo,
                es, ro_e, rs_e);
}

TEST(GdnCore, LongSequence4096) {
    CoreCase c;
    c.d = {4096, 1, 2, 16, 16};
    const double e = check_core_forward(c, 7);
    std::printf("  T=4096: worst float relative RMS error %.2e\n", e);
}


// ---- gradient checks of the elementwise / row-wise ops ---------------------------------------------

void check_short_conv(int64_t T, int64_t D, int64_t W, bool with_prev, uint32_t seed) {
    Vec x = randn(size_t(T * D), seed), w = randn(size_t(D * W), seed + 1, 0.5);
    Vec prev = with_prev ? randn(size_t((W - 1) * D), seed + 2) : Vec();
    const size_t nprev = size_t((W - 1) * D);
    const Vec R = randn(size_t(T * D) + nprev, seed + 3);
    auto fwd = [&] {
        Vec out(size_t(T * D) + nprev, kGarbage);
        const double* p = with_prev ? prev.data() : nullptr;
        cpu::short_conv_forward(out.data(), x.data(), w.data(), p, T, D, W);
        cpu::short_conv_next_prev(out.data() + T * D, p, x.data(), T, D, W);
        return out;
    };
    fwd();
    Vec dx(x.size(), kGarbage), dw(w.size(), 0.0), dprev(nprev, kGarbage);
    cpu::short_conv_backward(dx.data(), dw.data(), with_prev ? dprev.data() : nullptr, R.data(), x.data(), w.data(),
                             with_prev ? prev.data() : nullptr, T, D, W);
    cpu::short_conv_next_prev_backward(dx.data(), with_prev ? dprev.data() : nullptr, R.data() + T * D, T, D, W);
    const std::string tag = " T=" + std::to_string(T) + (with_prev ? " prev" : "");
    check_fd("short_conv dx" + tag, x, dx, fwd, R);
    check_fd("short_conv dw" + tag, w, dw, fwd, R);
    if (with_prev) check_fd("short_conv dprev" + tag, prev, dprev, fwd, R);
}

TEST(GdnGrad, ShortConv) {
    check_short_conv(9, 5, 4, true, 10);
    check_short_conv(9, 70, 4, false, 20);  // two channel blocks
    check_short_conv(2, 3, 4, true, 30);    // segment shorter than the window
    check_short_conv(5, 3, 1, false, 40);   // W = 1: no window
}

TEST(GdnGrad, ShortConvPiecesEqualWhole) {
    // The window carried by short_conv_next_prev makes pieces (including ones shorter than W-1, and
    // in-place window updates) identical to one pass.
    const int64_t D = 6, W = 4, T = 13;
    const Vec x = randn(size_t(T * D), 50), w = randn(size_t(D * W), 51);
    Vec whole(size_t(T * D));
    cpu::short_conv_forward(whole.data(), x.data(), w.data(), (const double*)nullptr, T, D, W);
    Vec prev(size_t((W - 1) * D), 0.0), out(size_t(T * D));
    int64_t t0 = 0;
    for (int64_t n : {1, 2, 5, 1, 4}) {
        cpu::short_conv_forward(out.data() + t0 * D, x.data() + t0 * D, w.data(), prev.data(), n, D, W);
        cpu::short_conv_next_prev(prev.data(), prev.data(), x.data() + t0 * D, n, D, W);
        t0 += n;
    }
    ASSERT_EQ(t0, T);
    for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(out[i], whole[i]) << i;
}

TEST(GdnGrad, L2Norm) {
    const int64_t N = 6, C = 7;
    Vec x = randn(size_t(N * C), 60), R = randn(size_t(N * C), 61);
    for (int64_t c = 0; c < C; ++c) x[size_t(5 * C + c)] *= 1e-3;  // a near-zero row: eps matters
    Vec y(x.size()), rstd(static_cast<size_t>(N));
    auto fwd = [&] {
        cpu::l2norm_forward(y.data(), rstd.data(), x.data(), N, C);
        return y;
    };
    fwd();
    Vec dx = R;  // in place: dx aliases dy
    cpu::l2norm_backward(dx.data(), dx.data(), y.data(), rstd.data(), N, C);
    // The near-zero row (|x| ~ 3e-3) needs a step well below its entries.
    check_fd("l2norm dx", x, dx, fwd, R, kRelTol, 1e-6);
    // eps inside the square root: |y| = sqrt(s / (s + 1e-6)).
    double s = 0, n2 = 0;
    for (int64_t c = 0; c < C; ++c) s += x[size_t(5 * C + c)] * x[size_t(5 * C + c)], n2 += y[5 * C + c] * y[5 * C + c];
    EXPECT_NEAR(std::sqrt(n2), std::sqrt(s / (s + 1e-6)), 1e-15);
}

TEST(GdnGrad, Gates) {
    const int64_t T = 7, HV = 3;
    Vec a = randn(size_t(T * HV), 70, 2.0), A_log = {std::log(0.5), std::log(4.0), std::log(15.0)};
    Vec dt_bias = {-3.0, 0.5, 1.0};
    a[4] = 25.0;  // above the softplus shortcut threshold
    Vec b = randn(size_t(T * HV), 71, 2.0);
    const Vec R = randn(size_t(T * HV), 72);
    Vec g(a.size());
    auto fwd = [&] {
        cpu::gdn_gate_forward(g.data(), a.data(), A_log.data(), dt_bias.data(), T, HV);
        return g;
    };
    fwd();
    for (double x : g) EXPECT_LE(x, 0.0);
    EXPECT_DOUBLE_EQ(g[4], -4.0 * 25.5);  // identity shortcut: softplus(25.5) = 25.5
    Vec da(a.size(), kGarbage), dA(size_t(HV), 0.0), ddt(size_t(HV), 0.0);
    cpu::gdn_gate_backward(da.data(), dA.data(), ddt.data(), R.data(), a.data(), A_log.data(), dt_bias.data(), T, HV);
    check_fd("gate da", a, da, fwd, R);
    check_fd("gate dA_log", A_log, dA, fwd, R);
    check_fd("gate ddt_bias", dt_bias, ddt, fwd, R);
    for (bool neg : {false, true}) {
        Vec beta(b.size());
        auto fb = [&] {
            cpu::gdn_beta_forward(beta.data(), b.data(), int64_t(b.size()), neg);
            return beta;
        };
        fb();
        for (double x : beta) EXPECT_TRUE(x > 0 && x < (neg ? 2.0 : 1.0));
        Vec db = R;
        cpu::gdn_beta_backward(db.data(), db.data(), b.data(), int64_t(b.size()), neg);
        check_fd(neg ? "beta db (allow_neg_eigval)" : "beta db", b, db, fb, R);
    }
}

TEST(GdnGrad, GatedRmsnorm) {
    const int64_t T = 4, HV = 2, V = 5;
    const double eps = 1e-6;
    Vec o = randn(size_t(T * HV * V), 80), z = randn(size_t(T * HV * V), 81, 2.0), w = randn(size_t(HV * V), 82);
    const Vec R = randn(o.size(), 83);
    Vec out(o.size()), rstd(static_cast<size_t>(T * HV));
    auto fwd = [&] {
        cpu::gated_rmsnorm_forward(out.data(), rstd.data(), o.data(), z.data(), w.data(), T, HV, V, eps);
        return out;
    };
    fwd();
    Vec d_o(o.size(), kGarbage), dz(z.size(), kGarbage), dw(w.size(), 0.0);
    cpu::gated_rmsnorm_backward(d_o.data(), dz.data(), dw.data(), R.data(), o.data(), z.data(), w.data(), rstd.data(),
                                T, HV, V);
    check_fd("gated_rmsnorm do", o, d_o, fwd, R);
    check_fd("gated_rmsnorm dz", z, dz, fwd, R);
    check_fd("gated_rmsnorm dw", w, dw, fwd, R);
}

// ---- gradients of the recurrence -------------------------------------------------------------------

struct CoreGrads {
    Vec dq, dk, dv, dg, dbeta, dstate;
};

template <typename F>
CoreGrads run_backward(F&& backward, const GdnDims& d, bool with_state) {
    CoreGrads gr;
    gr.dq.assign(size_t(d.T * d.H * d.K), kGarbage);
    gr.dk.assign(gr.dq.size(), kGarbage);
    gr.dv.assign(size_t(d.T * d.HV * d.V), kGarbage);
    gr.dg.assign(size_t(d.T * d.HV), kGarbage);
    gr.dbeta.assign(gr.dg.size(), kGarbage);
    if (with_state) gr.dstate.assign(size_t(d.HV * d.V * d.K), kGarbage);
    backward(gr);
    return gr;
}

TEST(GdnGrad, RecurrentBpttFiniteDifferences) {
    const GdnDims d{7, 1, 2, 3, 4};  // GVA: both value heads read key head 0
    const double scale = 1.0 / std::sqrt(3.0);
    CoreInputs in;
    in.q = randn(size_t(d.T * d.H * d.K), 90);
    in.k = unit_rows(randn(size_t(d.T * d.H * d.K), 91), d.K);
    in.v = randn(size_t(d.T * d.HV * d.V), 92);
    in.g = uniform(size_t(d.T * d.HV), 93, -1.5, -0.01);
    in.beta = uniform(size_t(d.T * d.HV), 94, 0.05, 1.9);
    in.state = randn(size_t(d.HV * d.V * d.K), 95);
    const size_t no = size_t(d.T * d.HV * d.V), ns = in.state.size();
    const Vec R = randn(no + ns, 96);
    const Vec dso(R.begin() + long(no), R.end());
    auto fwd = [&] {
        Vec out(no + ns);
        cpu::gdn_recurrent_forward(out.data(), out.data() + no, in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                                   in.beta.data(), in.state.data(), d, scale);
        return out;
    };
    const CoreGrads gr = run_backward(
        [&](CoreGrads& g) {
            cpu::gdn_recurrent_backward(g.dq.data(), g.dk.data(), g.dv.data(), g.dg.data(), g.dbeta.data(),
                                        g.dstate.data(), R.data(), dso.data(), in.q.data(), in.k.data(), in.v.data(),
                                        in.g.data(), in.beta.data(), in.state.data(), d, scale);
        },
        d, true);
    check_fd("bptt dq", in.q, gr.dq, fwd, R);
    check_fd("bptt dk", in.k, gr.dk, fwd, R);
    check_fd("bptt dv", in.v, gr.dv, fwd, R);
    check_fd("bptt dg", in.g, gr.dg, fwd, R);
    check_fd("bptt dbeta", in.beta, gr.dbeta, fwd, R);
    check_fd("bptt dstate_in", in.state, gr.dstate, fwd, R);
}

// Chunked backward against BPTT on the same inputs: double within 1e-10 relative RMS per gradient;
// returns the worst float chunked error against the double BPTT.
double check_chunked_backward(const CoreCase& c, uint32_t seed, bool saved_states) {
    const GdnDims& d = c.d;
    const double scale = 1.0 / std::sqrt(double(d.K));
    const CoreInputs in = make_inputs(c, seed);
    const double* st = c.with_state ? in.state.data() : nullptr;
    const size_t no = size_t(d.T * d.HV * d.V), ns = size_t(d.HV * d.V * d.K);
    const Vec dout = randn(no, seed + 7), dso = randn(ns, seed + 8);
    const CoreGrads ref = run_backward(
        [&](CoreGrads& g) {
            cpu::gdn_recurrent_backward(g.dq.data(), g.dk.data(), g.dv.data(), g.dg.data(), g.dbeta.data(),
                                        c.with_state ? g.dstate.data() : nullptr, dout.data(), dso.data(),
                                        in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), st, d,
                                        scale);
        },
        d, c.with_state);
    Vec states;
    if (saved_states) {
        Vec o(no), s(ns);
        states.assign(size_t(cpu::gdn_chunk_states_numel(d, c.chunk)), kGarbage);
        cpu::gdn_chunked_forward(o.data(), s.data(), states.data(), in.q.data(), in.k.data(), in.v.data(),
                                 in.g.data(), in.beta.data(), st, d, scale, c.chunk);
    }
    const CoreGrads ch = run_backward(
        [&](CoreGrads& g) {
            cpu::gdn_chunked_backward(g.dq.data(), g.dk.data(), g.dv.data(), g.dg.data(), g.dbeta.data(),
                                      c.with_state ? g.dstate.data() : nullptr, dout.data(), dso.data(), in.q.data(),
                                      in.k.data(), in.v.data(), in.g.data(), in.beta.data(), st,
                                      saved_states ? states.data() : nullptr, d, scale, c.chunk);
        },
        d, c.with_state);
    const std::string tag = describe(c) + (saved_states ? " saved" : " recomputed");
    const char* names[] = {"dq", "dk", "dv", "dg", "dbeta", "dstate_in"};
    const Vec* r[] = {&ref.dq, &ref.dk, &ref.dv, &ref.dg, &ref.dbeta, &ref.dstate};
    const Vec* x[] = {&ch.dq, &ch.dk, &ch.dv, &ch.dg, &ch.dbeta, &ch.dstate};
    for (int i = 0; i < 6; ++i) EXPECT_LT(rel_rms(*x[i], *r[i]), 1e-10) << tag << " " << names[i];

    // float chunked (forward-saved states) against the double BPTT
    const FVec q = to_float(in.q), k = to_float(in.k), v = to_float(in.v), g = to_float(in.g),
               b = to_float(in.beta), s0 = to_float(in.state), fdo = to_float(dout), fdso = to_float(dso);
    const float* fst = c.with_state ? s0.data() : nullptr;
    FVec o(no), s(ns), fstates(size_t(cpu::gdn_chunk_states_numel(d, c.chunk)));
    cpu::gdn_chunked_forward(o.data(), s.data(), fstates.data(), q.data(), k.data(), v.data(), g.data(), b.data(),
                             fst, d, scale, c.chunk);
    FVec fq(ref.dq.size()), fk(ref.dk.size()), fv(ref.dv.size()), fg(ref.dg.size()), fb(ref.dbeta.size()),
        fs(ref.dstate.size());
    cpu::gdn_chunked_backward(fq.data(), fk.data(), fv.data(), fg.data(), fb.data(), c.with_state ? fs.data() : nullptr,
                              fdo.data(), fdso.data(), q.data(), k.data(), v.data(), g.data(), b.data(), fst,
                              fstates.data(), d, scale, c.chunk);
    const FVec* fx[] = {&fq, &fk, &fv, &fg, &fb, &fs};
    double worst = 0;
    for (int i = 0; i < 6; ++i) {
        const double e = rel_rms(*fx[i], *r[i]);
        EXPECT_LT(e, 2e-5) << tag << " float " << names[i];
        worst = std::max(worst, e);
    }
    return worst;
}

TEST(GdnGrad, ChunkedBackwardMatchesBptt) {
    std::vector<CoreCase> cases;
    CoreCase c;
    c.d = {130, 2, 4, 16, 24};
    cases.push_back(c);
    c.d = {37, 1, 1, 8, 8}, c.chunk = 16, c.gates = Gates::Strong;
    cases.push_back(c);
    c.d = {64, 1, 2, 16, 16}, c.chunk = 64, c.gates = Gates::Zero, c.betas = Betas::NearOne;
    cases.push_back(c);
    c.d = {100, 1, 2, 16, 8}, c.chunk = 32, c.gates = Gates::Typical, c.betas = Betas::NearTwo, c.with_state = false;
    cases.push_back(c);
    c.d = {65, 1, 1, 60, 60}, c.chunk = 64, c.betas = Betas::NearZero, c.with_state = true;
    cases.push_back(c);
    c.d = {1, 2, 2, 16, 16}, c.betas = Betas::Uniform;
    cases.push_back(c);
    c.d = {150, 1, 2, 64, 64}, c.gates = Gates::Strong, c.betas = Betas::NearOne;
    cases.push_back(c);
    double worst = 0;
    uint32_t seed = 300;
    for (const CoreCase& cc : cases)
        for (bool saved : {true, false}) worst = std::max(worst, check_chunked_backward(cc, seed += 10, saved));
    std::printf("  %zu cases, worst float chunked gradient relative RMS error %.2e\n", cases.size(), worst);
}

TEST(GdnCore, ThreadCountDoesNotChangeResults) {
    CoreCase c;
    c.d = {200, 2, 4, 32, 32};
    const CoreInputs in = make_inputs(c, 400);
    const FVec q = to_float(in.q), k = to_float(in.k), v = to_float(in.v), g = to_float(in.g), b = to_float(in.beta);
    const GdnDims& d = c.d;
    const FVec dout = to_float(randn(size_t(d.T * d.HV * d.V), 401));
    auto run = [&] {
        FVec o(size_t(d.T * d.HV * d.V)), s(size_t(d.HV * d.V * d.K)), dq(q.size()), dk(k.size()), dv(v.size()),
            dg(g.size()), db(b.size());
        cpu::gdn_chunked_forward(o.data(), s.data(), (float*)nullptr, q.data(), k.data(), v.data(), g.data(), b.data(),
                                 (const float*)nullptr, d, 0.125, 64);
        cpu::gdn_chunked_backward(dq.data(), dk.data(), dv.data(), dg.data(), db.data(), (float*)nullptr, dout.data(),
                                  (const float*)nullptr, q.data(), k.data(), v.data(), g.data(), b.data(),
                                  (const float*)nullptr, (const float*)nullptr, d, 0.125, 64);
        FVec all = o;
        for (const FVec* x : {&s, &dq, &dk, &dv, &dg, &db}) all.insert(all.end(), x->begin(), x->end());
        return all;
    };
    const FVec many = run();
    FVec one;
    {
        SingleThread st;
        one = run();
    }
    ASSERT_EQ(one.size(), many.size());
    EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float)));
}


// ---- GdnBlock -------------------------------------------------------------------------------------

// One block's inputs, parameters and entering state, in T.
template <typename T>
struct BlockCase {
    GdnConfig cfg;
    int64_t Tn = 0;
    std::vector<T> q_raw, k_raw, v_raw, a_raw, b_raw, z;
    std::vector<T> conv_q, conv_k, conv_v, A_log, dt_bias, norm_w;
    GdnState<T> state;  // entering state (used when with_state)
    bool with_state = true;

    GdnParams<T> params() const {
        return {conv_q.data(), conv_k.data(), conv_v.data(), A_log.data(), dt_bias.data(), norm_w.data()};
    }
    GdnInputs<T> inputs(int64_t t0 = 0) const {
        const int64_t Dk = cfg.key_dim(), Dv = cfg.value_dim(), HV = cfg.HV;
        return {q_raw.data() + t0 * Dk, k_raw.data() + t0 * Dk, v_raw.data() + t0 * Dv,
                a_raw.data() + t0 * HV, b_raw.data() + t0 * HV, z.data() + t0 * Dv};
    }
    // The fields in a fixed order (inputs, params, state), for loops over all of them.
    std::vector<std::vector<T>*> fields() {
        return {&q_raw, &k_raw, &v_raw, &a_raw, &b_raw, &z, &conv_q, &conv_k, &conv_v, &A_log, &dt_bias, &norm_w,
                &state.conv_q, &state.conv_k, &state.conv_v, &state.ssm};
    }
};
const char* kFieldNames[] = {"in.q_raw",      "in.k_raw",      "in.v_raw",      "in.a_raw",
                             "in.b_raw",      "in.z",          "param.conv_q",  "param.conv_k",
                             "param.conv_v",  "param.A_log",   "param.dt_bias", "param.norm_w",
                             "state_in.conv_q", "state_in.conv_k", "state_in.conv_v", "state_in.ssm"};
const char* kStateNames[] = {"conv_q", "conv_k", "conv_v", "ssm"};

template <typename T, typename S>
BlockCase<T> convert(const BlockCase<S>& c) {
    BlockCase<T> out;
    out.cfg = c.cfg, out.Tn = c.Tn, out.with_state = c.with_state;
    auto cv = [](const std::vector<S>& x) { return std::vector<T>(x.begin(), x.end()); };
    out.q_raw = cv(c.q_raw), out.k_raw = cv(c.k_raw), out.v_raw = cv(c.v_raw), out.a_raw = cv(c.a_raw);
    out.b_raw = cv(c.b_raw), out.z = cv(c.z), out.conv_q = cv(c.conv_q), out.conv_k = cv(c.conv_k);
    out.conv_v = cv(c.conv_v), out.A_log = cv(c.A_log), out.dt_bias = cv(c.dt_bias), out.norm_w = cv(c.norm_w);
    out.state.conv_q = cv(c.state.conv_q), out.state.conv_k = cv(c.state.conv_k);
    out.state.conv_v = cv(c.state.conv_v), out.state.ssm = cv(c.state.ssm);
    return out;
}

BlockCase<double> random_block(const GdnConfig& cfg, int64_t Tn, uint32_t seed) {
    BlockCase<double> c;
    c.cfg = cfg, c.Tn = Tn;
    const int64_t Dk = cfg.key_dim(), Dv = cfg.value_dim(), HV = cfg.HV, W = cfg.conv_width;
    c.q_raw = randn(size_t(Tn * Dk), seed);
    c.k_raw = randn(size_t(Tn * Dk), seed + 1);
    c.v_raw = randn(size_t(Tn * Dv), seed + 2);
    c.a_raw = randn(size_t(Tn * HV), seed + 3);
    c.b_raw = randn(size_t(Tn * HV), seed + 4, 1.5);
    c.z = randn(size_t(Tn * Dv), seed + 5);
    c.conv_q = randn(size_t(Dk * W), seed + 6, 0.5);
    c.conv_k = randn(size_t(Dk * W), seed + 7, 0.5);
    c.conv_v = randn(size_t(Dv * W), seed + 8, 0.5);
    c.A_log = uniform(size_t(HV), seed + 9, std::log(0.5), std::log(8.0));
    c.dt_bias = uniform(size_t(HV), seed + 10, -2.0, 0.5);
    c.norm_w = uniform(size_t(HV * cfg.V), seed + 11, 0.5, 1.5);
    c.state.resize(cfg);
    c.state.conv_q = randn(c.state.conv_q.size(), seed + 12);
    c.state.conv_k = randn(c.state.conv_k.size(), seed + 13);
    c.state.conv_v = randn(c.state.conv_v.size(), seed + 14);
    c.state.ssm = randn(c.state.ssm.size(), seed + 15, 0.3);
    return c;
}

template <typename T>
struct BlockRun {
    std::vector<T> out;
    GdnState<T> state_out;
    GdnSaved<T> saved;
};

template <typename T>
BlockRun<T> run_block(BlockCase<T>& c) {
    BlockRun<T> r;
    r.out.assign(size_t(c.Tn * c.cfg.value_dim()), T(NAN));
    r.state_out.resize(c.cfg);
    GdnStateView<T> in = c.state.view(), out = r.state_out.view();
    gdn_block_forward(r.out.data(), c.cfg, c.params(), c.inputs(), c.Tn, c.with_state ? &in : nullptr, &out,
                      &r.saved);
    return r;
}

// Gradients of sum(out * R_out) + sum over the leaving state's parts of (part * R_part), in the order
// of BlockCase::fields(); parameter gradients start at zero.
template <typename T>
std::vector<std::vector<T>> block_grads(BlockCase<T>& c, const BlockRun<T>& run, const std::vector<T>& R_out,
                                        GdnState<T>& R_state) {
    BlockCase<T> g;  // same shapes as c
    g.cfg = c.cfg;
    std::vector<std::vector<T>*> src = c.fields();
    g.state.resize(c.cfg);
    std::vector<std::vector<T>*> dst = g.fields();
    for (size_t i = 0; i < src.size(); ++i)
        dst[i]->assign(src[i]->size(), i >= 6 && i < 12 ? T(0) : T(NAN));  // params accumulate
    GdnInputGrads<T> di{g.q_raw.data(), g.k_raw.data(), g.v_raw.data(), g.a_raw.data(), g.b_raw.data(), g.z.data()};
    GdnParamGrads<T> dp{g.conv_q.data(), g.conv_k.data(), g.conv_v.data(), g.A_log.data(), g.dt_bias.data(),
                        g.norm_w.data()};
    GdnStateView<T> dsi = g.state.view(), dso = R_state.view();
    gdn_block_backward(di, dp, &dsi, R_out.data(), &dso, c.cfg, c.params(), c.inputs(), c.Tn, run.saved);
    std::vector<std::vector<T>> out;
    for (auto* x : dst) out.push_back(*x);
    return out;
}

Vec flatten_run(const BlockRun<double>& r) {
    Vec all = r.out;
    for (const Vec* x : {&r.state_out.conv_q, &r.state_out.conv_k, &r.state_out.conv_v, &r.state_out.ssm})
        all.insert(all.end(), x->begin(), x->end());
    return all;
}

void check_block_fd(const GdnConfig& cfg, int64_t Tn, uint32_t seed, const std::string& tag) {
    BlockCase<double> c = random_block(cfg, Tn, seed);
    BlockRun<double> run = run_block(c);
    const Vec R = randn(flatten_run(run).size(), seed + 100);
    // Split R into d_out and the leaving-state weights.
    Vec R_out(R.begin(), R.begin() + long(run.out.size()));
    GdnState<double> R_state(cfg);
    size_t off = run.out.size();
    for (Vec* x : {&R_state.conv_q, &R_state.conv_k, &R_state.conv_v, &R_state.ssm}) {
        std::copy(R.begin() + long(off), R.begin() + long(off + x->size()), x->begin());
        off += x->size();
    }
    const std::vector<Vec> grads = block_grads(c, run, R_out, R_state);
    auto fwd = [&] { return flatten_run(run_block(c)); };
    std::vector<Vec*> fields = c.fields();
    // Half the usual step: a conv weight moves every token's q or k through SiLU, the L2 norm and the
    // recurrence, and at h = 1e-3 the O(h^4) truncation alone reached 3.6e-6 on a small element
    // (2.3e-7 at h = 5e-4, the expected factor 16).
    for (size_t i = 0; i < fields.size(); ++i)
        check_fd(tag + " " + kFieldNames[i], *fields[i], grads[i], fwd, R, kRelTol, 5e-4);
}

GdnConfig small_config(bool chunked, bool neg) {
    GdnConfig cfg;
    cfg.H = 1, cfg.HV = 2, cfg.K = 4, cfg.V = 3, cfg.conv_width = 4;
    cfg.use_chunked = chunked, cfg.chunk_size = 4, cfg.allow_neg_eigval = neg, cfg.norm_eps = 1e-5;
    return cfg;
}

TEST(GdnBlock, FiniteDifferencesChunked) { check_block_fd(small_config(true, false), 9, 500, "chunked"); }

TEST(GdnBlock, FiniteDifferencesRecurrentNegEigval) {
    check_block_fd(small_config(false, true), 9, 600, "recurrent neg");
}

GdnConfig mid_config(bool chunked) {
    GdnConfig cfg;
    cfg.H = 2, cfg.HV = 4, cfg.K = 16, cfg.V = 16, cfg.conv_width = 4, cfg.use_chunked = chunked;
    return cfg;
}

TEST(GdnBlock, ChunkedEqualsRecurrent) {
    BlockCase<double> c = random_block(mid_config(true), 150, 700);
    BlockCase<double> r = c;
    r.cfg.use_chunked = false;
    BlockRun<double> rc = run_block(c), rr = run_block(r);
    EXPECT_LT(rel_rms(flatten_run(rc), flatten_run(rr)), 1e-12);
    const Vec R_out = randn(rc.out.size(), 701);
    GdnState<double> R_state(c.cfg);
    R_state.ssm = randn(R_state.ssm.size(), 702);
    R_state.conv_v = randn(R_state.conv_v.size(), 703);
    const std::vector<Vec> gc = block_grads(c, rc, R_out, R_state), gr = block_grads(r, rr, R_out, R_state);
    for (size_t i = 0; i < gc.size(); ++i) EXPECT_LT(rel_rms(gc[i], gr[i]), 1e-10) << kFieldNames[i];
}

// Runs the block over consecutive pieces with the state carried in place; returns outputs and the
// final state flattened.
template <typename T>
std::vector<T> run_pieces(BlockCase<T>& c, const std::vector<int64_t>& pieces) {
    GdnState<T> st = c.state;
    if (!c.with_state) st = GdnState<T>(c.cfg);
    GdnStateView<T> view = st.view();
    std::vector<T> out(size_t(c.Tn * c.cfg.value_dim()));
    int64_t t0 = 0;
    for (int64_t n : pieces) {
        gdn_block_forward(out.data() + t0 * c.cfg.value_dim(), c.cfg, c.params(), c.inputs(t0), n, &view, &view,
                          (GdnSaved<T>*)nullptr);
        t0 += n;
    }
    EXPECT_EQ(t0, c.Tn);
    for (const std::vector<T>* x : {&st.conv_q, &st.conv_k, &st.conv_v, &st.ssm}) out.insert(out.end(), x->begin(), x->end());
    return out;
}

TEST(GdnBlock, PrefillInPiecesAndDecodeMatchOneShot) {
    for (bool with_state : {false, true}) {
        BlockCase<double> c = random_block(mid_config(true), 201, 800);
        c.with_state = with_state;
        const Vec whole = run_pieces(c, {201});
        const std::vector<int64_t> ones(201, 1);
        EXPECT_LT(rel_rms(run_pieces(c, {37, 64, 100}), whole), 1e-12) << "double pieces";
        EXPECT_LT(rel_rms(run_pieces(c, ones), whole), 1e-12) << "double decode";
        BlockCase<double> rec = c;
        rec.cfg.use_chunked = false;
        EXPECT_LT(rel_rms(run_pieces(rec, {37, 64, 100}), whole), 1e-12) << "double recurrent pieces";
        // float: pieces and token-by-token decode against the one-shot float prefill
        BlockCase<float> f = convert<float>(c);
        const FVec fwhole = run_pieces(f, {201});
        const Vec fwhole_d(fwhole.begin(), fwhole.end());
        const double e1 = rel_rms(run_pieces(f, {37, 64, 100}), fwhole_d);
        const double e2 = rel_rms(run_pieces(f, ones), fwhole_d);
        const double e3 = rel_rms(fwhole, whole);
        EXPECT_LT(e1, 1e-6) << "float pieces";
        EXPECT_LT(e2, 1e-6) << "float decode";
        EXPECT_LT(e3, 1e-5) << "float vs double";
        std::printf("  state=%d float: pieces %.2e, decode %.2e, vs double %.2e\n", int(with_state), e1, e2, e3);
    }
}

TEST(GdnBlock, StateBytes) {
    GdnConfig cfg;  // the LA heads of one SmolLM2-135M layer at 7:1
    cfg.H = 8, cfg.HV = 8, cfg.K = 64, cfg.V = 64;
    const GdnState<float> s(cfg);
    EXPECT_EQ(GdnState<float>::numel(cfg), 3 * (512 + 512 + 512) + 8 * 64 * 64);
    EXPECT_EQ(int64_t(s.bytes()), GdnState<float>::fp32_bytes(cfg));
    EXPECT_EQ(GdnState<float>::fp32_bytes(cfg), 149504);
    for (float x : s.ssm) ASSERT_EQ(x, 0.0f);
    GdnConfig bad = cfg;
    bad.HV = 12;
    EXPECT_THROW(bad.validate(), Error);
}

// ---- golden: tools/make_gdn_golden.py (independent PyTorch float64 implementation) -----------------

Vec read_f64(const SafetensorsFile& f, const std::string& name) {
    const SafetensorsTensorInfo& info = f.tensor(name);
    EXPECT_EQ(info.dtype, StDType::F64) << name;
    Vec out(size_t(info.numel));
    std::memcpy(out.data(), f.raw(info), out.size() * sizeof(double));
    return out;
}

TEST(GdnBlock, GoldenPyTorch) {
    const SafetensorsFile f = SafetensorsFile::open(HYDRA_SOURCE_DIR "/tests/data/gdn_golden.safetensors");
    for (const std::string prefix : {"a", "b"}) {
        const auto j = nlohmann::json::parse(f.metadata().at(prefix + ".config"));
        GdnConfig cfg;
        cfg.H = j["H"], cfg.HV = j["HV"], cfg.K = j["K"], cfg.V = j["V"], cfg.conv_width = j["W"];
        cfg.allow_neg_eigval = j["allow_neg_eigval"], cfg.norm_eps = j["norm_eps"];
        BlockCase<double> c;
        c.cfg = cfg, c.Tn = j["T"];
        c.state.resize(cfg);
        std::vector<Vec*> fields = c.fields();
        for (size_t i = 0; i < fields.size(); ++i) *fields[i] = read_f64(f, prefix + "." + kFieldNames[i]);
        Vec ref_run = read_f64(f, prefix + ".out");
        for (const char* s : kStateNames) {
            const Vec x = read_f64(f, prefix + ".state_out." + s);
            ref_run.insert(ref_run.end(), x.begin(), x.end());
        }
        const Vec R_out = read_f64(f, prefix + ".R.out");
        GdnState<double> R_state(cfg);
        R_state.conv_q = read_f64(f, prefix + ".R.state.conv_q");
        R_state.conv_k = read_f64(f, prefix + ".R.state.conv_k");
        R_state.conv_v = read_f64(f, prefix + ".R.state.conv_v");
        R_state.ssm = read_f64(f, prefix + ".R.state.ssm");

        for (bool chunked : {true, false}) {
            c.cfg.use_chunked = chunked;
            const std::string tag = prefix + (chunked ? " chunked" : " recurrent");
            BlockRun<double> run = run_block(c);
            EXPECT_LT(rel_rms(flatten_run(run), ref_run), 1e-10) << tag << " double outputs";
            const std::vector<Vec> grads = block_grads(c, run, R_out, R_state);
            for (size_t i = 0; i < grads.size(); ++i) {
                const Vec ref = read_f64(f, prefix + ".grad." + kFieldNames[i]);
                EXPECT_LT(rel_rms(grads[i], ref), 1e-10) << tag << " double grad " << kFieldNames[i];
            }
        }
        // The float training path (chunked), inputs are float32 values in the file.
        c.cfg.use_chunked = true;
        BlockCase<float> fc = convert<float>(c);
        BlockRun<float> frun = run_block(fc);
        FVec fall = frun.out;
        for (const FVec* x : {&frun.state_out.conv_q, &frun.state_out.conv_k, &frun.state_out.conv_v,
                              &frun.state_out.ssm})
            fall.insert(fall.end(), x->begin(), x->end());
        double worst = rel_rms(fall, ref_run);
        EXPECT_LT(worst, 1e-5) << prefix << " float outputs";
        GdnState<float> fR_state = convert<float>(c).state;  // shapes; values below
        fR_state.conv_q = FVec(R_state.conv_q.begin(), R_state.conv_q.end());
        fR_state.conv_k = FVec(R_state.conv_k.begin(), R_state.conv_k.end());
        fR_state.conv_v = FVec(R_state.conv_v.begin(), R_state.conv_v.end());
        fR_state.ssm = FVec(R_state.ssm.begin(), R_state.ssm.end());
        const std::vector<FVec> fgrads = block_grads(fc, frun, to_float(R_out), fR_state);
        for (size_t i = 0; i < fgrads.size(); ++i) {
            const double e = rel_rms(fgrads[i], read_f64(f, prefix + ".grad." + kFieldNames[i]));
            EXPECT_LT(e, 1e-5) << prefix << " float grad " << kFieldNames[i];
            worst = std::max(worst, e);
        }
        std::printf("  golden %s: float chunked worst relative RMS error %.2e\n", prefix.c_str(), worst);
    }
}

}  // namespace
}  // namespace hydra
