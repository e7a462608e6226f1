// Split-key decode attention (see decode_attention.h). Kernel 1: grid (splits, n_q), 4 warps; a warp
// walks its share of the split's keys four at a time (lane l holds dims [l*E, l*E+E), E = D/32), keeps
// an online softmax (max m, sum s, output acc) in registers; the warps merge in shared memory and the
// block writes (m, s, acc[D]) for its split. Kernel 2: one block of D threads per head merges the
// splits: o = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M).
#include "gpu/decode_attention.h"

#include <cmath>

#include "core/error.h"
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

// E consecutive bf16 of a row, as floats.
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
    decode_attn_split_kernel(float* __restrict__ partials, const __nv_bfloat16* __restrict__ q,
                             const __nv_bfloat16* __restrict__ k, const __nv_bfloat16* __restrict__ v,
                             const int32_t* __restrict__ kv_index, int n_kv, int L,
                             const int32_t* __restrict__ kv_len, float scale2,
                             const int32_t* __restrict__ window, int sinks) {
    constexpr int E = D / 32, U = 4;
    const int split = blockIdx.x, h = blockIdx.y;
    int nsplit = gridDim.x;
    if (kv_len) {  // graph form: L from device memory, the grid sized for the largest L (spare blocks exit)
        L = *kv_len;
        nsplit = (L + int(kKeysPerSplit) - 1) / int(kKeysPerSplit);
        if (split >= nsplit) return;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int kvh = kv_index[h];
    float qv[E];
    load_row<E>(qv, q + size_t(h) * D + lane * E);
#pragma unroll
    for (int e = 0; e < E; ++e) qv[e] *= scale2;

    const int j0 = split * int(kKeysPerSplit), j1 = min(L, j0 + int(kKeysPerSplit));
    // a sliding window W > 0 hides the keys [sinks, L - W) from the query at position L - 1
    const int W = window ? window[h] : 0;
    const int hide_lo = W > 0 ? sinks : L, hide_hi = W > 0 ? L - W : L;
    float m = -INFINITY, l = 0.f, acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
    const size_t row = size_t(n_kv) * D;
    const __nv_bfloat16* kb = k + size_t(kvh) * D + lane * E;
    const __nv_bfloat16* vb = v + size_t(kvh) * D + lane * E;
    for (int j = j0 + warp * U; j < j1; j += kWarps * U) {
        float s[U];
        float kx[U][E];
        bool live[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            live[u] = j + u < j1 && (j + u < hide_lo || j + u >= hide_hi);  // the same for the whole warp
            if (live[u]) load_row<E>(kx[u], kb + size_t(j + u) * row);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float d = 0.f;
            if (live[u]) {
#pragma unroll
                for (int e = 0; e < E; ++e) d += qv[e] * kx[u][e];
            }
            s[u] = live[u] ? warp_sum(d) : -INFINITY;
        }
        float mn = m;
#pragma unroll
        for (int u = 0; u < U; ++u) mn = fmaxf(mn, s[u]);
        if (mn == -INFINITY) continue;     // every key of this step hidden by a window: nothing to add
        const float corr = exp2f(m - mn);  // m = -inf on the first pass: 0
        l *= corr;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] *= corr;
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (live[u]) {
                const float p = exp2f(s[u] - mn);
                float vx[E];
                load_row<E>(vx, vb + size_t(j + u) * row);
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
    float* out = partials + (size_t(h) * nsplit + split) * (D + 2);
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
__global__ void __launch_bounds__(D) decode_attn_merge_kernel(__nv_bfloat16* __restrict__ o,
                                                              const float* __restrict__ partials, int nsplit,
                                                              const int32_t* __restrict__ kv_len) {
    const int h = blockIdx.x, d = threadIdx.x;
    if (kv_len) nsplit = (*kv_len + int(kKeysPerSplit) - 1) / int(kKeysPerSplit);
    const float* p = partials + size_t(h) * nsplit * (D + 2);
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
    o[size_t(h) * D + d] = __float2bfloat16_rn(a / l);
}

// Both forms: grid (splits, n_q) of the split kernel, then the merge; kv_len null = L by value.
void launch(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
            const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D, int64_t L, const int32_t* kv_len,
            int64_t splits, float scale, float* partials, cudaStream_t stream, const DecodeWindows& win) {
    const dim3 grid{unsigned(splits), unsigned(n_q)};
    const float s2 = scale * kLog2e;
    if (D == 64) {
        decode_attn_split_kernel<64><<<grid, kWarps * 32, 0, stream>>>(
            partials, q, k, v, kv_index, int(n_kv), int(L), kv_len, s2, win.window, int(win.sinks));
        CUDA_CHECK(cudaGetLastError());
        decode_attn_merge_kernel<64><<<unsigned(n_q), 64, 0, stream>>>(o, partials, int(splits), kv_len);
    } else {
        decode_attn_split_kernel<128><<<grid, kWarps * 32, 0, stream>>>(
            partials, q, k, v, kv_index, int(n_kv), int(L), kv_len, s2, win.window, int(win.sinks));
        CUDA_CHECK(cudaGetLastError());
        decode_attn_merge_kernel<128><<<unsigned(n_q), 128, 0, stream>>>(o, partials, int(splits), kv_len);
    }
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

int64_t decode_attention_splits(int64_t L) { return (L + kKeysPerSplit - 1) / kKeysPerSplit; }

size_t decode_attention_workspace_floats(int64_t n_q, int64_t D, int64_t L) {
    return size_t(n_q) * size_t(decode_attention_splits(L)) * size_t(D + 2);
}

void decode_attention(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                      const __nv_bfloat16* v, const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D,
                      int64_t L, float scale, float* partials, cudaStream_t stream,
                      const DecodeWindows& windows) {
    HYDRA_ASSERT(D == 64 || D == 128, "decode_attention: head dim {} (64 or 128)", D);
    HYDRA_ASSERT(n_q > 0 && n_kv > 0 && L > 0 && L < (int64_t(1) << 31), "decode_attention: n_q {} n_kv {} L {}",
                 n_q, n_kv, L);
    HYDRA_ASSERT(kv_index != nullptr, "decode_attention: kv_index is required");
    launch(o, q, k, v, kv_index, n_q, n_kv, D, L, nullptr, decode_attention_splits(L), scale, partials,
           stream, windows);
}

void decode_attention_dev(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                          const __nv_bfloat16* v, const int32_t* kv_index, int64_t n_q, int64_t n_kv,
                          int64_t D, const int32_t* kv_len, int64_t max_splits, float scale, float* partials,
                          cudaStream_t stream, const DecodeWindows& windows) {
    HYDRA_ASSERT(D == 64 || D == 128, "decode_attention_dev: head dim {} (64 or 128)", D);
    HYDRA_ASSERT(n_q > 0 && n_kv > 0 && max_splits > 0 && max_splits * kKeysPerSplit < (int64_t(1) << 31),
                 "decode_attention_dev: n_q {} n_kv {} max_splits {}", n_q, n_kv, max_splits);
    HYDRA_ASSERT(kv_index != nullptr && kv_len != nullptr, "decode_attention_dev: kv_index and kv_len are required");
    launch(o, q, k, v, kv_index, n_q, n_kv, D, 0, kv_len, max_splits, scale, partials, stream, windows);
}

}  // namespace hydra::gpu
