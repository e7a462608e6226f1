// Q4_1 / Q8_0 GEMV with 8-bit activations and integer dot products (see quant_gemv_q8.h).
// Q4_1 block (20 bytes): f16 d, f16 m, 16 bytes of nibbles (low = weights 0..15, high = 16..31).
// Q8_0 block (34 bytes): f16 d, 32 int8.
// SIMD, one row at a time, one 32-weight block per 256-bit register: the weights are widened to 32 bytes in
// the order of the activations, and one u8 x s8 dot (VNNI's vpdpbusd, or AVX2's maddubs + madd) gives 8 int32
// partial sums, converted to float and scaled by d_w * d_x into 8 float accumulators. Q8_0's signed
// weights go through |w| and sign(w) * x (exact for every int8 w, x in [-127, 127]). AVX2's maddubs
// saturates at 16 bits, but pairs never get there: 2 * 15 * 127 (Q4_1) and 2 * 128 * 127 (Q8_0) < 32767.
#include "ops/cpu/quant_gemv_q8.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <omp.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define HYDRA_Q8_PATH "avx512vnni"
#define HYDRA_Q8_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#elif defined(__AVXVNNI__)
#define HYDRA_Q8_PATH "avxvnni"
#define HYDRA_Q8_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#else
#define HYDRA_Q8_PATH "avx2"
#define HYDRA_Q8_DPBUSD(acc, u, s) \
    _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#endif
#define HYDRA_Q8_SIMD 1
#else
#define HYDRA_Q8_PATH "scalar"
#endif

#include "core/error.h"
#include "core/half.h"
#include "ops/cpu/avx_hsum.h"

namespace hydra::cpu {

namespace {

float row_scalar(GgmlType type, const uint8_t* row, const Q8Activations& x) {
    const int64_t blocks = x.K / 32;
    float acc = 0;
    if (type == GgmlType::Q4_1) {
        for (int64_t b = 0; b < blocks; ++b) {
            const uint8_t* blk = row + b * 20;
            const int8_t* xq = x.q.data() + b * 32;
            int32_t isum = 0;
            for (int j = 0; j < 16; ++j)
                isum += int32_t(blk[4 + j] & 15) * xq[j] + int32_t(blk[4 + j] >> 4) * xq[j + 16];
            acc += load_f16(blk) * x.d[size_t(b)] * float(isum) + load_f16(blk + 2) * x.s[size_t(b)];
        }
    } else {
        for (int64_t b = 0; b < blocks; ++b) {
            const uint8_t* blk = row + b * 34;
            const int8_t* wq = reinterpret_cast<const int8_t*>(blk + 2);
            const int8_t* xq = x.q.data() + b * 32;
            int32_t isum = 0;
            for (int j = 0; j < 32; ++j) isum += int32_t(wq[j]) * xq[j];
            acc += load_f16(blk) * x.d[size_t(b)] * float(isum);
        }
    }
    return acc;
}

#ifdef HYDRA_Q8_SIMD
inline float f16c(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// One row at a time: a single sequential stream of weight bytes. Interleaving two or four rows (to share the
// activation loads) made two streams, and on AMD Zen 5 that ran at 6-8 GB/s on one core against 18-30 GB/s
// for one stream whenever a row was 612 bytes or longer (the Q8_0 LM head, Q4_1's K = 1536 down projection);
// the activations stay in L1 either way.
void row_q4_1(float* y, const uint8_t* row, const Q8Activations& x) {
    const int64_t blocks = x.K / 32;
    const __m256i mask = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0;
    for (int64_t b = 0; b < blocks; ++b) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q.data() + b * 32));
        const uint8_t* blk = row + b * 20;
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 4));
        const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs), mask);
        const __m256i isum = HYDRA_Q8_DPBUSD(_mm256_setzero_si256(), w, xv);
        int32_t dm;  // the block's f16 d and m, converted together
        std::memcpy(&dm, blk, 4);
        const __m128 dmf = _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum),
                              _mm256_broadcastss_ps(_mm_mul_ss(dmf, _mm_set_ss(x.d[size_t(b)]))), acc);
        accm += _mm_cvtss_f32(_mm_movehdup_ps(dmf)) * x.s[size_t(b)];
    }
    *y = hsum(acc) + accm;
}

void row_q8_0(float* y, const uint8_t* row, const Q8Activations& x) {
    const int64_t blocks = x.K / 32;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q.data() + b * 32));
        const uint8_t* blk = row + b * 34;
        const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        const __m256i isum =
            HYDRA_Q8_DPBUSD(_mm256_setzero_si256(), _mm256_abs_epi8(wq), _mm256_sign_epi8(xv, wq));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(f16c(blk) * x.d[size_t(b)]), acc);
    }
    *y = hsum(acc);
}
#endif

void check(GgmlType type, const Q8Activations& x) {
    HYDRA_ASSERT(type == GgmlType::Q4_1 || type == GgmlType::Q8_0, "quant_gemv_q8: type {}", uint32_t(type));
    HYDRA_ASSERT(x.K > 0 && x.K % 32 == 0 && int64_t(x.q.size()) >= x.K && int64_t(x.d.size()) >= x.K / 32 &&
                     int64_t(x.s.size()) >= x.K / 32,
                 "quant_gemv_q8: activations of K = {} not quantized", x.K);
}

// Rows [r0, r1) of task t, then its bias on those rows.
void run_rows(const Q8GemvTask& t, const Q8Activations& x, int64_t r0, int64_t r1) {
    detail::q8_rows_simd(t.y, t.type, t.W, x, r0, r1);
    if (t.bias)
        for (int64_t r = r0; r < r1; ++r) t.y[r] += t.bias[r];
}

}  // namespace

void quantize_activations_q8(Q8Activations& out, const float* x, int64_t K) {
    HYDRA_ASSERT(K > 0 && K % 32 == 0, "quantize_activations_q8: K = {} is not a positive multiple of 32", K);
    out.K = K;
    if (int64_t(out.q.size()) < K) out.q.resize(size_t(K));
    if (int64_t(out.d.size()) < K / 32) out.d.resize(size_t(K / 32)), out.s.resize(size_t(K / 32));
    for (int64_t b = 0; b < K / 32; ++b) {
        const float* xb = x + b * 32;
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
        const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        int8_t* q = out.q.data() + b * 32;
        for (int j = 0; j < 32; ++j) {
            // |x * id| <= 127 up to rounding; the clamp also keeps a non-finite block inside int8.
            const float v = std::clamp(std::nearbyint(xb[j] * id), -127.0f, 127.0f);
            q[j] = int8_t(v == v ? v : 0.0f);
            sum += q[j];
        }
        out.d[size_t(b)] = d;
        out.s[size_t(b)] = d * float(sum);
    }
}

namespace detail {

void q8_rows_scalar(float* y, GgmlType type, const uint8_t* W, const Q8Activations& x, int64_t r0,
                    int64_t r1) {
    check(type, x);
    const size_t row_bytes = ggml_row_bytes(type, x.K);
    for (int64_t r = r0; r < r1; ++r) y[r] = row_scalar(type, W + size_t(r) * row_bytes, x);
}

void q8_rows_simd(float* y, GgmlType type, const uint8_t* W, const Q8Activations& x, int64_t r0, int64_t r1) {
#ifdef HYDRA_Q8_SIMD
    check(type, x);
    const size_t row_bytes = ggml_row_bytes(type, x.K);
    if (type == GgmlType::Q4_1)
        for (int64_t r = r0; r < r1; ++r) row_q4_1(y + r, W + size_t(r) * row_bytes, x);
    else
        for (int64_t r = r0; r < r1; ++r) row_q8_0(y + r, W + size_t(r) * row_bytes, x);
#else
    q8_rows_scalar(y, type, W, x, r0, r1);
#endif
}

const char* q8_simd_path() {
    return HYDRA_Q8_PATH;
}

}  // namespace detail

void quant_gemv_q8(std::span<const Q8GemvTask> tasks, const Q8Activations& x) {
    int64_t total = 0;
    for (const Q8GemvTask& t : tasks) {
        check(t.type, x);
        HYDRA_ASSERT(t.N >= 0 && (t.N == 0 || (t.y && t.W)), "quant_gemv_q8: task of {} rows without buffers",
                     t.N);
        total += t.N;
    }
    // Each thread takes one contiguous slice of the concatenated rows of all tasks.
    auto slice = [&](int64_t begin, int64_t end) {
        int64_t base = 0;
        for (const Q8GemvTask& t : tasks) {
            const int64_t r0 = std::max(begin - base, int64_t(0)), r1 = std::min(end - base, t.N);
            if (r0 < r1) run_rows(t, x, r0, r1);
            base += t.N;
        }
    };
    // Below ~64K weights a fork/join costs more than the rows.
    if (total * x.K < 65536 || omp_get_max_threads() == 1) {
        slice(0, total);
        return;
    }
#pragma omp parallel
    {
        const int64_t n = omp_get_num_threads(), i = omp_get_thread_num();
        const int64_t begin = total * i / n, end = total * (i + 1) / n;
        slice(begin, end);
    }
}

void quant_gemv_q8(float* y, GgmlType type, const uint8_t* W, const Q8Activations& x, int64_t N) {
    const Q8GemvTask t{y, type, W, N, nullptr};
    quant_gemv_q8(std::span<const Q8GemvTask>(&t, 1), x);
}

}  // namespace hydra::cpu
