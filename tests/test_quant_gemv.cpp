// quant_gemv (decode-time GEMV on Q4_1 / Q8_0 blocks) against dequantize_row + a float64 dot.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "io/ggml_types.h"
#include "io/quantize_ref.h"
#include "ops/cpu/quant_gemv.h"

namespace hydra {
namespace {

void check_type(GgmlType type) {
    const int64_t N = 67, K = 576;  // odd row count; K as in SmolLM2
    std::mt19937 gen(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> w(static_cast<size_t>(N * K)), x(static_cast<size_t>(K));
    for (auto& v : w) v = dist(gen);
    for (auto& v : x) v = dist(gen);
    std::vector<uint8_t> q = quantize_ref(type, w.data(), N * K);
    const size_t row_bytes = ggml_row_bytes(type, K);
    ASSERT_EQ(q.size(), size_t(N) * row_bytes);
    std::vector<float> y(static_cast<size_t>(N), 5.0f), row(static_cast<size_t>(K));
    cpu::quant_gemv(y.data(), type, q.data(), x.data(), N, K);
    for (int64_t r = 0; r < N; ++r) {
        dequantize_row(type, q.data() + size_t(r) * row_bytes, row.data(), K);
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) ref += double(row[size_t(k)]) * x[size_t(k)], mag += std::fabs(row[size_t(k)] * x[size_t(k)]);
        EXPECT_NEAR(y[size_t(r)], ref, 1e-5 * mag) << "row " << r;
    }
    std::vector<float> acc(static_cast<size_t>(N), 1.0f);
    cpu::quant_gemv(acc.data(), type, q.data(), x.data(), N, K, true);
    for (int64_t r = 0; r < N; ++r) EXPECT_NEAR(acc[size_t(r)], y[size_t(r)] + 1.0f, 1e-4 * (1 + std::fabs(y[size_t(r)])));
}

TEST(QuantGemv, Q4_1MatchesDequantizedDot) { check_type(GgmlType::Q4_1); }
TEST(QuantGemv, Q8_0MatchesDequantizedDot) { check_type(GgmlType::Q8_0); }
TEST(QuantGemv, SupportedTypes) {
    EXPECT_TRUE(cpu::quant_gemv_supported(GgmlType::Q4_1));
    EXPECT_TRUE(cpu::quant_gemv_supported(GgmlType::Q8_0));
    EXPECT_FALSE(cpu::quant_gemv_supported(GgmlType::Q6_K));
}

}  // namespace
}  // namespace hydra
