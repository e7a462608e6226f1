// The device code both decode-attention kernels share (gpu/decode_attention.cu over one contiguous cache,
// gpu/paged_decode_attention.cu over pooled blocks): a block's split of one head's keys, and the merge of a
// head's splits. Included by .cu files only.
//
// Split (kDecodeWarps warps): a key's row is read by R = D / 8 lanes, 16 bytes (8 bf16) each, so one warp
// load instruction reads KPW = 32 / R keys' rows; the block's lane groups of R lanes each take
// kKeysPerGroup keys a step, K and V rows all loaded before any arithmetic (a step of kDecodeWarps x KPW x
// kKeysPerGroup keys costs one memory round trip). fp32 scores (sums over the R lanes), online softmax with
// base-2 exponentials (running max m, sum l, output acc) per lane group, the groups merged in shared memory;
// the block writes (m, l, -, -, acc[D]) (decode_partial_floats). Merge, by the head's last block to finish:
// o = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M), M = max_s m_s.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "gpu/decode_splits.h"

namespace hydra::gpu::decode_core {

constexpr int kDecodeWarps = 4;
constexpr int kKeysPerGroup = 4;
constexpr float kLog2e = 1.4426950408889634f;

// Keys a block's step covers at head dim D: kDecodeWarps warps x (32 / (D / 8)) lane groups x kKeysPerGroup.
template <int D>
constexpr int decode_step_keys() {
    return kDecodeWarps * (32 / (D / 8)) * kKeysPerGroup;
}
static_assert(kMinKeysPerSplit % decode_step_keys<64>() == 0 &&
                  kMinKeysPerSplit % decode_step_keys<128>() == 0,
              "a split is whole steps");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// 8 bf16 (16 bytes) as floats.
__device__ __forceinline__ void to_floats8(float (&x)[8], uint4 r) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[i]));
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

// The split [j0, j1) of one head's keys: q_head (D) bf16; key j's row (D values of the head's KV group) at
// k + row_of(j), v + row_of(j), 16-byte aligned; keys in [hide_lo, hide_hi) are masked (a sliding window;
// empty: none). Writes out[0] = m, out[1] = l, out[4 + d] = acc[d]. Every thread of the block calls it.
template <int D, class RowOf>
__device__ __forceinline__ void split_partial(float* __restrict__ out,
                                              const __nv_bfloat16* __restrict__ q_head,
                                              const __nv_bfloat16* __restrict__ k,
                                              const __nv_bfloat16* __restrict__ v, RowOf row_of, int j0,
                                              int j1, int hide_lo, int hide_hi, float scale2) {
    constexpr int R = D / 8, KPW = 32 / R, NG = kDecodeWarps * KPW, U = kKeysPerGroup, STEP = NG * U;
    const int lane = threadIdx.x & 31, sub = lane % R;
    const int grp = (threadIdx.x >> 5) * KPW + lane / R;  // lane group: keys grp, grp + NG, ... of a step
    float qv[8];
    to_floats8(qv, __ldg(reinterpret_cast<const uint4*>(q_head) + sub));
#pragma unroll
    for (int e = 0; e < 8; ++e) qv[e] *= scale2;
    float m = -INFINITY, l = 0.f, acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.f;
    for (int j = j0; j < j1; j += STEP) {
        uint4 kr[U], vr[U];
        bool live[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int key = j + u * NG + grp;
            live[u] = key < j1 && (key < hide_lo || key >= hide_hi);  // the same for the R lanes of a group
            if (live[u]) {
                const size_t r = row_of(key) + size_t(sub * 8);
                kr[u] = __ldg(reinterpret_cast<const uint4*>(k + r));
                vr[u] = __ldg(reinterpret_cast<const uint4*>(v + r));
            }
        }
        float s[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float d = 0.f;
            if (live[u]) {
                float kx[8];
                to_floats8(kx, kr[u]);
#pragma unroll
                for (int e = 0; e < 8; ++e) d += qv[e] * kx[e];
            }
            // every lane of the warp shuffles (the groups' live masks differ); xor pairs add commutatively,
            // so the R lanes of a group end with the same bits
#pragma unroll
            for (int o = 1; o < R; o <<= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
            s[u] = live[u] ? d : -INFINITY;
        }
        float mn = m;
#pragma unroll
        for (int u = 0; u < U; ++u) mn = fmaxf(mn, s[u]);
        if (mn == -INFINITY) continue;     // every key of this group's step masked: nothing to add
        const float corr = exp2f(m - mn);  // m = -inf on the first pass: 0
        l *= corr;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] *= corr;
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (live[u]) {
                const float p = exp2f(s[u] - mn);
                float vx[8];
                to_floats8(vx, vr[u]);
                l += p;
#pragma unroll
                for (int e = 0; e < 8; ++e) acc[e] += p * vx[e];
            }
        m = mn;
    }
    __shared__ float sm[NG], sl[NG];
    __shared__ __align__(16) float sacc[NG][D];
    if (sub == 0) sm[grp] = m, sl[grp] = l;
#pragma unroll
    for (int e = 0; e < 8; ++e) sacc[grp][sub * 8 + e] = acc[e];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int g = 0; g < NG; ++g) M = fmaxf(M, sm[g]);
    for (int d = threadIdx.x; d < D; d += kDecodeWarps * 32) {
        float a = 0.f;
#pragma unroll
        for (int g = 0; g < NG; ++g)
            if (sm[g] != -INFINITY) a += sacc[g][d] * exp2f(sm[g] - M);
        out[4 + d] = a;
    }
    if (threadIdx.x == 0) {
        float lt = 0.f;
#pragma unroll
        for (int g = 0; g < NG; ++g)
            if (sm[g] != -INFINITY) lt += sl[g] * exp2f(sm[g] - M);
        out[0] = M;
        out[1] = lt;
    }
}

// After its split: the block that finishes a head last merges the head's partials, so no second kernel runs.
// Every thread fences its partial writes, thread 0 counts the block in (counter: zero before the first
// launch; the last block sets it back to zero for the next one), and the last block fences again before
// reading what the others wrote. The merge reads the partials in split order whichever block is last:
// deterministic.
__device__ __forceinline__ bool last_split_of_head(int* counter, int nsplit) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1) == nsplit - 1;
        if (last) *counter = 0;  // every other split of the head has counted itself in
    }
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// One head's output from its nsplit <= kMaxDecodeSplits partials p (nsplit x decode_partial_floats(D),
// written by other blocks of this launch: read through L2), by the block's kDecodeWarps x 32 threads. Why in
// three passes instead of one online fold: the fold's running max makes every split wait for the one before
// it, so a head of 256 splits cost ~100 dependent L2 round trips; here each pass issues its loads all at
// once.
//  1. every split's m and l (a thread per split): the head's max M, the weights w_s = 2^(m_s - M) (shared),
//     l = sum_s w_s l_s (a fixed tree);
//  2. acc: R = D / 4 threads take a split's row as float4s, the G = threads / R groups take the splits
//     g, g + G, ... in order;
//  3. group 0's threads add the groups in order and write o = acc / l.
// Every sum has a fixed order whichever block merges: deterministic.
template <int D>
__device__ __forceinline__ void merge_partials(__nv_bfloat16* __restrict__ o, const float* p, int nsplit) {
    constexpr int kThreads = kDecodeWarps * 32, P = int(decode_partial_floats(D));
    constexpr int kPerThread = int(kMaxDecodeSplits + kThreads - 1) / kThreads;
    constexpr int R = D / 4, G = kThreads / R;
    static_assert(kThreads % R == 0 && P % 4 == 0, "a split's acc is whole float4s");
    __shared__ float w[kMaxDecodeSplits], wmax[kDecodeWarps], wsum[kDecodeWarps];
    __shared__ float4 ga[G][R];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    float ms[kPerThread], ls[kPerThread], mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
        const int s = t + i * kThreads;
        ms[i] = s < nsplit ? __ldcg(p + size_t(s) * P) : -INFINITY;
        ls[i] = s < nsplit ? __ldcg(p + size_t(s) * P + 1) : 0.f;
        mx = fmaxf(mx, ms[i]);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) wmax[warp] = mx;
    __syncthreads();
    float M = wmax[0];
#pragma unroll
    for (int i = 1; i < kDecodeWarps; ++i) M = fmaxf(M, wmax[i]);
    float lsum = 0.f;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
        const int s = t + i * kThreads;
        if (s < nsplit) {
            const float ws = ms[i] == -INFINITY ? 0.f : exp2f(ms[i] - M);  // a split with every key masked: 0
            w[s] = ws;
            lsum += ls[i] * ws;
        }
    }
    lsum = warp_sum(lsum);
    if (lane == 0) wsum[warp] = lsum;
    __syncthreads();
    const int r = t % R, g = t / R;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
    for (int s = g; s < nsplit; s += G) {
        const float4 x = __ldcg(reinterpret_cast<const float4*>(p + size_t(s) * P + 4) + r);
        const float ws = w[s];
        a.x += ws * x.x, a.y += ws * x.y, a.z += ws * x.z, a.w += ws * x.w;
    }
    ga[g][r] = a;
    __syncthreads();
    if (g != 0) return;
    float lt = wsum[0];
#pragma unroll
    for (int i = 1; i < kDecodeWarps; ++i) lt += wsum[i];
#pragma unroll
    for (int i = 1; i < G; ++i) {
        const float4 x = ga[i][r];
        a.x += x.x, a.y += x.y, a.z += x.z, a.w += x.w;
    }
    __nv_bfloat16* out = o + 4 * r;
    out[0] = __float2bfloat16_rn(a.x / lt);
    out[1] = __float2bfloat16_rn(a.y / lt);
    out[2] = __float2bfloat16_rn(a.z / lt);
    out[3] = __float2bfloat16_rn(a.w / lt);
}

// The workspace: kCounterSlots int32 counters first, at the same place whatever the launch's head count (the
// layers of a hybrid differ in FA heads and share one workspace), then the splits' partials.
constexpr int64_t kCounterSlots = 16384;

}  // namespace hydra::gpu::decode_core
