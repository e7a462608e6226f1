// The CPU GEMM's bf16-operand emulation (core/gemm.h set_gemm_bf16_rounding): on, every float product
// equals the plain product of its operands rounded to bf16 (any transpose, leading dimensions past the
// width); off again, the plain product.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/gemm.h"
#include "core/half.h"
#include "core/rng.h"

namespace hydra {
namespace {

std::vector<float> random_values(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (float& x : v) x = float(rng.uniform() * 2.0 - 1.0) * 3.1f;  // most not representable in bf16
    return v;
}

std::vector<float> rounded(std::vector<float> v) {
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Operands {
    ~Operands() { set_gemm_bf16_rounding(false); }
};

TEST(GemmBf16Rounding, EveryTransposeEqualsTheProductOfRoundedOperands) {
    const int64_t M = 5, N = 7, K = 9, pad = 3;
    for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N;
        const std::vector<float> A = random_values(size_t((ta ? K : M) * lda), 1 + t),
                                 B = random_values(size_t((tb ? N : K) * ldb), 11 + t),
                                 C0 = random_values(size_t(M * ldc), 21 + t);
        std::vector<float> want = C0, plain = C0, got = C0;
        const std::vector<float> A16 = rounded(A), B16 = rounded(B);
        gemm(ta, tb, M, N, K, 0.5f, A16.data(), lda, B16.data(), ldb, 1.0f, want.data(), ldc);
        gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, plain.data(), ldc);
        {
            Operands scope;
            set_gemm_bf16_rounding(true);
            EXPECT_TRUE(gemm_bf16_rounding());
            gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, got.data(), ldc);
        }
        EXPECT_FALSE(gemm_bf16_rounding());
        EXPECT_TRUE(same_bits(got, want)) << "transpose A " << ta << " B " << tb;
        EXPECT_FALSE(same_bits(got, plain))
            << "the operands were not rounded (transpose A " << ta << " B " << tb << ")";
        std::vector<float> again = C0;
        gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 1.0f, again.data(), ldc);
        EXPECT_TRUE(same_bits(again, plain)) << "off again: the plain product";
    }
}

TEST(GemmBf16Rounding, AFreshProductIsStoredInBf16) {
    const int64_t M = 4, N = 6, K = 8;
    const std::vector<float> A = random_values(size_t(M * K), 41), B = random_values(size_t(K * N), 42);
    std::vector<float> want(size_t(M * N), 0.f), got(size_t(M * N), -7.f);
    const std::vector<float> A16 = rounded(A), B16 = rounded(B);
    gemm(false, false, M, N, K, 1.0f, A16.data(), K, B16.data(), N, 0.0f, want.data(), N);
    want = rounded(want);
    {
        Operands scope;
        set_gemm_bf16_rounding(true);
        gemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f, got.data(), N);
    }
    EXPECT_TRUE(same_bits(got, want));
}

TEST(GemmBf16Rounding, MatrixVectorProductRoundsMatrixAndVector) {
    const int64_t M = 6, K = 11;
    const std::vector<float> A = random_values(size_t(M * K), 31), x = random_values(size_t(K), 32),
                             y0 = random_values(size_t(M), 33);
    std::vector<float> want = y0, got = y0;
    const std::vector<float> A16 = rounded(A), x16 = rounded(x);
    gemv(M, K, 1.0f, A16.data(), x16.data(), 0.25f, want.data());
    {
        Operands scope;
        set_gemm_bf16_rounding(true);
        gemv(M, K, 1.0f, A.data(), x.data(), 0.25f, got.data());
    }
    EXPECT_TRUE(same_bits(got, want));
}

}  // namespace
}  // namespace hydra
