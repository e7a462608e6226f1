// Horizontal sum of the eight floats of an AVX register, for the CPU GEMV kernels that accumulate a
// row's dot product in __m256 lanes (quant_gemv, quant_gemv_q8). Only where the compiler targets AVX.
#pragma once

#ifdef __AVX__
#include <immintrin.h>

namespace hydra::cpu {

inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

}  // namespace hydra::cpu
#endif
