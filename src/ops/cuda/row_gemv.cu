// Single-row decode GEMV (see row_gemv.h). Block: 4 warps; warp w takes rows 2 (4 b + w) and the next one.
// Lane l holds the 16-byte chunks at columns 8 (l + 32 j), j < J = ceil(K / 256): the two rows' chunks and
// x's are all loaded before the first multiply (one memory round trip), then each lane's partial dots are
// summed over the warp.
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

template <int J, class T>
__global__ void __launch_bounds__(kWarps * 32)
    k_row_gemv(T* __restrict__ d, const T* c, const __nv_bfloat16* __restrict__ x,
               const __nv_bfloat16* __restrict__ W, int64_t ldw, int K, int N, float alpha, float beta) {
    const int lane = threadIdx.x & 31;
    const int row0 = (int(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
    if (row0 >= N) return;
    uint4 w[kRows][J], xv[J];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int col = 8 * (lane + 32 * j);
            w[r][j] = row0 + r < N && col < K
                          ? __ldg(reinterpret_cast<const uint4*>(W + int64_t(row0 + r) * ldw + col))
                          : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const int col = 8 * (lane + 32 * j);
        xv[j] = col < K ? *reinterpret_cast<const uint4*>(x + col) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < J; ++j) add_products(acc, w[r][j], xv[j]);
        acc = detail::warp_sum(acc);
        const int row = row0 + r;
        if (lane == 0 && row < N) {
            float y = alpha * acc;
            if (beta != 0.f) y += beta * detail::to_f(c[row]);  // c[row] read before d[row] (d may be c)
            if constexpr (std::is_same_v<T, float>)
                d[row] = y;
            else
                d[row] = __float2bfloat16_rn(y);
        }
    }
}

template <class T>
void launch(cudaStream_t stream, int64_t N, int64_t K, float alpha, const __nv_bfloat16* x,
            const __nv_bfloat16* W, int64_t ldw, float beta, const T* c, T* d) {
    const unsigned grid = unsigned((N + kWarps * kRows - 1) / (kWarps * kRows));
    const int chunks = int((K + 255) / 256);
    // J = the chunk count rounded up to an instantiated one (lanes past K load zeros)
#define ROW_GEMV(J) \
    k_row_gemv<J, T><<<grid, kWarps * 32, 0, stream>>>(d, c, x, W, ldw, int(K), int(N), alpha, beta)
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

bool enabled() {
    static const bool on = [] {
        const char* e = std::getenv("HYDRA_ROW_GEMV");
        return !(e && std::strcmp(e, "0") == 0);
    }();
    return on;
}

}  // namespace

bool row_gemv_applies(bool trans_a, bool trans_b, int64_t M, int64_t K, int64_t batch, const void* x,
                      const void* W, int64_t ldw) {
    return enabled() && M == 1 && batch == 1 && !trans_a && trans_b && K > 0 && K % 8 == 0 &&
           K <= kRowGemvMaxK && ldw % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
           reinterpret_cast<uintptr_t>(W) % 16 == 0;
}

void row_gemv(cudaStream_t stream, int64_t N, int64_t K, float alpha, const __nv_bfloat16* x,
              const __nv_bfloat16* W, int64_t ldw, float beta, const void* C, void* D, cudaDataType_t type) {
    HYDRA_ASSERT(N >= 0 && N < (int64_t(1) << 31) && K % 8 == 0 && K <= kRowGemvMaxK, "row_gemv: N {} K {}",
                 N, K);
    if (N == 0) return;
    if (type == CUDA_R_32F)
        launch(stream, N, K, alpha, x, W, ldw, beta, static_cast<const float*>(C), static_cast<float*>(D));
    else
        launch(stream, N, K, alpha, x, W, ldw, beta, static_cast<const __nv_bfloat16*>(C),
               static_cast<__nv_bfloat16*>(D));
}

}  // namespace hydra::cuda
