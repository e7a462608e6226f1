// Paged split-key decode attention (see paged_decode_attention.h). Kernel 1: grid (splits, n_q, B), 4 warps,
// the per-split body of decode_attention.cu's kernel with each key's row found through the block table;
// kernel 2: grid (n_q, B), D threads, the same merge over the row's own number of splits.
#include "gpu/paged_decode_attention.h"

#include <cmath>

#include "core/error.h"
#include "gpu/decode_attention.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

constexpr int kWarps = 4;
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int E>
__device__ __forceinline__ void load_row(float (&x)[E], const __nv_bfloat16* p) {
    if constexpr (E == 2) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
        x[0] = f.x, x[1] = f.y;
    } else {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
        const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
        x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
    }
}

template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    paged_split_kernel(float* __restrict__ partials, const __nv_bfloat16* __restrict__ q, int64_t ldq,
                       const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                       const int32_t* __restrict__ table, int max_blocks, int bs,
                       const int32_t* __restrict__ kv_index, int n_kv, const int32_t* __restrict__ pos,
                       const int32_t* __restrict__ slots, float scale2) {
    constexpr int E = D / 32, U = 4;
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z, n_q = gridDim.y, max_splits = gridDim.x;
    const int L = pos[b] + 1;
    const int nsplit = (L + int(kKeysPerSplit) - 1) / int(kKeysPerSplit);
    if (split >= nsplit) return;
    const int32_t* tb = table + int64_t(slots[b]) * max_blocks;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kvh = kv_index[h];
    float qv[E];
    load_row<E>(qv, q + int64_t(b) * ldq + size_t(h) * D + lane * E);
#pragma unroll
    for (int e = 0; e < E; ++e) qv[e] *= scale2;

    const int j0 = split * int(kKeysPerSplit), j1 = min(L, j0 + int(kKeysPerSplit));
    float m = -INFINITY, l = 0.f, acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
    const size_t row = size_t(n_kv) * D;
    const size_t off = size_t(kvh) * D + lane * E;
    // key j's row in the pool: block tb[j / bs], offset j % bs
    auto key_row = [&](int j) { return (size_t(tb[j / bs]) * size_t(bs) + size_t(j % bs)) * row + off; };
    for (int j = j0 + warp * U; j < j1; j += kWarps * U) {
        float s[U];
        float kx[U][E];
        size_t r[U];
#pragma unroll
        for (int u = 0; u < U; ++u) r[u] = j + u < j1 ? key_row(j + u) : 0;
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (j + u < j1) load_row<E>(kx[u], k + r[u]);
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float d = 0.f;
#pragma unroll
            for (int e = 0; e < E; ++e) d += qv[e] * kx[u][e];
            s[u] = j + u < j1 ? warp_sum(d) : -INFINITY;
        }
        float mn = m;
#pragma unroll
        for (int u = 0; u < U; ++u) mn = fmaxf(mn, s[u]);
        const float corr = exp2f(m - mn);
        l *= corr;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] *= corr;
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (j + u < j1) {
                const float p = exp2f(s[u] - mn);
                float vx[E];
                load_row<E>(vx, v + r[u]);
                l += p;
#pragma unroll
                for (int e = 0; e < E; ++e) acc[e] += p * vx[e];
            }
        m = mn;
    }
    __shared__ float sm[kWarps], sl[kWarps], sacc[kWarps][D];
    if (lane == 0) sm[warp] = m, sl[warp] = l;
#pragma unroll
    for (int e = 0; e < E; ++e) sacc[warp][lane * E + e] = acc[e];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
    float* out = partials + ((size_t(b) * n_q + h) * max_splits + split) * (D + 2);
    for (int d = threadIdx.x; d < D; d += kWarps * 32) {
        float a = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
            if (sm[w] != -INFINITY) a += sacc[w][d] * exp2f(sm[w] - M);
        out[2 + d] = a;
    }
    if (threadIdx.x == 0) {
        float lt = 0.f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
            if (sm[w] != -INFINITY) lt += sl[w] * exp2f(sm[w] - M);
        out[0] = M;
        out[1] = lt;
    }
}

template <int D>
__global__ void __launch_bounds__(D)
    paged_merge_kernel(__nv_bfloat16* __restrict__ o, int64_t ldo, const float* __restrict__ partials,
                       int max_splits, const int32_t* __restrict__ pos) {
    const int h = blockIdx.x, b = blockIdx.y, n_q = gridDim.x, d = threadIdx.x;
    const int nsplit = (pos[b] + 1 + int(kKeysPerSplit) - 1) / int(kKeysPerSplit);
    const float* p = partials + (size_t(b) * n_q + h) * max_splits * (D + 2);
    float M = -INFINITY;
    for (int s = 0; s < nsplit; ++s) M = fmaxf(M, p[size_t(s) * (D + 2)]);
    float l = 0.f, a = 0.f;
    for (int s = 0; s < nsplit; ++s) {
        const float* ps = p + size_t(s) * (D + 2);
        if (ps[0] == -INFINITY) continue;
        const float f = exp2f(ps[0] - M);
        l += ps[1] * f;
        a += ps[2 + d] * f;
    }
    o[int64_t(b) * ldo + size_t(h) * D + d] = __float2bfloat16_rn(a / l);
}

}  // namespace

size_t paged_decode_attention_workspace_floats(int64_t B, int64_t n_q, int64_t D, int64_t max_splits) {
    return size_t(B) * size_t(n_q) * size_t(max_splits) * size_t(D + 2);
}

void paged_decode_attention(__nv_bfloat16* o, int64_t ldo, const __nv_bfloat16* q, int64_t ldq,
                            const PagedKv& kv, const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D,
                            int64_t B, const int32_t* pos, const int32_t* slots, int64_t max_splits,
                            float scale, float* partials, cudaStream_t stream) {
    HYDRA_ASSERT(D == 64 || D == 128, "paged_decode_attention: head dim {} (64 or 128)", D);
    HYDRA_ASSERT(n_q > 0 && n_kv > 0 && B > 0 && B <= 65535 && n_q <= 65535 && max_splits > 0 &&
                     max_splits * kKeysPerSplit < (int64_t(1) << 31),
                 "paged_decode_attention: n_q {} n_kv {} B {} max_splits {}", n_q, n_kv, B, max_splits);
    HYDRA_ASSERT(
        kv.k_pool && kv.v_pool && kv.block_table && kv.block_size > 0 && kv.max_blocks > 0 && kv_index &&
            pos && slots && partials,
        "paged_decode_attention: pools, block table, kv_index, pos, slots and partials are required");
    HYDRA_ASSERT(ldq >= n_q * D && ldo >= n_q * D && ldq % 4 == 0, "paged_decode_attention: ldq {} ldo {}",
                 ldq, ldo);
    const dim3 grid{unsigned(max_splits), unsigned(n_q), unsigned(B)};
    const float s2 = scale * kLog2e;
    const int mb = int(kv.max_blocks), bs = int(kv.block_size);
    if (D == 64) {
        paged_split_kernel<64><<<grid, kWarps * 32, 0, stream>>>(partials, q, ldq, kv.k_pool, kv.v_pool,
                                                                 kv.block_table, mb, bs, kv_index, int(n_kv),
                                                                 pos, slots, s2);
        CUDA_CHECK(cudaGetLastError());
        paged_merge_kernel<64>
            <<<dim3(unsigned(n_q), unsigned(B)), 64, 0, stream>>>(o, ldo, partials, int(max_splits), pos);
    } else {
        paged_split_kernel<128><<<grid, kWarps * 32, 0, stream>>>(partials, q, ldq, kv.k_pool, kv.v_pool,
                                                                  kv.block_table, mb, bs, kv_index, int(n_kv),
                                                                  pos, slots, s2);
        CUDA_CHECK(cudaGetLastError());
        paged_merge_kernel<128>
            <<<dim3(unsigned(n_q), unsigned(B)), 128, 0, stream>>>(o, ldo, partials, int(max_splits), pos);
    }
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::gpu
