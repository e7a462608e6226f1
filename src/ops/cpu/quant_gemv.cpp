// Q4_1 / Q8_0 GEMV kernels (see quant_gemv.h). AVX2+FMA when the build targets it, scalar otherwise.
// Q4_1 block (20 bytes, 32 weights): f16 d, f16 m, 16 bytes of nibbles; low nibbles are weights
// 0..15, high nibbles 16..31; w = d*q + m, so a block contributes d*(q.x) + m*sum(x).
// Q8_0 block (34 bytes): f16 d, 32 int8; w = d*q.
#include "ops/cpu/quant_gemv.h"

#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HYDRA_QGEMV_AVX2 1
#endif

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/avx_hsum.h"

namespace hydra::cpu {

namespace {

// One row of Q4_1 against x, with per-block sums of x precomputed.
float dot_q4_1(const uint8_t* row, const float* x, const float* xsum, int64_t blocks) {
#ifdef HYDRA_QGEMV_AVX2
    __m256 acc_q = _mm256_setzero_ps();
    float acc_m = 0;
    const __m128i low_mask = _mm_set1_epi8(0x0F);
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * 20;
        const float d = load_f16(blk), m = load_f16(blk + 2);
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
        const __m128i lo = _mm_and_si128(qs, low_mask);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low_mask);
        const float* xb = x + b * 32;
        __m256 s = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), _mm256_loadu_ps(xb));
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), _mm256_loadu_ps(xb + 8), s);
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), _mm256_loadu_ps(xb + 16), s);
        s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), _mm256_loadu_ps(xb + 24), s);
        acc_q = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc_q);
        acc_m += m * xsum[b];
    }
    return hsum(acc_q) + acc_m;
#else
    float acc = 0;
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * 20;
        const float d = load_f16(blk), m = load_f16(blk + 2);
        const float* xb = x + b * 32;
        float s = 0;
        for (int j = 0; j < 16; ++j) s += float(blk[4 + j] & 15) * xb[j] + float(blk[4 + j] >> 4) * xb[j + 16];
        acc += d * s + m * xsum[b];
    }
    return acc;
#endif
}

float dot_q8_0(const uint8_t* row, const float* x, int64_t blocks) {
#ifdef HYDRA_QGEMV_AVX2
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * 34;
        const float d = load_f16(blk);
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        const float* xb = x + b * 32;
        __m256 s = _mm256_setzero_ps();
        for (int j = 0; j < 32; j += 8) {
            const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + j));
            s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), _mm256_loadu_ps(xb + j), s);
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), s, acc);
    }
    return hsum(acc);
#else
    float acc = 0;
    for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* blk = row + b * 34;
        const int8_t* q = reinterpret_cast<const int8_t*>(blk + 2);
        float s = 0;
        for (int j = 0; j < 32; ++j) s += float(q[j]) * x[b * 32 + j];
        acc += load_f16(blk) * s;
    }
    return acc;
#endif
}

}  // namespace

bool quant_gemv_supported(GgmlType type) { return type == GgmlType::Q4_1 || type == GgmlType::Q8_0; }

void quant_gemv(float* y, GgmlType type, const uint8_t* W, const float* x, int64_t N, int64_t K, bool accumulate) {
    HYDRA_ASSERT(quant_gemv_supported(type) && K % 32 == 0, "quant_gemv: type {} K {}", uint32_t(type), K);
    const int64_t blocks = K / 32;
    const size_t row_bytes = ggml_row_bytes(type, K);
    if (type == GgmlType::Q4_1) {
        std::vector<float> xsum(static_cast<size_t>(blocks));
        for (int64_t b = 0; b < blocks; ++b) {
            float s = 0;
            for (int j = 0; j < 32; ++j) s += x[b * 32 + j];
            xsum[size_t(b)] = s;
        }
#pragma omp parallel for schedule(static) if (N >= 64)
        for (int64_t r = 0; r < N; ++r) {
            const float v = dot_q4_1(W + size_t(r) * row_bytes, x, xsum.data(), blocks);
            y[r] = accumulate ? y[r] + v : v;
        }
    } else {
#pragma omp parallel for schedule(static) if (N >= 64)
        for (int64_t r = 0; r < N; ++r) {
            const float v = dot_q8_0(W + size_t(r) * row_bytes, x, blocks);
            y[r] = accumulate ? y[r] + v : v;
        }
    }
}

}  // namespace hydra::cpu
