// Tests for ggml dequantization (io/ggml_types.h) and the reference quantizers (io/quantize_ref.h).
// Every supported type gets a hand-built block whose expected values are derived here from the
// formulas of engines.md §2.4, written in a different shape from the library (per element instead
// of per chunk), plus literal spot values computed by hand. Round trips check error bounds that
// follow from each quantizer's scale choice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "io/ggml_types.h"
#include "io/quantize_ref.h"

using namespace hydra;

namespace {

void put_f16(std::vector<uint8_t>& b, size_t at, uint16_t h) {
    std::memcpy(b.data() + at, &h, 2);
}

std::vector<float> dequant(GgmlType t, const std::vector<uint8_t>& bytes, int64_t n) {
    EXPECT_EQ(ggml_row_bytes(t, n), bytes.size());
    std::vector<float> out(size_t(n), -12345.0f);
    dequantize_row(t, bytes.data(), out.data(), n);
    return out;
}

// Independent f16 decoder: value = (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024.
double f16_reference(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 0)
        v = std::ldexp(double(m), -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = std::ldexp(1.0 + m / 1024.0, e - 15);
    return s ? -v : v;
}

// The 5-bit / 4-bit value of element i of a 32-block: low 4 bits from qs (low nibbles are elements
// 0..15, high nibbles 16..31), the 5th from bit i of qh.
int nibble32(const uint8_t* qs, int i) {
    return i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
TEST(GgmlTypes, TableAndNames) {
    struct Row {
        uint32_t id;
        const char* name;
        int64_t be, bb;
        bool deq;
    };
    const Row rows[] = {
        {0, "F32", 1, 4, true},        {1, "F16", 1, 2, true},       {2, "Q4_0", 32, 18, true},
        {3, "Q4_1", 32, 20, true},     {6, "Q5_0", 32, 22, true},    {7, "Q5_1", 32, 24, true},
        {8, "Q8_0", 32, 34, true},     {12, "Q4_K", 256, 144, true}, {13, "Q5_K", 256, 176, true},
        {14, "Q6_K", 256, 210, true},  {30, "BF16", 1, 2, true},     {10, "Q2_K", 256, 84, false},
        {11, "Q3_K", 256, 110, false}, {9, "Q8_1", 32, 36, false},   {28, "F64", 1, 8, false},
        {39, "MXFP4", 32, 17, false}};
    for (const Row& r : rows) {
        const GgmlTypeInfo* info = ggml_type_info(r.id);
        ASSERT_NE(info, nullptr) << r.id;
        EXPECT_EQ(info->name, r.name);
        EXPECT_EQ(info->block_elems, r.be) << r.name;
        EXPECT_EQ(info->block_bytes, r.bb) << r.name;
        EXPECT_EQ(info->can_dequantize, r.deq) << r.name;
        EXPECT_EQ(ggml_type_name(r.id), r.name);
    }
    for (uint32_t retired : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u}) {
        EXPECT_EQ(ggml_type_info(retired), nullptr) << retired;
        EXPECT_NE(ggml_type_name(retired).find("retired"), std::string::npos);
    }
    EXPECT_EQ(ggml_type_info(43), nullptr);
    EXPECT_EQ(ggml_type_info(0xffffffffu), nullptr);
    EXPECT_EQ(ggml_type_name(99), "unknown type 99");
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_1, 576), 18u * 20u);
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 1536), 6u * 210u);
    EXPECT_EQ(ggml_row_bytes(GgmlType::F16, 7), 14u);
}

TEST(Dequant, UnsupportedTypeThrows) {
    std::vector<uint8_t> block(84, 0);
    float out[256];
    EXPECT_THROW(dequantize_row(GgmlType::Q2_K, block.data(), out, 256), Error);
    try {
        dequantize_row(GgmlType::Q3_K, block.data(), out, 256);
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("Q3_K"), std::string::npos) << e.what();
    }
}

TEST(Dequant, F32) {
    const float v[4] = {1.5f, -0.0f, 3e38f, -1e-40f};
    std::vector<uint8_t> b(16);
    std::memcpy(b.data(), v, 16);
    const auto y = dequant(GgmlType::F32, b, 4);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(std::memcmp(&y[i], &v[i], 4), 0);
}

TEST(Dequant, F16AllBitPatternsMatchIndependentDecoder) {
    std::vector<uint8_t> b(65536 * 2);
    for (uint32_t i = 0; i < 65536; ++i) put_f16(b, 2 * i, uint16_t(i));
    const auto y = dequant(GgmlType::F16, b, 65536);
    for (uint32_t i = 0; i < 65536; ++i) {
        const double ref = f16_reference(uint16_t(i));
        if (std::isnan(ref)) {
            EXPECT_TRUE(std::isnan(y[i])) << i;
        } else {
            ASSERT_EQ(double(y[i]), ref) << "f16 bits 0x" << std::hex << i;
            ASSERT_EQ(std::signbit(y[i]), bool(i & 0x8000)) << i;
        }
    }
    // Spot values by hand.
    EXPECT_EQ(y[0x3c00], 1.0f);
    EXPECT_EQ(y[0xc000], -2.0f);
    EXPECT_EQ(y[0x0001], std::ldexp(1.0f, -24));            // smallest subnormal
    EXPECT_EQ(y[0x03ff], 1023.0f * std::ldexp(1.0f, -24));  // largest subnormal
    EXPECT_EQ(y[0x0400], std::ldexp(1.0f, -14));            // smallest normal
    EXPECT_EQ(y[0x7bff], 65504.0f);                         // largest finite
    EXPECT_EQ(y[0x7c00], INFINITY);
    EXPECT_EQ(y[0xfc00], -INFINITY);
    EXPECT_EQ(y[0x3555], 0.333251953125f);
}

TEST(Dequant, BF16) {
    const uint16_t h[6] = {0x3f80, 0xc049, 0x7f80, 0x0001, 0xff80, 0x4120};
    std::vector<uint8_t> b(12);
    for (int i = 0; i < 6; ++i) put_f16(b, 2 * i, h[i]);
    const auto y = dequant(GgmlType::BF16, b, 6);
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], -3.140625f);
    EXPECT_EQ(y[2], INFINITY);
    EXPECT_EQ(y[3], std::ldexp(1.0f, -133));  // f32 subnormal 0x00010000
    EXPECT_EQ(y[4], -INFINITY);
    EXPECT_EQ(y[5], 10.0f);
}

TEST(Dequant, Q4_0) {
    // Two blocks: d = 0.5, qs[j] = j | (15-j)<<4; then d = -2, all nibbles 8 except qs[0] = 0x1f.
    std::vector<uint8_t> b(36, 0);
    put_f16(b, 0, 0x3800);  // 0.5
    for (int j = 0; j < 16; ++j) b[2 + j] = uint8_t(j | (15 - j) << 4);
    put_f16(b, 18, 0xc000);  // -2
    for (int j = 0; j < 16; ++j) b[20 + j] = 0x88;
    b[20] = 0x1f;
    const auto y = dequant(GgmlType::Q4_0, b, 64);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], float(nibble32(&b[2], i) - 8) * 0.5f) << i;
    EXPECT_EQ(y[0], -4.0f);    // (0 - 8) * 0.5
    EXPECT_EQ(y[15], 3.5f);    // (15 - 8) * 0.5
    EXPECT_EQ(y[16], 3.5f);    // high nibble of qs[0] = 15: second half, not element 1
    EXPECT_EQ(y[17], 3.0f);    // high nibble of qs[1] = 14
    EXPECT_EQ(y[31], -4.0f);   // high nibble of qs[15] = 0
    EXPECT_EQ(y[32], -14.0f);  // low nibble 15: (15 - 8) * -2
    EXPECT_EQ(y[48], 14.0f);   // high nibble 1: (1 - 8) * -2
    for (int i = 33; i < 64; ++i)
        if (i != 48) {
            EXPECT_EQ(y[i], 0.0f) << i;
        }
}

TEST(Dequant, Q4_1) {
    // d = 0.5, m = -1; qs[j] = j | ((3j) % 16) << 4.
    std::vector<uint8_t> b(20, 0);
    put_f16(b, 0, 0x3800);
    put_f16(b, 2, 0xbc00);  // -1
    for (int j = 0; j < 16; ++j) b[4 + j] = uint8_t(j | ((3 * j) % 16) << 4);
    const auto y = dequant(GgmlType::Q4_1, b, 32);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], float(nibble32(&b[4], i)) * 0.5f - 1.0f) << i;
    EXPECT_EQ(y[0], -1.0f);
    EXPECT_EQ(y[15], 6.5f);  // 15 * 0.5 - 1
    EXPECT_EQ(y[17], 0.5f);  // (3 % 16) * 0.5 - 1
    EXPECT_EQ(y[21], 6.5f);  // 15 * 0.5 - 1
    EXPECT_EQ(y[22], 0.0f);  // high nibble of qs[6] = 18 % 16 = 2: 2 * 0.5 - 1
}

TEST(Dequant, Q5_0) {
    // d = 0.25; qh = 0xa5a5f00f; qs[j] = (7j & 15) | ((5j + 3) & 15) << 4.
    std::vector<uint8_t> b(22, 0);
    put_f16(b, 0, 0x3400);
    const uint32_t qh = 0xa5a5f00fu;
    std::memcpy(&b[2], &qh, 4);
    for (int j = 0; j < 16; ++j) b[6 + j] = uint8_t(((7 * j) & 15) | ((5 * j + 3) & 15) << 4);
    const auto y = dequant(GgmlType::Q5_0, b, 32);
    for (int i = 0; i < 32; ++i) {
        const int q = nibble32(&b[6], i) | int((qh >> i) & 1) << 4;
        EXPECT_EQ(y[i], float(q - 16) * 0.25f) << i;
    }
    EXPECT_EQ(y[0], 0.0f);    // low nibble 0, qh bit 0 set: q = 16 -> 0
    EXPECT_EQ(y[4], -1.0f);   // low nibble 28 & 15 = 12, qh bit 4 clear: (12 - 16) * 0.25
    EXPECT_EQ(y[16], 0.75f);  // high nibble of qs[0] = 3, qh bit 16 set: (19 - 16) * 0.25
    EXPECT_EQ(y[31], 3.5f);   // high nibble of qs[15] = 78 & 15 = 14, qh bit 31 set: (30 - 16) * 0.25
}

TEST(Dequant, Q5_1) {
    // d = 0.5, m = 2; qh = 0x0000ffff (first half gets the 5th bit); qs[j] = j | (15 - j) << 4.
    std::vector<uint8_t> b(24, 0);
    put_f16(b, 0, 0x3800);
    put_f16(b, 2, 0x4000);  // 2
    const uint32_t qh = 0x0000ffffu;
    std::memcpy(&b[4], &qh, 4);
    for (int j = 0; j < 16; ++j) b[8 + j] = uint8_t(j | (15 - j) << 4);
    const auto y = dequant(GgmlType::Q5_1, b, 32);
    for (int i = 0; i < 32; ++i) {
        const int q = nibble32(&b[8], i) | int((qh >> i) & 1) << 4;
        EXPECT_EQ(y[i], float(q) * 0.5f + 2.0f) << i;
    }
    EXPECT_EQ(y[0], 10.0f);   // (0 | 16) * 0.5 + 2
    EXPECT_EQ(y[15], 17.5f);  // 31 * 0.5 + 2
    EXPECT_EQ(y[16], 9.5f);   // 15 * 0.5 + 2, no 5th bit
    EXPECT_EQ(y[31], 2.0f);
}

TEST(Dequant, Q8_0) {
    std::vector<uint8_t> b(34, 0);
    put_f16(b, 0, 0x3000);                                                 // 0.125
    for (int j = 0; j < 32; ++j) b[2 + j] = uint8_t(int8_t(j * 8 - 128));  // -128..120
    const auto y = dequant(GgmlType::Q8_0, b, 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], float(j * 8 - 128) * 0.125f) << j;
    EXPECT_EQ(y[0], -16.0f);
    EXPECT_EQ(y[31], 15.0f);  // 120 * 0.125
}

namespace {

// Hand-packed Q4_K/Q5_K scale bytes for sc = {1,2,3,4,33,40,63,17}, mn = {0,5,10,63,7,20,33,48}:
//   s[0..3] = sc[0..3] | (sc[4..7] >> 4) << 6 = {1|2<<6, 2|2<<6, 3|3<<6, 4|1<<6}
//   s[4..7] = mn[0..3] | (mn[4..7] >> 4) << 6 = {0|0<<6, 5|1<<6, 10|2<<6, 63|3<<6}
//   s[8..11] = (sc[4..7] & 15) | (mn[4..7] & 15) << 4 = {1|7<<4, 8|4<<4, 15|1<<4, 1|0<<4}
const uint8_t kKScales[12] = {129, 130, 195, 68, 0, 69, 138, 255, 113, 72, 31, 1};
const int kSc[8] = {1, 2, 3, 4, 33, 40, 63, 17};
const int kMn[8] = {0, 5, 10, 63, 7, 20, 33, 48};

}  // namespace

TEST(Dequant, Q4_K) {
    std::vector<uint8_t> b(144, 0);
    put_f16(b, 0, 0x3800);  // d = 0.5
    put_f16(b, 2, 0x3400);  // dmin = 0.25
    std::memcpy(&b[4], kKScales, 12);
    for (int i = 0; i < 128; ++i) b[16 + i] = uint8_t(i * 7 + 3);
    const auto y = dequant(GgmlType::Q4_K, b, 256);
    for (int e = 0; e < 256; ++e) {
        const int sub = e / 32, l = e % 32, chunk = e / 64;
        const uint8_t byte = b[16 + 32 * chunk + l];
        const int q = (sub % 2 == 0) ? (byte & 15) : (byte >> 4);
        EXPECT_EQ(y[e], 0.5f * float(kSc[sub]) * float(q) - 0.25f * float(kMn[sub])) << e;
    }
    EXPECT_EQ(y[0], 1.5f);       // qs[0] = 3: 0.5*1*3 - 0
    EXPECT_EQ(y[32], -1.25f);    // high nibble of qs[0] = 0: -0.25*5
    EXPECT_EQ(y[200], 338.25f);  // qs[104] = 219 -> 11: 0.5*63*11 - 0.25*33
    EXPECT_EQ(y[255], 47.5f);    // qs[127] = 124 -> 7: 0.5*17*7 - 0.25*48
}

TEST(Dequant, Q5_K) {
    std::vector<uint8_t> b(176, 0);
    put_f16(b, 0, 0x3800);
    put_f16(b, 2, 0x3400);
    std::memcpy(&b[4], kKScales, 12);
    for (int l = 0; l < 32; ++l) b[16 + l] = uint8_t(l * 37 + 11);
    for (int i = 0; i < 128; ++i) b[48 + i] = uint8_t(i * 7 + 3);
    const auto y = dequant(GgmlType::Q5_K, b, 256);
    for (int e = 0; e < 256; ++e) {
        const int sub = e / 32, l = e % 32, chunk = e / 64;
        const uint8_t byte = b[48 + 32 * chunk + l];
        // Sub-block `sub` takes its 5th bit from bit `sub` of qh[l].
        const int q = ((sub % 2 == 0) ? (byte & 15) : (byte >> 4)) | ((b[16 + l] >> sub) & 1) << 4;
        EXPECT_EQ(y[e], 0.5f * float(kSc[sub]) * float(q) - 0.25f * float(kMn[sub])) << e;
    }
    EXPECT_EQ(y[0], 9.5f);      // qh[0] = 11 bit 0 set: q = 3 + 16 = 19 -> 0.5*1*19
    EXPECT_EQ(y[255], 183.5f);  // qh[31] = 134 bit 7 set: q = 7 + 16 = 23 -> 0.5*17*23 - 12
}

TEST(Dequant, Q6_K) {
    const int8_t sc[16] = {1, -10, 19, -28, 37, -46, 55, -64, 73, -82, 91, -100, 109, -118, 127, -128};
    std::vector<uint8_t> b(210, 0);
    for (int i = 0; i < 128; ++i) b[i] = uint8_t(i * 13 + 5);       // ql
    for (int i = 0; i < 64; ++i) b[128 + i] = uint8_t(i * 29 + 7);  // qh
    std::memcpy(&b[192], sc, 16);                                   // scales (signed)
    put_f16(b, 208, 0x2c00);                                        // d = 0.0625
    const auto y = dequant(GgmlType::Q6_K, b, 256);
    for (int i = 0; i < 256; ++i) {
        // Element i = 128h + 32k + l: low 4 bits from ql[64h + l + 32(k&1)] (high nibble when k >= 2),
        // top 2 bits from qh[32h + l] at bit 2k, scale scales[i/16].
        const int h = i / 128, k = (i % 128) / 32, l = i % 32;
        const uint8_t lb = b[64 * h + l + 32 * (k & 1)];
        const int low = k < 2 ? (lb & 15) : (lb >> 4);
        const int hi = (b[128 + 32 * h + l] >> (2 * k)) & 3;
        const int q = (low | hi << 4) - 32;
        EXPECT_EQ(y[i], 0.0625f * float(sc[i / 16]) * float(q)) << i;
    }
    EXPECT_EQ(y[0], 1.3125f);   // ql 5, qh bits 3 -> 53 - 32 = 21; 0.0625*1*21
    EXPECT_EQ(y[255], 200.0f);  // ql[127] = 120 -> 7, qh[63] = 42 -> 0: -25 * -128 * 0.0625
}

// ---------------------------------------------------------------------------------------------
// Round trips through the reference quantizers.

namespace {

std::vector<float> random_row(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, scale);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        x[size_t(i)] = g(rng) + ((i / 256) % 3 == 0 ? 0.5f * scale : 0.0f) + 0.1f * u(rng);
    return x;
}

struct Range {
    float lo = 0, hi = 0;  // includes 0
    float span() const { return hi - lo; }
    float amax() const { return std::max(-lo, hi); }
};

Range range_of(const float* x, int n, bool include_zero) {
    Range r{x[0], x[0]};
    if (include_zero) r = {0, 0};
    for (int i = 0; i < n; ++i) r.lo = std::min(r.lo, x[i]), r.hi = std::max(r.hi, x[i]);
    return r;
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
    const auto q = quantize_ref(t, x.data(), int64_t(x.size()));
    EXPECT_EQ(q.size(), ggml_row_bytes(t, int64_t(x.size())));
    std::vector<float> y(x.size());
    dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
    return y;
}

double rel_rms(const std::vector<float>& x, const std::vector<float>& y) {
    double num = 0, den = 0;
    for (size_t i = 0; i < x.size(); ++i)
        num += double(x[i] - y[i]) * (x[i] - y[i]), den += double(x[i]) * x[i];
    return std::sqrt(num / den);
}

constexpr float kF16Rel = 1.0f / 1024;  // f16 keeps 11 significant bits: relative rounding <= 2^-11

}  // namespace

TEST(QuantizeRef, PlainTypesRoundTrip) {
    const auto x = random_row(1024, 1);
    auto f16 = round_trip(GgmlType::F16, x);
    auto bf16 = round_trip(GgmlType::BF16, x);
    auto f32 = round_trip(GgmlType::F32, x);
    for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_LE(std::fabs(f16[i] - x[i]), std::fabs(x[i]) * (kF16Rel / 2) + 1e-7f);
        EXPECT_LE(std::fabs(bf16[i] - x[i]), std::fabs(x[i]) / 256.0f);
        EXPECT_EQ(f32[i], x[i]);
    }
}

TEST(QuantizeRef, Block32TypesErrorBounds) {
    const auto x = random_row(2048, 2);
    struct Case {
        GgmlType t;
        double max_rel_rms;
    };
    // Measured rel-RMS is roughly half of these limits; the per-element bounds are the real check.
    for (auto [t, max_rms] :
         {Case{GgmlType::Q8_0, 0.01}, Case{GgmlType::Q4_0, 0.15}, Case{GgmlType::Q4_1, 0.12},
          Case{GgmlType::Q5_0, 0.075}, Case{GgmlType::Q5_1, 0.06}}) {
        const auto y = round_trip(t, x);
        for (size_t b = 0; b < x.size() / 32; ++b) {
            const float* xb = &x[32 * b];
            const Range r = range_of(xb, 32, false);
            float bound;
            switch (t) {
                case GgmlType::Q8_0:
                    bound = 0.5f * r.amax() / 127 + r.amax() * kF16Rel;
                    break;
                // Symmetric 4/5-bit: d = -amax/8 (/16); the far end is clamped, so the error reaches |d|.
                case GgmlType::Q4_0:
                    bound = r.amax() / 8 + r.amax() * kF16Rel;
                    break;
                case GgmlType::Q5_0:
                    bound = r.amax() / 16 + r.amax() * kF16Rel;
                    break;
                case GgmlType::Q4_1:
                    bound = 0.5f * r.span() / 15 + (r.span() + std::fabs(r.lo)) * kF16Rel;
                    break;
                default:
                    bound = 0.5f * r.span() / 31 + (r.span() + std::fabs(r.lo)) * kF16Rel;
                    break;
            }
            for (int j = 0; j < 32; ++j)
                ASSERT_LE(std::fabs(y[32 * b + j] - xb[j]), bound)
                    << ggml_type_info(uint32_t(t))->name << " block " << b << " elem " << j;
        }
        EXPECT_LT(rel_rms(x, y), max_rms) << ggml_type_info(uint32_t(t))->name;
        EXPECT_GT(rel_rms(x, y), 0.0) << ggml_type_info(uint32_t(t))->name;  // it did quantize
    }
}

TEST(QuantizeRef, KTypesErrorBounds) {
    const auto x = random_row(4096, 3, 0.7f);
    struct Case {
        GgmlType t;
        int qmax;
        double max_rel_rms;
    };
    for (auto [t, qmax, max_rms] :
         {Case{GgmlType::Q4_K, 15, 0.15}, Case{GgmlType::Q5_K, 31, 0.075}, Case{GgmlType::Q6_K, 31, 0.04}}) {
        const auto y = round_trip(t, x);
        for (size_t sb = 0; sb < x.size() / 256; ++sb) {
            const float* xs = &x[256 * sb];
            const Range super = range_of(xs, 256, true);
            const int sub_n = t == GgmlType::Q6_K ? 16 : 32;
            for (int k = 0; k < 256 / sub_n; ++k) {
                const Range r = range_of(xs + k * sub_n, sub_n, true);
                // Q4_K/Q5_K: step <= (sub range + ~2 super range / 63) / qmax; Q6_K: symmetric with
                // step <= (sub amax + super amax / 127) / 31. Error <= step / 2 (+ f16 rounding).
                const float step = t == GgmlType::Q6_K ? (r.amax() + 1.01f * super.amax() / 127) / 31
                                                       : (r.span() + 2.1f * super.span() / 63) / qmax;
                const float bound = 0.5f * step + super.span() * 1e-4f;
                for (int j = 0; j < sub_n; ++j) {
                    const size_t i = 256 * sb + k * sub_n + j;
                    ASSERT_LE(std::fabs(y[i] - x[i]), bound)
                        << ggml_type_info(uint32_t(t))->name << " element " << i;
                }
            }
        }
        EXPECT_LT(rel_rms(x, y), max_rms) << ggml_type_info(uint32_t(t))->name;
        EXPECT_GT(rel_rms(x, y), 0.0) << ggml_type_info(uint32_t(t))->name;
    }
}

TEST(QuantizeRef, ExactlyRepresentableInputsAreExact) {
    // Values on the quantizer's own grid with power-of-two steps come back bit-exact.
    std::vector<float> x8(32), x41(32), x51(32), x40(32);
    for (int j = 0; j < 32; ++j) {
        x8[j] = float((j * 37) % 255 - 127) * 0.25f;  // includes -127*0.25? amax must be 127*0.25
        x41[j] = -3.0f + float(j % 16) * 0.5f;        // min -3, max 4.5: d = 0.5
        x51[j] = 1.0f + float(j) * 0.125f;            // min 1, max 4.875: d = 0.125
        x40[j] = float(j % 16 - 8) * 0.25f;           // signed absmax -2 -> d = 0.25
    }
    x8[0] = 127 * 0.25f;
    auto check = [](GgmlType t, const std::vector<float>& x) {
        const auto y = round_trip(t, x);
        for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], x[j]) << ggml_type_info(uint32_t(t))->name << " " << j;
    };
    check(GgmlType::Q8_0, x8);
    check(GgmlType::Q4_1, x41);
    check(GgmlType::Q5_1, x51);
    check(GgmlType::Q4_0, x40);
}

TEST(QuantizeRef, ZeroBlocksAndBadSizes) {
    std::vector<float> z(256, 0.0f);
    for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                       GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
        const auto y = round_trip(t, z);
        for (float v : y) EXPECT_EQ(v, 0.0f) << ggml_type_info(uint32_t(t))->name;
    }
    EXPECT_THROW(quantize_ref(GgmlType::Q4_K, z.data(), 100), Error);
    EXPECT_THROW(quantize_ref(GgmlType::Q2_K, z.data(), 256), Error);
}
