// Causal attention with an explicit query-head -> KV-head map (kv_head_of): groups of unequal size, KV
// heads shared by several query heads or read by none. Checked against a double-precision naive loop
// (forward, with pos0 > 0), against per-head gathered K/V run as plain multi-head attention (forward and
// backward, several query blocks, saved and recomputed probabilities), by fourth-order finite
// differences, float against double, and for bit-identical results across thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <omp.h>

#include "ops/cpu/attention.h"

namespace hydra {
namespace {

using Vec = std::vector<double>;

Vec randn(size_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> dist;
    Vec v(n);
    for (auto& x : v) x = dist(gen);
    return v;
}

// Naive causal attention in double: out (T, H, Dh), probs (T, H, S).
void naive_forward(Vec& out, Vec& probs, const Vec& q, const Vec& k, const Vec& v, int64_t T, int64_t pos0,
                   int64_t H, int64_t Hkv, int64_t Dh, double scale, const std::vector<int32_t>& map) {
    const int64_t S = pos0 + T;
    out.assign(size_t(T * H * Dh), 0.0);
    probs.assign(size_t(T * H * S), 0.0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
            const int64_t g = map[size_t(h)];
            const int64_t n = pos0 + t + 1;
            std::vector<double> w(static_cast<size_t>(n));
            double mx = -INFINITY, z = 0;
            for (int64_t s = 0; s < n; ++s) {
                double d = 0;
                for (int64_t i = 0; i < Dh; ++i)
                    d += q[size_t((t * H + h) * Dh + i)] * k[size_t((s * Hkv + g) * Dh + i)];
                w[size_t(s)] = d * scale;
                mx = std::max(mx, w[size_t(s)]);
            }
            for (auto& x : w) z += (x = std::exp(x - mx));
            for (int64_t s = 0; s < n; ++s) {
                const double p = w[size_t(s)] / z;
                probs[size_t((t * H + h) * S + s)] = p;
                for (int64_t i = 0; i < Dh; ++i)
                    out[size_t((t * H + h) * Dh + i)] += p * v[size_t((s * Hkv + g) * Dh + i)];
            }
        }
}

// x (T, Hkv, Dh) -> (T, H, Dh) with head h holding KV head map[h].
template <typename V>
V gather(const V& x, int64_t T, int64_t H, int64_t Hkv, int64_t Dh, const std::vector<int32_t>& map) {
    V out(size_t(T * H * Dh));
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
            std::copy_n(x.begin() + (t * Hkv + map[size_t(h)]) * Dh, Dh, out.begin() + (t * H + h) * Dh);
    return out;
}

// Adjoint of gather: (T, H, Dh) -> (T, Hkv, Dh), summing the heads mapped to each KV head in head order.
template <typename V>
V scatter_add(const V& x, int64_t T, int64_t H, int64_t Hkv, int64_t Dh, const std::vector<int32_t>& map) {
    V out(size_t(T * Hkv * Dh), 0);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < Dh; ++i)
                out[size_t((t * Hkv + map[size_t(h)]) * Dh + i)] += x[size_t((t * H + h) * Dh + i)];
    return out;
}

double max_abs_diff(const Vec& a, const Vec& b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

struct MapCase {
    int64_t T, H, Hkv, Dh;
    std::vector<int32_t> map;
};

void check_forward_against_naive(int64_t T, int64_t pos0, uint32_t seed) {
    const int64_t S = pos0 + T, H = 5, Hkv = 3, Dh = 6;
    const std::vector<int32_t> map = {0, 0, 1, 2, 2};
    const double scale = 0.4;
    Vec q = randn(T * H * Dh, seed), k = randn(S * Hkv * Dh, seed + 1), v = randn(S * Hkv * Dh, seed + 2);
    Vec out(q.size()), probs(size_t(T * H * S), -1.0), ref_out, ref_probs;
    cpu::causal_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), T, pos0, H, Hkv, Dh,
                                  scale, map.data());
    naive_forward(ref_out, ref_probs, q, k, v, T, pos0, H, Hkv, Dh, scale, map);
    EXPECT_LT(max_abs_diff(out, ref_out), 1e-12);
    EXPECT_LT(max_abs_diff(probs, ref_probs), 1e-12);  // masked entries are exactly 0 in both
    // Without probs the output is the same.
    Vec out2(q.size());
    cpu::causal_attention_forward(out2.data(), (double*)nullptr, q.data(), k.data(), v.data(), T, pos0, H,
                                  Hkv, Dh, scale, map.data());
    EXPECT_EQ(out2, out);
}

TEST(AttentionMap, ForwardMatchesNaiveDoubleWithCacheOffset) {
    check_forward_against_naive(7, 4, 1);
    check_forward_against_naive(1, 10, 4);   // decode: one query row
    check_forward_against_naive(65, 3, 7);   // a last block of one row
    check_forward_against_naive(1, 700, 8);  // decode over three key chunks
}

// Decode in float (the vector kernels where Dh is a multiple of 8, a loop otherwise) over a cache of several
// key chunks, against the double reference.
TEST(AttentionMap, DecodeInFloatMatchesNaiveAcrossKeyChunks) {
    const std::vector<int32_t> map = {0, 0, 1, 2, 2};
    const int64_t H = 5, Hkv = 3;
    for (const int64_t Dh : {64, 40, 12})
        for (const int64_t S : {3, 601}) {
            SCOPED_TRACE(testing::Message() << "Dh " << Dh << " S " << S);
            const double scale = 1.0 / std::sqrt(double(Dh));
            const Vec q = randn(H * Dh, 20), k = randn(S * Hkv * Dh, 21), v = randn(S * Hkv * Dh, 22);
            Vec ref_out, ref_probs;
            naive_forward(ref_out, ref_probs, q, k, v, 1, S - 1, H, Hkv, Dh, scale, map);
            const std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end());
            std::vector<float> out(q.size()), probs(size_t(H * S));
            cpu::causal_attention_forward(out.data(), probs.data(), qf.data(), kf.data(), vf.data(), 1, S - 1,
                                          H, Hkv, Dh, scale, map.data());
            for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref_out[i], 2e-5) << i;
            for (size_t i = 0; i < probs.size(); ++i) ASSERT_NEAR(probs[i], ref_probs[i], 1e-6) << i;
            std::vector<float> out2(q.size());
            cpu::causal_attention_forward(out2.data(), static_cast<float*>(nullptr), qf.data(), kf.data(),
                                          vf.data(), 1, S - 1, H, Hkv, Dh, scale, map.data());
            EXPECT_EQ(out2, out);
        }
}

// Forward and backward with the map equal those of plain multi-head attention on gathered K/V, whose
// dk/dv are then summed per KV head: an independent route to the same gradients.
void check_against_gather(const MapCase& c, uint32_t seed) {
    const int64_t T = c.T, H = c.H, Hkv = c.Hkv, Dh = c.Dh;
    const double scale = 1.0 / std::sqrt(double(Dh));
    Vec q = randn(T * H * Dh, seed), k = randn(T * Hkv * Dh, seed + 1), v = randn(T * Hkv * Dh, seed + 2);
    Vec dout = randn(T * H * Dh, seed + 3);
    Vec out(q.size()), probs(size_t(T * H * T));
    cpu::causal_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), T, 0, H, Hkv, Dh,
                                  scale, c.map.data());
    const Vec kg = gather(k, T, H, Hkv, Dh, c.map), vg = gather(v, T, H, Hkv, Dh, c.map);
    Vec out_g(q.size()), probs_g(probs.size());
    cpu::causal_attention_forward(out_g.data(), probs_g.data(), q.data(), kg.data(), vg.data(), T, 0, H, H,
                                  Dh, scale);
    EXPECT_LT(max_abs_diff(out, out_g), 1e-12);
    EXPECT_LT(max_abs_diff(probs, probs_g), 1e-12);

    Vec dq_g(q.size()), dkg(kg.size()), dvg(vg.size());
    cpu::causal_attention_backward(dq_g.data(), dkg.data(), dvg.data(), dout.data(), q.data(), kg.data(),
                                   vg.data(), probs_g.data(), T, H, H, Dh, scale);
    const Vec dk_ref = scatter_add(dkg, T, H, Hkv, Dh, c.map),
              dv_ref = scatter_add(dvg, T, H, Hkv, Dh, c.map);
    double gmax = 0;
    for (const Vec* g : {(const Vec*)&dq_g, &dk_ref, &dv_ref})
        for (double x : *g) gmax = std::max(gmax, std::fabs(x));
    for (const double* p : {(const double*)probs.data(), (const double*)nullptr}) {
        Vec dq(q.size(), NAN), dk(k.size(), NAN), dv(v.size(), NAN);
        cpu::causal_attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                       v.data(), p, T, H, Hkv, Dh, scale, c.map.data());
        EXPECT_LT(max_abs_diff(dq, dq_g), 1e-12 * gmax) << (p ? "saved" : "recomputed");
        EXPECT_LT(max_abs_diff(dk, dk_ref), 1e-12 * gmax) << (p ? "saved" : "recomputed");
        EXPECT_LT(max_abs_diff(dv, dv_ref), 1e-12 * gmax) << (p ? "saved" : "recomputed");
    }
}

TEST(AttentionMap, UnequalGroupsMatchGatheredMultiHead) {
    check_against_gather({9, 5, 3, 4, {0, 0, 1, 2, 2}}, 10);
    // Several query blocks (the block is 64 rows), a partial last one.
    check_against_gather({150, 5, 3, 8, {0, 0, 1, 2, 2}}, 20);
    check_against_gather({70, 4, 2, 3, {0, 1, 1, 1}}, 30);
    check_against_gather({65, 5, 3, 4, {0, 0, 1, 2, 2}}, 35);  // the last block holds one row
}

TEST(AttentionMap, UnreadKvHeadGetsZeroGradient) {
    const MapCase c{12, 3, 3, 4, {0, 0, 2}};
    check_against_gather(c, 40);
    const int64_t T = c.T, H = c.H, Hkv = c.Hkv, Dh = c.Dh;
    Vec q = randn(T * H * Dh, 41), k = randn(T * Hkv * Dh, 42), v = randn(T * Hkv * Dh, 43),
        R = randn(T * H * Dh, 44);
    Vec dq(q.size()), dk(k.size(), NAN), dv(v.size(), NAN);
    cpu::causal_attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(),
                                   (const double*)nullptr, T, H, Hkv, Dh, 0.5, c.map.data());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < Dh; ++i) {
            EXPECT_EQ(dk[size_t((t * Hkv + 1) * Dh + i)], 0.0);
            EXPECT_EQ(dv[size_t((t * Hkv + 1) * Dh + i)], 0.0);
        }
}

// The uniform map gives bit-identical results to the default grouping.
TEST(AttentionMap, UniformMapEqualsDefaultGrouping) {
    const int64_t T = 80, H = 6, Hkv = 2, Dh = 5;
    const std::vector<int32_t> map = {0, 0, 0, 1, 1, 1};
    std::mt19937 gen(5);
    std::normal_distribution<float> dist;
    std::vector<float> q(size_t(T * H * Dh)), k(size_t(T * Hkv * Dh)), v(k.size()), R(q.size());
    for (auto* x : {&q, &k, &v, &R})
        for (auto& e : *x) e = dist(gen);
    std::vector<float> o1(q.size()), o2(q.size()), p1(size_t(T * H * T)), p2(p1.size());
    cpu::causal_attention_forward(o1.data(), p1.data(), q.data(), k.data(), v.data(), T, 0, H, Hkv, Dh, 0.3);
    cpu::causal_attention_forward(o2.data(), p2.data(), q.data(), k.data(), v.data(), T, 0, H, Hkv, Dh, 0.3,
                                  map.data());
    EXPECT_EQ(o1, o2);
    EXPECT_EQ(p1, p2);
    std::vector<float> dq1(q.size()), dk1(k.size()), dv1(v.size()), dq2(q.size()), dk2(k.size()),
        dv2(v.size());
    cpu::causal_attention_backward(dq1.data(), dk1.data(), dv1.data(), R.data(), q.data(), k.data(), v.data(),
                                   p1.data(), T, H, Hkv, Dh, 0.3);
    cpu::causal_attention_backward(dq2.data(), dk2.data(), dv2.data(), R.data(), q.data(), k.data(), v.data(),
                                   p1.data(), T, H, Hkv, Dh, 0.3, map.data());
    EXPECT_EQ(dq1, dq2);
    EXPECT_EQ(dk1, dk2);
    EXPECT_EQ(dv1, dv2);
}

// Fourth-order central differences of L = sum(out * R) in double for every input element.
TEST(AttentionMap, FiniteDifferenceGradients) {
    const int64_t T = 6, H = 5, Hkv = 3, Dh = 3;
    const std::vector<int32_t> map = {0, 0, 1, 2, 2};
    const double scale = 0.6, step = 1e-3;
    Vec q = randn(T * H * Dh, 50), k = randn(T * Hkv * Dh, 51), v = randn(T * Hkv * Dh, 52),
        R = randn(T * H * Dh, 53);
    Vec out(q.size());
    auto loss = [&] {
        cpu::causal_attention_forward(out.data(), (double*)nullptr, q.data(), k.data(), v.data(), T, 0, H,
                                      Hkv, Dh, scale, map.data());
        double s = 0;
        for (size_t i = 0; i < out.size(); ++i) s += out[i] * R[i];
        return s;
    };
    Vec dq(q.size()), dk(k.size()), dv(v.size());
    cpu::causal_attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(),
                                   (const double*)nullptr, T, H, Hkv, Dh, scale, map.data());
    double worst = 0;
    for (auto [x, g] : {std::pair{&q, &dq}, std::pair{&k, &dk}, std::pair{&v, &dv}})
        for (size_t i = 0; i < x->size(); ++i) {
            const double saved = (*x)[i];
            auto at = [&](double d) {
                (*x)[i] = saved + d;
                const double l = loss();
                (*x)[i] = saved;
                return l;
            };
            const double fd = (8 * (at(step) - at(-step)) - (at(2 * step) - at(-2 * step))) / (12 * step);
            const double err = std::fabs(fd - (*g)[i]) / std::max({std::fabs(fd), std::fabs((*g)[i]), 1e-8});
            worst = std::max(worst, err);
            EXPECT_LT(err, 1e-6) << "element " << i << ": analytic " << (*g)[i] << " numeric " << fd;
        }
    std::printf("  map {0,0,1,2,2}: worst relative gradient error %.2e\n", worst);
}

// float agrees with double, and results are bit-identical with 1 and 2 threads.
TEST(AttentionMap, FloatMatchesDoubleAndThreadCountDoesNotMatter) {
    const int64_t T = 130, H = 5, Hkv = 3, Dh = 16;
    const std::vector<int32_t> map = {0, 0, 1, 2, 2};
    const double scale = 0.25;
    Vec q = randn(T * H * Dh, 60), k = randn(T * Hkv * Dh, 61), v = randn(T * Hkv * Dh, 62),
        R = randn(T * H * Dh, 63);
    Vec out(q.size()), probs(size_t(T * H * T)), dq(q.size()), dk(k.size()), dv(v.size());
    cpu::causal_attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), T, 0, H, Hkv, Dh,
                                  scale, map.data());
    cpu::causal_attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(),
                                   probs.data(), T, H, Hkv, Dh, scale, map.data());
    auto f = [](const Vec& x) { return std::vector<float>(x.begin(), x.end()); };
    const auto qf = f(q), kf = f(k), vf = f(v), Rf = f(R);
    struct Run {
        std::vector<float> out, probs, dq, dk, dv, dq2, dk2, dv2;
    };
    auto run = [&](int threads) {
        const int saved = omp_get_max_threads();
        omp_set_num_threads(threads);
        Run r{std::vector<float>(q.size()), std::vector<float>(probs.size()), std::vector<float>(q.size()),
              std::vector<float>(k.size()), std::vector<float>(v.size()),     std::vector<float>(q.size()),
              std::vector<float>(k.size()), std::vector<float>(v.size())};
        cpu::causal_attention_forward(r.out.data(), r.probs.data(), qf.data(), kf.data(), vf.data(), T, 0, H,
                                      Hkv, Dh, scale, map.data());
        cpu::causal_attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), Rf.data(), qf.data(), kf.data(),
                                       vf.data(), r.probs.data(), T, H, Hkv, Dh, scale, map.data());
        cpu::causal_attention_backward(r.dq2.data(), r.dk2.data(), r.dv2.data(), Rf.data(), qf.data(),
                                       kf.data(), vf.data(), (const float*)nullptr, T, H, Hkv, Dh, scale,
                                       map.data());
        omp_set_num_threads(saved);
        return r;
    };
    const Run one = run(1), two = run(2);
    EXPECT_EQ(one.out, two.out);
    EXPECT_EQ(one.probs, two.probs);
    EXPECT_EQ(one.dq, two.dq);
    EXPECT_EQ(one.dk, two.dk);
    EXPECT_EQ(one.dv, two.dv);
    EXPECT_EQ(one.dq2, two.dq2);
    EXPECT_EQ(one.dk2, two.dk2);
    EXPECT_EQ(one.dv2, two.dv2);
    auto rel = [](const std::vector<float>& a, const Vec& b) {
        double num = 0, den = 0;
        for (size_t i = 0; i < b.size(); ++i)
            num = std::max(num, std::fabs(double(a[i]) - b[i])), den = std::max(den, std::fabs(b[i]));
        return num / den;
    };
    EXPECT_LT(rel(one.out, out), 1e-5);
    for (const auto* g : {&one.dq, &one.dq2}) EXPECT_LT(rel(*g, dq), 1e-5);
    for (const auto* g : {&one.dk, &one.dk2}) EXPECT_LT(rel(*g, dk), 1e-5);
    for (const auto* g : {&one.dv, &one.dv2}) EXPECT_LT(rel(*g, dv), 1e-5);
}

}  // namespace
}  // namespace hydra
