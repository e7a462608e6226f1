// Gradient checks for the CPU backward passes (rmsnorm, rope, attention, swiglu, embedding, linear):
// fourth-order central finite differences in double of L = sum(out * R) for a fixed random R, every
// input and parameter element compared with the analytic gradient; plus accumulate/overwrite semantics
// and float-vs-double agreement.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "core/error.h"
#include "finite_differences.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

namespace hydra {
namespace {

using test::check_fd;
using test::randn;
using test::to_float;
using test::Vec;
constexpr double kRelTol = test::kFdRelTol;

const double kGarbage = std::numeric_limits<double>::quiet_NaN();  // prefill for overwritten outputs

// Max |a - b| over max |b|: agreement of a float computation with its double reference.
double rel_diff(const std::vector<float>& a, const Vec& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        num = std::max(num, std::fabs(double(a[i]) - b[i]));
        den = std::max(den, std::fabs(b[i]));
    }
    return num / std::max(den, 1e-30);
}

// ---- rmsnorm --------------------------------------------------------------------------------------

TEST(GradRmsnorm, FiniteDifferences) {
    const int64_t N = 7, C = 13;
    const double eps = 1e-5;
    Vec x = randn(N * C, 1), w = randn(C, 2), R = randn(N * C, 3);
    for (auto& v : w) v += 1.0;
    Vec out(N * C), rstd(N);
    auto fwd = [&] {
        cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
        return out;
    };
    fwd();
    Vec dx(N * C, kGarbage), dw(C, 0.0);
    cpu::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
    check_fd("rmsnorm dx", x, dx, fwd, R);
    check_fd("rmsnorm dw", w, dw, fwd, R);

    // dw accumulates: a second call doubles it; dx is overwritten (same values despite garbage).
    Vec dx2(N * C, 1e30), dw2 = dw;
    cpu::rmsnorm_backward(dx2.data(), dw2.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
    for (int64_t c = 0; c < C; ++c) EXPECT_NEAR(dw2[c], 2 * dw[c], 1e-12 * (1 + std::fabs(dw[c])));
    for (int64_t i = 0; i < N * C; ++i) EXPECT_EQ(dx2[i], dx[i]);
    // dw may be null (frozen weight) and dx may alias dy.
    Vec dy_alias = R;
    cpu::rmsnorm_backward(dy_alias.data(), (double*)nullptr, dy_alias.data(), x.data(), w.data(), rstd.data(),
                          N, C);
    for (int64_t i = 0; i < N * C; ++i) EXPECT_EQ(dy_alias[i], dx[i]);
}

TEST(GradRmsnorm, FloatMatchesDoubleOnLargeRows) {
    // Enough rows and columns to run the parallel paths (several dw column blocks, OpenMP on).
    const int64_t N = 301, C = 200;
    Vec x = randn(N * C, 4), w = randn(C, 5), R = randn(N * C, 6);
    Vec out(N * C), rstd(N), dx(N * C), dw(C, 0.0);
    cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6);
    cpu::rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
    // Independent reference for dw: plain serial sum.
    for (int64_t c = 0; c < C; ++c) {
        double ref = 0;
        for (int64_t n = 0; n < N; ++n) ref += R[n * C + c] * x[n * C + c] * rstd[n];
        EXPECT_NEAR(dw[c], ref, 1e-10 * (1 + std::fabs(ref)));
    }
    auto xf = to_float(x), wf = to_float(w), Rf = to_float(R);
    std::vector<float> outf(N * C), rstdf(N), dxf(N * C), dwf(C, 0.0f);
    cpu::rmsnorm_forward(outf.data(), rstdf.data(), xf.data(), wf.data(), N, C, 1e-6);
    cpu::rmsnorm_backward(dxf.data(), dwf.data(), Rf.data(), xf.data(), wf.data(), rstdf.data(), N, C);
    EXPECT_LT(rel_diff(dxf, dx), 1e-5);
    EXPECT_LT(rel_diff(dwf, dw), 1e-5);
}

// ---- rope -----------------------------------------------------------------------------------------

void check_rope(int64_t Dh, int64_t rope_dim, int64_t pos0) {
    const int64_t T = 5, H = 3;
    const double theta = 10000.0;
    Vec x = randn(T * H * Dh, 7), R = randn(T * H * Dh, 8), out;
    auto fwd = [&] {
        out = x;
        cpu::rope_forward(out.data(), T, H, Dh, rope_dim, pos0, theta);
        return out;
    };
    Vec dx = R;
    cpu::rope_backward(dx.data(), T, H, Dh, rope_dim, pos0, theta);
    check_fd(("rope dx Dh=" + std::to_string(Dh) + " R=" + std::to_string(rope_dim)).c_str(), x, dx, fwd, R);
    // Backward undoes forward (orthogonal rotation).
    Vec y = x;
    cpu::rope_forward(y.data(), T, H, Dh, rope_dim, pos0, theta);
    cpu::rope_backward(y.data(), T, H, Dh, rope_dim, pos0, theta);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 1e-12);
}

TEST(GradRope, FullRotaryDims) {
    check_rope(4, 4, 3);
}
TEST(GradRope, PartialRotaryDims) {
    check_rope(10, 6, 11);
}

// ---- attention ------------------------------------------------------------------------------------

struct AttnCase {
    int64_t T, H, Hkv, Dh;
};

void check_attention(const AttnCase& c, uint32_t seed) {
    const int64_t T = c.T, H = c.H, Hkv = c.Hkv, Dh = c.Dh;
    const double scale = 1.0 / std::sqrt(double(Dh));
    Vec q = randn(T * H * Dh, seed), k = randn(T * Hkv * Dh, seed + 1), v = randn(T * Hkv * Dh, seed + 2);
    Vec R = randn(T * H * Dh, seed + 3);
    Vec out(T * H * Dh), probs(T * H * T);
    auto fwd = [&] {
        cpu::causal_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), T, 0, H, Hkv,
                                      Dh, scale);
        return out;
    };
    fwd();
    const std::string tag =
        "T=" + std::to_string(T) + " H=" + std::to_string(H) + " Hkv=" + std::to_string(Hkv);
    Vec dq(q.size(), kGarbage), dk(k.size(), kGarbage), dv(v.size(), kGarbage);
    cpu::causal_attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(),
                                   probs.data(), T, H, Hkv, Dh, scale);
    // Recompute path: the same gradients without the saved probabilities.
    Vec dq2(q.size(), kGarbage), dk2(k.size(), kGarbage), dv2(v.size(), kGarbage);
    cpu::causal_attention_backward(dq2.data(), dk2.data(), dv2.data(), R.data(), q.data(), k.data(), v.data(),
                                   (const double*)nullptr, T, H, Hkv, Dh, scale);
    std::printf("  attention %s\n", tag.c_str());
    check_fd("attn dq (saved probs)", q, dq, fwd, R);
    check_fd("attn dk (saved probs)", k, dk, fwd, R);
    check_fd("attn dv (saved probs)", v, dv, fwd, R);
    check_fd("attn dq (recompute)", q, dq2, fwd, R);
    check_fd("attn dk (recompute)", k, dk2, fwd, R);
    check_fd("attn dv (recompute)", v, dv2, fwd, R);

    // Float agrees with double (both paths).
    auto qf = to_float(q), kf = to_float(k), vf = to_float(v), Rf = to_float(R);
    std::vector<float> outf(out.size()), probsf(probs.size());
    cpu::causal_attention_forward(outf.data(), probsf.data(), qf.data(), kf.data(), vf.data(), T, 0, H, Hkv,
                                  Dh, scale);
    for (const float* pf : {(const float*)probsf.data(), (const float*)nullptr}) {
        std::vector<float> dqf(q.size(), NAN), dkf(k.size(), NAN), dvf(v.size(), NAN);
        cpu::causal_attention_backward(dqf.data(), dkf.data(), dvf.data(), Rf.data(), qf.data(), kf.data(),
                                       vf.data(), pf, T, H, Hkv, Dh, scale);
        const double e = std::max({rel_diff(dqf, dq), rel_diff(dkf, dk), rel_diff(dvf, dv)});
        std::printf("  attn float vs double (%s): %.2e\n", pf ? "saved probs" : "recompute", e);
        EXPECT_LT(e, 1e-5);
    }
}

TEST(GradAttention, SmallGqa) {
    check_attention({5, 6, 2, 4}, 20);
}
TEST(GradAttention, MultiQueryAndMultiHead) {
    check_attention({6, 4, 1, 3}, 30);
    check_attention({4, 3, 3, 5}, 40);
}
// Longer sequences; 70 rows span two 64-row query blocks (the second one partial).
TEST(GradAttention, SeveralKeyBlocks) {
    check_attention({37, 6, 2, 5}, 50);
    check_attention({35, 4, 2, 3}, 150);
    check_attention({70, 2, 1, 3}, 160);
}

// ---- swiglu ---------------------------------------------------------------------------------------

TEST(GradSwiglu, FiniteDifferences) {
    const int64_t N = 91;
    Vec gate = randn(N, 60, 2.0), up = randn(N, 61), R = randn(N, 62), out(N);
    auto fwd = [&] {
        cpu::swiglu_forward(out.data(), gate.data(), up.data(), N);
        return out;
    };
    Vec dgate(N, kGarbage), dup(N, kGarbage);
    cpu::swiglu_backward(dgate.data(), dup.data(), R.data(), gate.data(), up.data(), N);
    check_fd("swiglu dgate", gate, dgate, fwd, R);
    check_fd("swiglu dup", up, dup, fwd, R);
    // In place over the inputs gives the same result.
    Vec g2 = gate, u2 = up;
    cpu::swiglu_backward(g2.data(), u2.data(), R.data(), g2.data(), u2.data(), N);
    for (int64_t i = 0; i < N; ++i) {
        EXPECT_EQ(g2[i], dgate[i]);
        EXPECT_EQ(u2[i], dup[i]);
    }
}

// float runs on the vectorised exp_approx: close to the double (libm) computation, extreme gates
// saturate cleanly, and the result does not depend on how the threads split the elements.
TEST(GradSwiglu, FloatMatchesDoubleAndThreadCountDoesNotMatter) {
    const int64_t N = 200003;  // parallel, with a vector tail
    Vec gate = randn(N, 70, 4.0), up = randn(N, 71), R = randn(N, 72);
    gate[0] = 200, gate[1] = -200, gate[2] = 1e30, gate[3] = -1e30, gate[4] = 0;
    Vec out(N), dgate(N), dup(N);
    cpu::swiglu_forward(out.data(), gate.data(), up.data(), N);
    cpu::swiglu_backward(dgate.data(), dup.data(), R.data(), gate.data(), up.data(), N);
    auto gf = to_float(gate), uf = to_float(up), Rf = to_float(R);
    auto run = [&](int threads) {
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        std::vector<float> o(N), dg(N), du(N);
        cpu::swiglu_forward(o.data(), gf.data(), uf.data(), N);
        cpu::swiglu_backward(dg.data(), du.data(), Rf.data(), gf.data(), uf.data(), N);
        omp_set_num_threads(saved);
        return std::vector<std::vector<float>>{o, dg, du};
    };
    const auto one = run(1), two = run(2);
    EXPECT_EQ(one, two);
    const Vec* refs[] = {&out, &dgate, &dup};
    for (int j = 0; j < 3; ++j) {
        for (int64_t i = 0; i < 5; ++i) EXPECT_TRUE(std::isfinite(one[size_t(j)][size_t(i)])) << j << " " << i;
        // The rest against double with libm exp, relative to the largest value.
        const std::vector<float> got(one[size_t(j)].begin() + 5, one[size_t(j)].end());
        const Vec ref(refs[j]->begin() + 5, refs[j]->end());
        EXPECT_LT(rel_diff(got, ref), 1e-6) << "output " << j;
    }
}

// ---- embedding ------------------------------------------------------------------------------------

TEST(GradEmbedding, ForwardBackwardAndRepeatedTokens) {
    const int64_t V = 11, C = 13, T = 9;
    const std::vector<int32_t> tokens = {3, 0, 10, 3, 7, 3, 0, 5, 10};
    Vec table = randn(V * C, 70), R = randn(T * C, 71), out(T * C, kGarbage);
    cpu::embedding_forward(out.data(), tokens.data(), table.data(), T, V, C);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) EXPECT_EQ(out[t * C + c], table[tokens[t] * C + c]);
    auto fwd = [&] {
        cpu::embedding_forward(out.data(), tokens.data(), table.data(), T, V, C);
        return out;
    };
    Vec dtable(V * C, 0.0);
    cpu::embedding_backward(dtable.data(), R.data(), tokens.data(), T, V, C);
    check_fd("embedding dtable", table, dtable, fwd, R);
    // Independent count-based reference: row 3 appears three times.
    for (int64_t c = 0; c < C; ++c)
        EXPECT_NEAR(dtable[3 * C + c], R[0 * C + c] + R[3 * C + c] + R[5 * C + c], 1e-15);
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(dtable[1 * C + c], 0.0);  // unused row
    Vec d2 = dtable;
    cpu::embedding_backward(d2.data(), R.data(), tokens.data(), T, V, C);
    for (int64_t i = 0; i < V * C; ++i) EXPECT_NEAR(d2[i], 2 * dtable[i], 1e-14);
}

TEST(GradEmbedding, RejectsOutOfRangeTokens) {
    const int64_t V = 4, C = 2;
    Vec table(V * C, 1.0), out(3 * C), dtable(V * C, 0.0), dout(3 * C, 1.0);
    for (int32_t bad : {-1, 4, 1 << 30}) {
        const std::vector<int32_t> tokens = {0, bad, 1};
        EXPECT_THROW(cpu::embedding_forward(out.data(), tokens.data(), table.data(), 3, V, C), Error);
        EXPECT_THROW(cpu::embedding_backward(dtable.data(), dout.data(), tokens.data(), 3, V, C), Error);
    }
    for (double d : dtable) EXPECT_EQ(d, 0.0);  // nothing written before the check failed
    // The overload without V (caller checked the upper bound) still rejects negative ids and agrees
    // with the checked one on valid ids.
    const std::vector<int32_t> neg = {0, -3, 1}, ok = {2, 0, 2};
    EXPECT_THROW(cpu::embedding_forward(out.data(), neg.data(), table.data(), 3, C), Error);
    EXPECT_THROW(cpu::embedding_backward(dtable.data(), dout.data(), neg.data(), 3, C), Error);
    cpu::embedding_backward(dtable.data(), dout.data(), ok.data(), 3, C);
    EXPECT_EQ(dtable[2 * C], 2.0);
    EXPECT_EQ(dtable[0], 1.0);
    EXPECT_EQ(dtable[1 * C], 0.0);
}

// ---- linear ---------------------------------------------------------------------------------------

TEST(GradLinear, FiniteDifferences) {
    const int64_t N = 7, K = 13, M = 5;
    Vec x = randn(N * K, 80), W = randn(M * K, 81), b = randn(M, 82), R = randn(N * M, 83), out(N * M);
    auto fwd = [&] {
        cpu::linear_forward(out.data(), x.data(), W.data(), b.data(), N, K, M);
        return out;
    };
    // Forward against a naive triple loop.
    fwd();
    for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
            double ref = b[m];
            for (int64_t kk = 0; kk < K; ++kk) ref += x[n * K + kk] * W[m * K + kk];
            EXPECT_NEAR(out[n * M + m], ref, 1e-12);
        }
    Vec dx(N * K, kGarbage), dW(M * K, 0.0), db(M, 0.0);
    cpu::linear_backward(dx.data(), dW.data(), db.data(), R.data(), x.data(), W.data(), N, K, M);
    check_fd("linear dx", x, dx, fwd, R);
    check_fd("linear dW", W, dW, fwd, R);
    check_fd("linear dbias", b, db, fwd, R);

    // dW/dbias accumulate, dx is overwritten.
    Vec dx2(N * K, 1e30), dW2 = dW, db2 = db;
    cpu::linear_backward(dx2.data(), dW2.data(), db2.data(), R.data(), x.data(), W.data(), N, K, M);
    for (size_t i = 0; i < dW.size(); ++i) EXPECT_NEAR(dW2[i], 2 * dW[i], 1e-12 * (1 + std::fabs(dW[i])));
    for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db2[i], 2 * db[i], 1e-12 * (1 + std::fabs(db[i])));
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx2[i], dx[i], 1e-12 * (1 + std::fabs(dx[i])));

    // Without bias and without dx (optional outputs).
    Vec out_nb(N * M, kGarbage), dW3(M * K, 0.0);
    cpu::linear_forward(out_nb.data(), x.data(), W.data(), (const double*)nullptr, N, K, M);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) EXPECT_NEAR(out_nb[n * M + m], out[n * M + m] - b[m], 1e-12);
    cpu::linear_backward((double*)nullptr, dW3.data(), (double*)nullptr, R.data(), x.data(), W.data(), N, K,
                         M);
    for (size_t i = 0; i < dW.size(); ++i) EXPECT_NEAR(dW3[i], dW[i], 1e-12 * (1 + std::fabs(dW[i])));
}

TEST(GradLinear, FloatMatchesDouble) {
    const int64_t N = 33, K = 70, M = 45;
    Vec x = randn(N * K, 90), W = randn(M * K, 91), b = randn(M, 92), R = randn(N * M, 93), out(N * M);
    Vec dx(N * K), dW(M * K, 0.0), db(M, 0.0);
    cpu::linear_forward(out.data(), x.data(), W.data(), b.data(), N, K, M);
    cpu::linear_backward(dx.data(), dW.data(), db.data(), R.data(), x.data(), W.data(), N, K, M);
    auto xf = to_float(x), Wf = to_float(W), bf = to_float(b), Rf = to_float(R);
    std::vector<float> outf(N * M), dxf(N * K), dWf(M * K, 0.0f), dbf(M, 0.0f);
    cpu::linear_forward(outf.data(), xf.data(), Wf.data(), bf.data(), N, K, M);
    cpu::linear_backward(dxf.data(), dWf.data(), dbf.data(), Rf.data(), xf.data(), Wf.data(), N, K, M);
    EXPECT_LT(rel_diff(outf, out), 1e-5);
    EXPECT_LT(rel_diff(dxf, dx), 1e-5);
    EXPECT_LT(rel_diff(dWf, dW), 1e-5);
    EXPECT_LT(rel_diff(dbf, db), 1e-5);
}

}  // namespace
}  // namespace hydra
