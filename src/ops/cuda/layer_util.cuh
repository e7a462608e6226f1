// Internal helpers of the element-wise / normalisation CUDA ops (rmsnorm.cu, fusion.cu, ...): warp sums,
// bf16/fp32 load-store, launch sizes, stream-ordered scratch, and the deterministic parameter-gradient
// reduction they share. Not a public API.
//
// Deterministic parameter gradients: the N token rows are cut into parts of rows_per_part(N) rows (a
// function of N only, never of the device); each part writes its column sums into its own row of a
// partials (nparts, C) fp32 scratch; accumulate_partials then adds the parts in order to dst (C) (+=).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "ops/cuda/cuda_check.h"

// Argument check without fmt (whose consteval format strings nvcc rejects in C++20 mode): throws
// hydra::Error(msg) when cond is false.
#define HYDRA_CUDA_REQUIRE(cond, msg)                                  \
    do {                                                               \
        if (!(cond)) throw ::hydra::Error(std::string(msg));           \
    } while (0)

// Template dispatch on a small runtime count: CALL(1) .. CALL(8) for n in 1..8; any other n throws
// hydra::Error("<what> <n> outside 1..8").
// clang-format off
#define HYDRA_DISPATCH_1_TO_8(n, CALL, what)                                                  \
    switch (n) {                                                                              \
        case 1: CALL(1); break;                                                               \
        case 2: CALL(2); break;                                                               \
        case 3: CALL(3); break;                                                               \
        case 4: CALL(4); break;                                                               \
        case 5: CALL(5); break;                                                               \
        case 6: CALL(6); break;                                                               \
        case 7: CALL(7); break;                                                               \
        case 8: CALL(8); break;                                                               \
        default: HYDRA_CUDA_REQUIRE(false, std::string(what) + " " + std::to_string(n) + " outside 1..8"); \
    }
// clang-format on

namespace hydra::cuda::detail {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// The GDN gates (gdn_gates.h), shared by their own kernel and the decode step that computes them in place:
// g = -exp(A_log) softplus(a + dt_bias) (softplus(x) = x above 20, as fla), beta = s sigmoid(b).
constexpr float kSoftplusThreshold = 20.f;
__device__ __forceinline__ float softplus_(float x) {
    return x > kSoftplusThreshold ? x : log1pf(expf(x));
}
__device__ __forceinline__ float gdn_log_decay(float a, float A_log, float dt_bias) {
    return -expf(A_log) * softplus_(a + dt_bias);
}

// Blocks of `threads` covering `n` work items, capped (grid-stride loops cover the rest).
inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535LL * 16) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > cap) b = cap;
    return unsigned(b);
}

// Token-row partition of the deterministic reductions (at most kMaxParts parts).
constexpr int64_t kMaxParts = 4096;  // 4 rows per part at 8 x 2048 tokens: enough warps to fill an H200
inline int64_t rows_per_part(int64_t N) { return N <= 0 ? 1 : (N + kMaxParts - 1) / kMaxParts; }
inline int64_t num_parts(int64_t N) { return N <= 0 ? 0 : (N + rows_per_part(N) - 1) / rows_per_part(N); }

// dst[c] += sum_{p < nparts} partials[p * ld + c] for c < C, summed in part order (in double).
// Defined in elementwise.cu.
void accumulate_partials(float* dst, const float* partials, int64_t nparts, int64_t C, int64_t ld,
                         cudaStream_t stream);

// Stream-ordered fp32 scratch (cudaMallocAsync / cudaFreeAsync on the op's stream).
class Scratch {
public:
    Scratch(size_t floats, cudaStream_t stream) : stream_(stream) {
        if (floats) CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), floats * sizeof(float), stream));
    }
    ~Scratch() {
        if (p_) (void)cudaFreeAsync(p_, stream_);
    }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    float* get() const { return p_; }
    void release() {  // checked free on the normal path
        if (p_) CUDA_CHECK(cudaFreeAsync(p_, stream_));
        p_ = nullptr;
    }

private:
    float* p_ = nullptr;
    cudaStream_t stream_;
};

}  // namespace hydra::cuda::detail
