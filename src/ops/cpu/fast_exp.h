// A branch-free float exp that compilers vectorise (std::exp stays a scalar libm call without
// -ffast-math), for the elementwise hot loops of the CPU ops: softmax rows, SiLU.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace hydra::cpu {

// exp(x) with relative error < 1e-7 (Cephes expf polynomial after x = n ln2 + r, |r| <= ln2 / 2).
// Results below 2^-126.5 (x < -87.68) are 0 instead of denormals, above 2^127.5 (x > 88.37) inf;
// exp(-inf) = 0, exp(inf) = inf, NaN propagates. Every special case is an integer mask, not a branch,
// so loops over it vectorise (callers mark them `omp simd`).
inline float exp_approx(float x) {
    const int32_t nan_mask = (0x7F800000 - (std::bit_cast<int32_t>(x) & 0x7FFFFFFF)) >> 31;  // -1 for NaN
    // n = round(x / ln 2) by the 1.5 * 2^23 trick; the low mantissa bits of `shifted` hold n (unsigned
    // arithmetic wraps for |x| beyond the trick's range, which lands outside [-126, 127] all the same).
    const float shifted = x * 1.44269504088896341f + 12582912.0f;
    const float n = shifted - 12582912.0f;
    int32_t ni = int32_t(std::bit_cast<uint32_t>(shifted) - 0x4B400000u);
    // Out of range: r = 0 keeps the polynomial finite and the scale 2^-127 -> 0 or 2^128 -> inf decides.
    const int32_t out_mask = ((ni < -126 ? -1 : 0) | (ni > 127 ? -1 : 0)) & ~nan_mask;
    ni = ni < -127 ? -127 : ni;
    ni = ni > 128 ? 128 : ni;
    const float r0 = (x - n * 0.693359375f) - n * -2.12194440e-4f;
    const float r = std::bit_cast<float>(std::bit_cast<int32_t>(r0) & ~out_mask);
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * std::bit_cast<float>((ni + 127) << 23);
}

// The same name for double: the exact libm exp (the double paths are finite-difference references).
inline double exp_approx(double x) { return std::exp(x); }

}  // namespace hydra::cpu
