// quant_gemv_q8 (decode GEMV on Q4_1 / Q8_0 blocks with 8-bit activations): the activation quantizer,
// the kernels against a float64 evaluation of the same quantized weights and activations, the scalar
// and SIMD paths against each other (bit for bit where every float operation is exact), the batched
// call, and the distance to the f32-activation kernel (quant_gemv.h) within the bound of the rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/half.h"
#include "io/ggml_types.h"
#include "io/quantize_ref.h"
#include "ops/cpu/quant_gemv.h"
#include "ops/cpu/quant_gemv_q8.h"

namespace hydra {
namespace {

float f16_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
}

// Row r of W against x in float64, straight from the block fields; `mag` gets the sum of the terms'
// magnitudes (the scale of float rounding).
double reference_row(GgmlType type, const uint8_t* row, const cpu::Q8Activations& x, double* mag) {
    double ref = 0, m_abs = 0;
    for (int64_t b = 0; b < x.K / 32; ++b) {
        const int8_t* xq = x.q.data() + b * 32;
        double dot = 0, dot_abs = 0;
        double dw, mw = 0;
        if (type == GgmlType::Q4_1) {
            const uint8_t* blk = row + b * 20;
            dw = f16_at(blk), mw = f16_at(blk + 2);
            for (int j = 0; j < 16; ++j) {
                const double a = double(blk[4 + j] & 15) * xq[j], c = double(blk[4 + j] >> 4) * xq[j + 16];
                dot += a + c, dot_abs += std::fabs(a) + std::fabs(c);
            }
        } else {
            const uint8_t* blk = row + b * 34;
            dw = f16_at(blk);
            for (int j = 0; j < 32; ++j) {
                const double a = double(int8_t(blk[2 + j])) * xq[j];
                dot += a, dot_abs += std::fabs(a);
            }
        }
        const double dx = x.d[size_t(b)], sx = x.s[size_t(b)];
        ref += dw * dx * dot + mw * sx;
        m_abs += std::fabs(dw * dx) * dot_abs + std::fabs(mw * sx);
    }
    *mag = m_abs;
    return ref;
}

std::vector<float> normal(int64_t n, uint32_t seed) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = dist(gen);
    return v;
}

TEST(QuantGemvQ8, ActivationQuantizerRoundsWithinHalfAStep) {
    const int64_t K = 1536;
    std::vector<float> x = normal(K, 3);
    for (int j = 0; j < 32; ++j) x[size_t(64 + j)] = 0.0f;  // an all-zero block: scale 0, values 0
    cpu::Q8Activations a;
    cpu::quantize_activations_q8(a, x.data(), K);
    ASSERT_EQ(a.K, K);
    for (int64_t b = 0; b < K / 32; ++b) {
        float amax = 0;
        int32_t sum = 0, qmax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
        const float d = a.d[size_t(b)];
        EXPECT_FLOAT_EQ(d, amax / 127.0f) << "block " << b;
        for (int j = 0; j < 32; ++j) {
            const int8_t q = a.q[size_t(b * 32 + j)];
            ASSERT_GE(q, -127);
            EXPECT_LE(std::fabs(x[size_t(b * 32 + j)] - d * float(q)), 0.5f * d * (1 + 1e-5f) + 1e-30f);
            sum += q, qmax = std::max(qmax, std::abs(int32_t(q)));
        }
        EXPECT_EQ(a.s[size_t(b)], d * float(sum));
        EXPECT_EQ(qmax, b == 2 ? 0 : 127) << "block " << b;
    }
    EXPECT_THROW(cpu::quantize_activations_q8(a, x.data(), 48), Error);
}

// Random weights and activations: each path within float rounding of the float64 evaluation.
void check_against_reference(GgmlType type, int64_t N, int64_t K) {
    SCOPED_TRACE(::testing::Message() << ggml_type_info(uint32_t(type))->name << " N " << N << " K " << K);
    const std::vector<float> w = normal(N * K, 5), xf = normal(K, 7);
    const std::vector<uint8_t> q = quantize_ref(type, w.data(), N * K);
    const size_t row_bytes = ggml_row_bytes(type, K);
    cpu::Q8Activations x;
    cpu::quantize_activations_q8(x, xf.data(), K);
    std::vector<float> simd(static_cast<size_t>(N), 9.0f), scalar(static_cast<size_t>(N), 9.0f),
        batched(static_cast<size_t>(N), 9.0f);
    cpu::detail::q8_rows_simd(simd.data(), type, q.data(), x, 0, N);
    cpu::detail::q8_rows_scalar(scalar.data(), type, q.data(), x, 0, N);
    cpu::quant_gemv_q8(batched.data(), type, q.data(), x, N);
    // A float sum of n products is within about n units of roundoff of its magnitude; the kernels
    // round each block's scale product, its scaled sum and the accumulation (3 per block), and up to 8
    // more in the final horizontal sum.
    const double eps = std::ldexp(1.0, -24), blocks = double(K / 32);
    for (int64_t r = 0; r < N; ++r) {
        double mag;
        const double ref = reference_row(type, q.data() + size_t(r) * row_bytes, x, &mag);
        const double tol = (3 * blocks + 8) * eps * mag;
        EXPECT_NEAR(simd[size_t(r)], ref, tol) << "simd row " << r;
        EXPECT_NEAR(scalar[size_t(r)], ref, tol) << "scalar row " << r;
        EXPECT_EQ(batched[size_t(r)], simd[size_t(r)]) << "row " << r;  // the same kernel per row
    }
}

TEST(QuantGemvQ8, Q4_1MatchesFloat64Reference) {
    check_against_reference(GgmlType::Q4_1, 67, 576);
    check_against_reference(GgmlType::Q4_1, 130, 1536);
}
TEST(QuantGemvQ8, Q8_0MatchesFloat64Reference) {
    check_against_reference(GgmlType::Q8_0, 67, 576);
    check_against_reference(GgmlType::Q8_0, 3, 64);
}

// Scales of 1 and 1/2 and at most 8 blocks make every float operation exact, whatever the order (every
// partial sum is a multiple of 1/4 below 2^22 in magnitude): the
// scalar and SIMD paths must then agree bit for bit with each other and with the float64 value, i.e.
// their integer block sums are the same. Q8_0 weights include -128 (valid int8 in a file; the SIMD
// path's |w| and sign(w) * x must stay exact for it).
TEST(QuantGemvQ8, ScalarAndSimdPathsAgreeExactly) {
    std::printf("[ info     ] quant_gemv_q8 SIMD path: %s\n", cpu::detail::q8_simd_path());
    const int64_t N = 37, K = 256, blocks = K / 32;
    std::mt19937 gen(21);
    std::uniform_int_distribution<int> i8(-128, 127), x8(-127, 127), u8(0, 255), e(-1, 0);
    cpu::Q8Activations x;
    x.K = K;
    x.q.resize(size_t(K)), x.d.resize(size_t(blocks)), x.s.resize(size_t(blocks));
    for (int64_t b = 0; b < blocks; ++b) {
        int32_t sum = 0;
        for (int j = 0; j < 32; ++j) sum += x.q[size_t(b * 32 + j)] = int8_t(x8(gen));
        x.d[size_t(b)] = std::ldexp(1.0f, e(gen));
        x.s[size_t(b)] = x.d[size_t(b)] * float(sum);
    }
    for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q8_0}) {
        const size_t row_bytes = ggml_row_bytes(type, K);
        std::vector<uint8_t> W(static_cast<size_t>(N) * row_bytes);
        for (int64_t r = 0; r < N; ++r)
            for (int64_t b = 0; b < blocks; ++b) {
                uint8_t* blk = W.data() + size_t(r) * row_bytes + b * (type == GgmlType::Q4_1 ? 20 : 34);
                const uint16_t d = f32_to_f16(std::ldexp(1.0f, e(gen))),
                               m = f32_to_f16(-std::ldexp(1.0f, e(gen)));
                std::memcpy(blk, &d, 2);
                if (type == GgmlType::Q4_1) {
                    std::memcpy(blk + 2, &m, 2);
                    for (int j = 0; j < 16; ++j) blk[4 + j] = uint8_t(u8(gen));
                } else {
                    for (int j = 0; j < 32; ++j) blk[2 + j] = uint8_t(int8_t(i8(gen)));
                    if (b == 0) blk[2] = uint8_t(0x80);  // -128
                }
            }
        std::vector<float> simd(static_cast<size_t>(N)), scalar(static_cast<size_t>(N));
        cpu::detail::q8_rows_simd(simd.data(), type, W.data(), x, 0, N);
        cpu::detail::q8_rows_scalar(scalar.data(), type, W.data(), x, 0, N);
        for (int64_t r = 0; r < N; ++r) {
            double mag;
            const double ref = reference_row(type, W.data() + size_t(r) * row_bytes, x, &mag);
            EXPECT_EQ(simd[size_t(r)], scalar[size_t(r)]) << "row " << r;
            EXPECT_EQ(double(scalar[size_t(r)]), ref) << "row " << r;
        }
    }
}

// Several tasks in one call (the q/k/v and gate/up groups) equal separate calls, biases added.
TEST(QuantGemvQ8, BatchedTasksEqualSeparateCalls) {
    const int64_t K = 576, Na = 576, Nb = 193, Nc = 64;
    const std::vector<float> wa = normal(Na * K, 1), wb = normal(Nb * K, 2), wc = normal(Nc * K, 4),
                             xf = normal(K, 8), bias = normal(Nb, 9);
    const auto qa = quantize_ref(GgmlType::Q4_1, wa.data(), Na * K);
    const auto qb = quantize_ref(GgmlType::Q8_0, wb.data(), Nb * K);
    const auto qc = quantize_ref(GgmlType::Q4_1, wc.data(), Nc * K);
    cpu::Q8Activations x;
    cpu::quantize_activations_q8(x, xf.data(), K);
    std::vector<float> ya(static_cast<size_t>(Na)), yb(static_cast<size_t>(Nb)), yc(static_cast<size_t>(Nc));
    std::vector<float> sa(static_cast<size_t>(Na)), sb(static_cast<size_t>(Nb)), sc(static_cast<size_t>(Nc));
    const cpu::Q8GemvTask tasks[] = {{ya.data(), GgmlType::Q4_1, qa.data(), Na, nullptr},
                                     {yb.data(), GgmlType::Q8_0, qb.data(), Nb, bias.data()},
                                     {yc.data(), GgmlType::Q4_1, qc.data(), Nc, nullptr}};
    cpu::quant_gemv_q8(tasks, x);
    cpu::quant_gemv_q8(sa.data(), GgmlType::Q4_1, qa.data(), x, Na);
    cpu::quant_gemv_q8(sb.data(), GgmlType::Q8_0, qb.data(), x, Nb);
    cpu::quant_gemv_q8(sc.data(), GgmlType::Q4_1, qc.data(), x, Nc);
    for (int64_t r = 0; r < Na; ++r) EXPECT_EQ(ya[size_t(r)], sa[size_t(r)]);
    for (int64_t r = 0; r < Nb; ++r) EXPECT_EQ(yb[size_t(r)], sb[size_t(r)] + bias[size_t(r)]);
    for (int64_t r = 0; r < Nc; ++r) EXPECT_EQ(yc[size_t(r)], sc[size_t(r)]);
}

// Against the f32-activation kernel (the reference path). The only difference is the activation
// rounding: |x_k - d_b q_k| <= d_b / 2 in block b, so with the dequantized weights w,
//   |y_q8 - y_f32| <= sum_b (d_b / 2) * sum_{k in b} |w_k|
// plus float rounding of both kernels (1e-5 of the magnitude sum |w_k x_k|, as quant_gemv's test).
void check_against_f32_path(GgmlType type) {
    const int64_t N = 67, K = 576;
    const std::vector<float> w = normal(N * K, 12), xf = normal(K, 13);
    const std::vector<uint8_t> q = quantize_ref(type, w.data(), N * K);
    const size_t row_bytes = ggml_row_bytes(type, K);
    cpu::Q8Activations x;
    cpu::quantize_activations_q8(x, xf.data(), K);
    std::vector<float> y8(static_cast<size_t>(N)), y32(static_cast<size_t>(N)), row(static_cast<size_t>(K));
    cpu::quant_gemv_q8(y8.data(), type, q.data(), x, N);
    cpu::quant_gemv(y32.data(), type, q.data(), xf.data(), N, K);
    double worst_ratio = 0;
    for (int64_t r = 0; r < N; ++r) {
        dequantize_row(type, q.data() + size_t(r) * row_bytes, row.data(), K);
        double bound = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
            bound += 0.5 * x.d[size_t(k / 32)] * std::fabs(row[size_t(k)]);
            mag += std::fabs(double(row[size_t(k)]) * xf[size_t(k)]);
        }
        const double diff = std::fabs(double(y8[size_t(r)]) - y32[size_t(r)]);
        EXPECT_LE(diff, bound + 1e-5 * mag) << "row " << r;
        worst_ratio = std::max(worst_ratio, diff / bound);
    }
    // The bound is a worst case (all roundings aligned with the weights' signs); random roundings
    // cancel, so a kernel that stays far inside it is expected. A kernel that ignored the activations'
    // scales or mixed up blocks would sit at or beyond it.
    EXPECT_LT(worst_ratio, 0.5);
}

TEST(QuantGemvQ8, Q4_1CloseToF32Activations) {
    check_against_f32_path(GgmlType::Q4_1);
}
TEST(QuantGemvQ8, Q8_0CloseToF32Activations) {
    check_against_f32_path(GgmlType::Q8_0);
}

TEST(QuantGemvQ8, RejectsUnsupportedInput) {
    cpu::Q8Activations x;
    std::vector<float> xf(64, 1.0f);
    cpu::quantize_activations_q8(x, xf.data(), 64);
    std::vector<uint8_t> W(64 * 4);
    std::vector<float> y(2);
    EXPECT_THROW(cpu::quant_gemv_q8(y.data(), GgmlType::Q6_K, W.data(), x, 2), Error);
    cpu::Q8Activations empty;
    EXPECT_THROW(cpu::quant_gemv_q8(y.data(), GgmlType::Q4_1, W.data(), empty, 2), Error);
}

}  // namespace
}  // namespace hydra
