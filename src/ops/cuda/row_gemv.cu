// Decode GEMV (see row_gemv.h). Block: 4 warps; warp w takes weight rows 2 (4 b + w) and the next one.
// Lane l holds the 16-byte chunks at columns 8 (l + 32 j), j < J = ceil(K / 256) of both weight rows, all
// loaded before the first multiply (one memory round trip); then for each row of x its chunks, each lane's
// partial dots, summed over the warp.
#include "ops/cuda/row_gemv.h"

#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kWarps = 4, kRows = 2;

__device__ __forceinline__ void add_products(float& acc, const uint4& w, const uint4& x) {
    const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float2 a = __bfloat1622float2(wp[e]), b = __bfloat1622float2(xp[e]);
        acc = fmaf(a.x, b.x, acc);
        acc = fmaf(a.y, b.y, acc);
    }
}

template <int J, int MX, class T>
__global__ void __launch_bounds__(kWarps * 32)
    k_row_gemv(T* __restrict__ d, const T* c, int64_t ldc, const __nv_bfloat16* __restrict__ x, int64_t ldx,
               int M, const __nv_bfloat16* __restrict__ W, int64_t ldw, int K, int N, float alpha,
               float beta) {
    const int lane = threadIdx.x & 31;
    const int row0 = (int(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
    if (row0 >= N) return;
    uint4 w[kRows][J];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int col = 8 * (lane + 32 * j);
            w[r][j] = row0 + r < N && col < K
                          ? __ldg(reinterpret_cast<const uint4*>(W + int64_t(row0 + r) * ldw + col))
                          : make_uint4(0, 0, 0, 0);
        }
    // Each sum is the same sequence of operations whatever M is (products in column order, then the
    // butterfly below), so a row of x gets the same bits alone as in a bucket of MX.
    float acc[MX][kRows];
#pragma unroll
    for (int m = 0; m < MX; ++m) {
        uint4 xv[J];
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int col = 8 * (lane + 32 * j);
            xv[j] = m < M && col < K ? *reinterpret_cast<const uint4*>(x + int64_t(m) * ldx + col)
                                     : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            acc[m][r] = 0.f;
#pragma unroll
            for (int j = 0; j < J; ++j) add_products(acc[m][r], w[r][j], xv[j]);
        }
    }
    // detail::warp_sum's butterfly, for all MX x kRows sums at once (their shuffles overlap)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int m = 0; m < MX; ++m)
#pragma unroll
            for (int r = 0; r < kRows; ++r) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], o);
    if (lane != 0) return;
#pragma unroll
    for (int m = 0; m < MX; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const int row = row0 + r;
            if (m >= M || row >= N) continue;
            const int64_t at = int64_t(m) * ldc + row;
            float y = alpha * acc[m][r];
            if (beta != 0.f) y += beta * detail::to_f(c[at]);  // c[at] read before d[at] (d may be c)
            if constexpr (std::is_same_v<T, float>)
                d[at] = y;
            else
                d[at] = __float2bfloat16_rn(y);
        }
}

template <int MX, class T>
void launch_rows(cudaStream_t stream, int64_t M, int64_t N, int64_t K, float alpha, const __nv_bfloat16* x,
                 int64_t ldx, const __nv_bfloat16* W, int64_t ldw, float beta, const T* c, T* d,
                 int64_t ldc) {
    const unsigned grid = unsigned((N + kWarps * kRows - 1) / (kWarps * kRows));
    const int chunks = int((K + 255) / 256);
    // J = the chunk count rounded up to an instantiated one (lanes past K load zeros)
#define ROW_GEMV(J)      \
    k_row_gemv<J, MX, T> \
        <<<grid, kWarps * 32, 0, stream>>>(d, c, ldc, x, ldx, int(M), W, ldw, int(K), int(N), alpha, beta)
    if (chunks <= 1)
        ROW_GEMV(1);
    else if (chunks <= 2)
        ROW_GEMV(2);
    else if (chunks <= 3)
        ROW_GEMV(3);
    else if (chunks <= 4)
        ROW_GEMV(4);
    else if (chunks <= 6)
        ROW_GEMV(6);
    else
        ROW_GEMV(8);
#undef ROW_GEMV
    CUDA_CHECK(cudaGetLastError());
}

// MX = M rounded up to 1, 2, 4 or 8 (rows past M load zeros and are not written)
template <class T>
void launch(cudaStream_t stream, int64_t M, int64_t N, int64_t K, float alpha, const __nv_bfloat16* x,
            int64_t ldx, const __nv_bfloat16* W, int64_t ldw, float beta, const T* c, T* d, int64_t ldc) {
    if (M <= 1)
        launch_rows<1>(stream, M, N, K, alpha, x, ldx, W, ldw, beta, c, d, ldc);
    else if (M <= 2)
        launch_rows<2>(stream, M, N, K, alpha, x, ldx, W, ldw, beta, c, d, ldc);
    else if (M <= 4)
        launch_rows<4>(stream, M, N, K, alpha, x, ldx, W, ldw, beta, c, d, ldc);
    else
        launch_rows<8>(stream, M, N, K, alpha, x, ldx, W, ldw, beta, c, d, ldc);
}

bool enabled() {
    static const bool on = [] {
        const char* e = std::getenv("HYDRA_ROW_GEMV");
        return !(e && std::strcmp(e, "0") == 0);
    }();
    return on;
}

}  // namespace

bool row_gemv_applies(bool trans_a, bool trans_b, int64_t M, int64_t K, int64_t batch, const void* x,
                      int64_t ldx, const void* W, int64_t ldw) {
    return enabled() && M >= 1 && M <= kRowGemvMaxRows && batch == 1 && !trans_a && trans_b && K > 0 &&
           K % 8 == 0 && K <= kRowGemvMaxK && ldw % 8 == 0 && (M == 1 || ldx % 8 == 0) &&
           reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0;
}

void row_gemv(cudaStream_t stream, int64_t M, int64_t N, int64_t K, float alpha, const __nv_bfloat16* x,
              int64_t ldx, const __nv_bfloat16* W, int64_t ldw, float beta, const void* C, void* D,
              int64_t ldc, cudaDataType_t type) {
    HYDRA_ASSERT(
        M >= 1 && M <= kRowGemvMaxRows && N >= 0 && N < (int64_t(1) << 31) && K % 8 == 0 && K <= kRowGemvMaxK,
        "row_gemv: M {} N {} K {}", M, N, K);
    if (N == 0) return;
    if (type == CUDA_R_32F)
        launch(stream, M, N, K, alpha, x, ldx, W, ldw, beta, static_cast<const float*>(C),
               static_cast<float*>(D), ldc);
    else
        launch(stream, M, N, K, alpha, x, ldx, W, ldw, beta, static_cast<const __nv_bfloat16*>(C),
               static_cast<__nv_bfloat16*>(D), ldc);
}

}  // namespace hydra::cuda
