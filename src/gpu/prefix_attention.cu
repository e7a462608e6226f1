// Shared-prefix attention of independent single-token rows (see prefix_attention.h).
#include "gpu/prefix_attention.h"

#include <cfloat>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

constexpr int kThreads = 256;

// Block-wide reduction of (value, index): the larger value, ties to the smaller index.
__device__ void block_argmax(float& v, int& idx, float* sv, int* si) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sv[warp] = v, si[warp] = idx;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kThreads / 32; ++w)
            if (sv[w] > sv[0] || (sv[w] == sv[0] && si[w] < si[0])) sv[0] = sv[w], si[0] = si[w];
    }
    __syncthreads();
    v = sv[0], idx = si[0];
    __syncthreads();
}

__device__ float block_sum(float v, float* sv) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sv[warp] = v;
    __syncthreads();
    float s = 0;
    for (int w = 0; w < kThreads / 32; ++w) s += sv[w];  // the same order in every thread
    __syncthreads();
    return s;
}

// grid n * n_fa, kThreads threads; shared memory: P + 1 scores, then (kThreads / D) * D partial outputs.
template <int D>
__global__ void __launch_bounds__(kThreads)
    prefix_attention_kernel(__nv_bfloat16* __restrict__ out, int32_t* __restrict__ top,
                            const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_own,
                            const __nv_bfloat16* __restrict__ v_own, const __nv_bfloat16* __restrict__ pk,
                            const __nv_bfloat16* __restrict__ pv, const int32_t* __restrict__ kv_index, int P,
                            int n_fa, int n_kv, float scale) {
    extern __shared__ float smem[];
    float* score = smem;                      // (P + 1)
    float* part = smem + ((P + 1 + 3) & ~3);  // (kThreads / D, D)
    __shared__ float sv[kThreads / 32];
    __shared__ int si[kThreads / 32];
    const int row = blockIdx.x / n_fa, h = blockIdx.x % n_fa;
    const int g = kv_index[h];
    const size_t kvw = size_t(n_kv) * D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    constexpr int kPer = D / 32;  // elements per lane of a dot product
    float qv[kPer];
    const __nv_bfloat16* qr = q + (size_t(row) * n_fa + h) * D;
#pragma unroll
    for (int i = 0; i < kPer; ++i) qv[i] = __bfloat162float(qr[lane * kPer + i]);
    const __nv_bfloat16* kown = k_own + (size_t(row) * n_kv + g) * D;
    const __nv_bfloat16* vown = v_own + (size_t(row) * n_kv + g) * D;
    // scores: one warp per key
    for (int j = warp; j <= P; j += kThreads / 32) {
        const __nv_bfloat16* kr = j < P ? pk + size_t(j) * kvw + size_t(g) * D : kown;
        float s = 0;
#pragma unroll
        for (int i = 0; i < kPer; ++i) s += qv[i] * __bfloat162float(kr[lane * kPer + i]);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) score[j] = s * scale;
    }
    __syncthreads();
    float m = -FLT_MAX;
    int am = P + 1;
    for (int j = threadIdx.x; j <= P; j += kThreads)
        if (score[j] > m) m = score[j], am = j;
    block_argmax(m, am, sv, si);
    if (top && threadIdx.x == 0) top[size_t(row) * n_fa + h] = am;
    float sum = 0;
    for (int j = threadIdx.x; j <= P; j += kThreads) {
        const float e = expf(score[j] - m);
        score[j] = e;
        sum += e;
    }
    sum = block_sum(sum, sv);  // synchronises: every probability is in shared memory
    // output: thread = (slice, d); slice s sums keys s, s + S, ...
    constexpr int S = kThreads / D;
    const int d = threadIdx.x % D, sl = threadIdx.x / D;
    float acc = 0;
    for (int j = sl; j <= P; j += S) {
        const __nv_bfloat16* vr = j < P ? pv + size_t(j) * kvw + size_t(g) * D : vown;
        acc += score[j] * __bfloat162float(vr[d]);
    }
    part[sl * D + d] = acc;
    __syncthreads();
    if (sl == 0) {
        float o = 0;
        for (int s = 0; s < S; ++s) o += part[s * D + d];
        out[(size_t(row) * n_fa + h) * D + d] = __float2bfloat16(o / sum);
    }
}

template <int D>
void launch(__nv_bfloat16* out, int32_t* top, const __nv_bfloat16* q, const __nv_bfloat16* k_own,
            const __nv_bfloat16* v_own, const __nv_bfloat16* pk, const __nv_bfloat16* pv,
            const int32_t* kv_index, int64_t n, int64_t P, int64_t n_fa, int64_t n_kv, float scale,
            cudaStream_t stream) {
    const size_t bytes = (size_t((P + 1 + 3) & ~int64_t(3)) + size_t(kThreads)) * sizeof(float);
    static size_t allowed = 48 << 10;  // the default dynamic shared memory limit
    if (bytes > allowed) {
        int dev = 0, max_optin = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&max_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        HYDRA_CHECK(bytes + 2 * kThreads <= size_t(max_optin),
                    "GPU prefix attention: {} positions need {} KiB of shared memory, the device has {} KiB",
                    P + 1, bytes >> 10, max_optin >> 10);
        CUDA_CHECK(cudaFuncSetAttribute(prefix_attention_kernel<D>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
        allowed = bytes;
    }
    prefix_attention_kernel<D><<<unsigned(n * n_fa), kThreads, bytes, stream>>>(
        out, top, q, k_own, v_own, pk, pv, kv_index, int(P), int(n_fa), int(n_kv), scale);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void prefix_attention(__nv_bfloat16* out, int32_t* top, const __nv_bfloat16* q, const __nv_bfloat16* k_own,
                      const __nv_bfloat16* v_own, const __nv_bfloat16* prefix_k,
                      const __nv_bfloat16* prefix_v, const int32_t* kv_index, int64_t n, int64_t P,
                      int64_t n_fa, int64_t n_kv, int64_t Dh, float scale, cudaStream_t stream) {
    HYDRA_ASSERT(P >= 0 && n >= 0 && n_fa > 0 && n_kv > 0, "prefix attention: bad shape");
    HYDRA_CHECK(P < (int64_t(1) << 30), "GPU prefix attention: {} prefix positions", P);
    if (n == 0) return;
    if (Dh == 64)
        launch<64>(out, top, q, k_own, v_own, prefix_k, prefix_v, kv_index, n, P, n_fa, n_kv, scale, stream);
    else if (Dh == 128)
        launch<128>(out, top, q, k_own, v_own, prefix_k, prefix_v, kv_index, n, P, n_fa, n_kv, scale, stream);
    else
        fail("GPU prefix attention: head dim {} (64 or 128)", Dh);
}

}  // namespace hydra::gpu
