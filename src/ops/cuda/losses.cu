// Vocabulary-chunked LM-head losses (CE, tau^2 KL) and MSE on the GPU (see losses.h). Per row block:
// pass 1 = for each vocabulary chunk one logits GEMM + a per-row statistics kernel (one thread block
// per row); a finalize kernel turns the statistics into log-sum-exps and row losses and adds their
// fixed-order sum to the totals; pass 2 = for each chunk the logits GEMM again (skipped when one chunk
// covers the whole vocabulary: the tile still holds them), an elementwise kernel writing the bf16 logit
// gradient G, and the GEMMs dh += G @ W_c, dW_c += G^T @ h.
//
// The per-row kernels are bound by device memory (a row block's fp32 logits are rb x V x 4 bytes, e.g.
// 2048 x 49152 x 4 = 402 MB, far beyond L2), so each reads a logits row as few times as possible:
// - CE, one chunk holding the whole vocabulary and a row fitting in shared memory (V <= ~58K fp32 on
//   H100/H200): ce_fused_kernel loads each row ONCE into shared memory (16-byte loads; per-thread
//   online max / sum exp on the way, merged in a fixed order), computes the lse and writes G (8-byte
//   stores) in the same launch; then ce_finalize_kernel (row losses, totals) and pass 2's GEMMs.
//   Traffic per row block: one read of z + one write of G (was three reads of z + one write of G).
//   Otherwise (several chunks) ce_stats_kernel / ce_grad_kernel as above.
// - KL: kl_stats_kernel reads zs and zt once per chunk (per-thread online max / rescaled sums, merged
//   in a fixed order), kl_grad_kernel reads them once more with 16-byte loads.
// H200, N 8192, C 576, V 49152, row_block 2048, one chunk: per row block CE stats + grad 354 + 244 us ->
// fused 200 us (loss only 354 -> 122 us), KL stats 555 -> 132 us, KL grad 245 -> 189 us.
// All reductions have a fixed order (no float atomics): results are reproducible run to run.
#include "ops/cuda/losses.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::cuda {

namespace {

constexpr int kThreads = 256;  // per-row kernels: one block of kThreads per row

__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ double warp_sum(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Block-wide reductions (fixed tree: deterministic). `sh` holds >= 32 values; every thread gets the result.
template <typename T, typename Op>
__device__ T block_reduce(T x, T* sh, Op warp_op) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    x = warp_op(x);
    __syncthreads();  // sh may still be read by a previous reduction
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    T y = lane < nw ? sh[lane] : sh[0];  // pad with a real element (idempotent for max; masked below for sum)
    if (warp == 0) {
        y = warp_op(y);
        if (lane == 0) sh[0] = y;
    }
    __syncthreads();
    return sh[0];
}
__device__ float block_max(float x, float* sh) {
    return block_reduce(x, sh, [](float v) { return warp_max(v); });
}
// pad lanes >= nw contribute 0: reduce explicitly instead of the generic padding (float and double rows)
template <typename T>
__device__ T block_sum(T x, T* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    x = warp_sum(x);
    __syncthreads();
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    if (warp == 0) {
        T y = lane < nw ? sh[lane] : T(0);
        y = warp_sum(y);
        if (lane == 0) sh[0] = y;
    }
    __syncthreads();
    return sh[0];
}

// ---- CE ----

// Folds the tile z (nb, nv) (columns [v0, v0 + nv)) into the rows' online LSE; first chunk resets.
__global__ void ce_stats_kernel(const float* __restrict__ z, int nv, int v0, const int32_t* __restrict__ tg,
                                float* s_max, float* s_sum, float* target_logit, bool first) {
    __shared__ float sh[32];
    const int i = blockIdx.x;
    const float* zr = z + size_t(i) * nv;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < nv; j += blockDim.x) m = fmaxf(m, zr[j]);
    m = block_max(m, sh);
    const float m_old = first ? -INFINITY : s_max[i];
    const float m_new = fmaxf(m_old, m);
    float s = 0.0f;
    if (m_new != -INFINITY)
        for (int j = threadIdx.x; j < nv; j += blockDim.x) s += __expf(zr[j] - m_new);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        const float rescale = m_old == -INFINITY ? 0.0f : expf(m_old - m_new);
        s_sum[i] = (first ? 0.0f : s_sum[i] * rescale) + s;
        s_max[i] = m_new;
        const int t = tg[i];
        if (first) target_logit[i] = 0.0f;
        if (t >= v0 && t < v0 + nv) target_logit[i] = zr[t - v0];
    }
}

// Row losses of a finished row block and their fixed-order sum into the totals. One block.
__global__ void ce_finalize_kernel(int nb, int V, const int32_t* __restrict__ tg, const float* s_max,
                                   const float* s_sum, const float* target_logit, float* s_lse,
                                   LossTotals* totals) {
    __shared__ double sh[32];
    double loss = 0, cnt = 0, bad = 0;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) {
        const double lse = double(s_max[i]) + log(double(s_sum[i]));
        s_lse[i] = float(lse);
        const int t = tg[i];
        if (t >= 0 && t < V) {
            loss += lse - double(target_logit[i]);
            cnt += 1;
        } else if (t != -1) {
            bad += 1;
        }
    }
    loss = block_sum(loss, sh);
    cnt = block_sum(cnt, sh);
    bad = block_sum(bad, sh);
    if (threadIdx.x == 0) {
        totals->loss += loss;
        totals->count += (long long)(cnt);
        totals->invalid += (long long)(bad);
    }
}

// G (nb, nv) bf16 = scale * (softmax - onehot) over columns [v0, v0 + nv); 0 on uncounted rows.
__global__ void ce_grad_kernel(const float* __restrict__ z, bf16* __restrict__ G, int nv, int v0, int V,
                               const int32_t* __restrict__ tg, const float* __restrict__ s_lse, float scale) {
    const int i = blockIdx.y;
    const int t = tg[i];
    const bool counted = t >= 0 && t < V;
    const float l = s_lse[i];
    const float* zr = z + size_t(i) * nv;
    bf16* gr = G + size_t(i) * nv;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < nv; j += gridDim.x * blockDim.x) {
        float g = 0.0f;
        if (counted) {
            g = __expf(zr[j] - l) * scale;
            if (j + v0 == t) g -= scale;
        }
        gr[j] = __float2bfloat16(g);
    }
}

// Four bf16 in one 8-byte store (p 8-byte aligned); the lower address holds a.
__device__ __forceinline__ void store_bf16x4(bf16* p, float a, float b, float c, float d) {
    auto bits = [](float x) { return unsigned(__bfloat16_as_ushort(__float2bfloat16(x))); };
    uint2 u;
    u.x = bits(a) | bits(b) << 16;
    u.y = bits(c) | bits(d) << 16;
    *reinterpret_cast<uint2*>(p) = u;
}

// Folds n values (padding: -inf) into a thread's online log-sum-exp state (max m, s = sum exp(v - m)).
// The max moves once per group (the sum is rescaled only when it grows): one exp per element plus at
// most one per group.
template <int n>
__device__ __forceinline__ void lse_fold(const float (&v)[n], float& m, float& s) {
    float g = v[0];
#pragma unroll
    for (int k = 1; k < n; ++k) g = fmaxf(g, v[k]);
    if (g > m) {  // from -inf: expf(-inf) = 0 and the sum is still 0
        s *= expf(m - g);
        m = g;
    }
    if (m != -INFINITY) {
#pragma unroll
        for (int k = 0; k < n; ++k) s += __expf(v[k] - m);
    }
}

// The fused resident-row kernel keeps a whole logits row (up to ~58K fp32 in 227 KB) in shared memory,
// so only one block fits on an SM: 1024 threads (32 warps, the most one block can have) hide the
// latency, and with kCeFusedUnroll 16-byte loads per thread in flight that is 64 KB per SM, above
// H200's bandwidth x latency (~4.8 TB/s x ~0.8 us / 132 SMs ~ 30 KB). __launch_bounds__(.., 1) caps
// the registers at 64 per thread.
constexpr int kCeFusedThreads = 1024;
constexpr int kCeFusedUnroll = 4;

// CE statistics (and G) of the whole vocabulary in one pass over the logits (nv == V, v0 == 0): one block
// per row loads z[i, :] (nv fp32) once into shared memory (16-byte loads when nv % 4 == 0: then every
// row starts 16-byte aligned), folding it into per-thread online (max, sum exp) on the way, so the exps
// overlap the loads (a separate sum pass over shared memory, MUFU-bound at ~1.6 us per 49K row with the
// SM otherwise idle, made the kernel 11-16% slower on an H200). Writes s_max, s_sum, target_logit as
// ce_stats_kernel with first == true (ce_finalize_kernel then adds the row losses), s_lse = the
// finalize's lse, and with kGrad the G row as ce_grad_kernel would from it, reading z from shared memory.
//   z (nb, nv) fp32, G (nb, nv) bf16, dynamic shared memory nv * 4 bytes; grid nb, kCeFusedThreads.
template <bool kGrad>
__global__ void __launch_bounds__(kCeFusedThreads, 1)
    ce_fused_kernel(const float* __restrict__ z, bf16* __restrict__ G, int nv, const int32_t* __restrict__ tg,
                    float* s_max, float* s_sum, float* target_logit, float* s_lse, float scale) {
    extern __shared__ float4 row4[];  // (nv) fp32; float4 for the 16-byte alignment of the vector path
    float* row = reinterpret_cast<float*>(row4);
    __shared__ float sh[32];
    __shared__ float sh_lse;
    constexpr int T = kCeFusedThreads, U = kCeFusedUnroll;
    const int i = blockIdx.x, tid = threadIdx.x;
    const float* zr = z + size_t(i) * nv;
    const bool vec = (nv & 3) == 0;  // block-uniform
    const int n4 = nv >> 2;
    // load once into shared memory, folding each group of 4U values into the thread's online (max, sum)
    // while the next loads are in flight: no second pass over the row for the sum
    float m = -INFINITY, s = 0.0f;
    if (vec) {
        const float4* z4 = reinterpret_cast<const float4*>(zr);
        for (int k0 = tid; k0 < n4; k0 += U * T) {
            float4 v[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = k0 + u * T;
                v[u] = k < n4 ? __ldcs(z4 + k) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            }
            float w[4 * U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = k0 + u * T;
                if (k < n4) row4[k] = v[u];
                w[4 * u] = v[u].x, w[4 * u + 1] = v[u].y, w[4 * u + 2] = v[u].z, w[4 * u + 3] = v[u].w;
            }
            lse_fold(w, m, s);
        }
    } else {
        for (int j0 = tid; j0 < nv; j0 += 4 * U * T) {
            float v[4 * U];
#pragma unroll
            for (int u = 0; u < 4 * U; ++u) {
                const int j = j0 + u * T;
                v[u] = j < nv ? __ldcs(zr + j) : -INFINITY;
            }
#pragma unroll
            for (int u = 0; u < 4 * U; ++u) {
                const int j = j0 + u * T;
                if (j < nv) row[j] = v[u];
            }
            lse_fold(v, m, s);
        }
    }
    // fixed-order block merge: the row max, each thread's sum rescaled to it (0 if it saw only -inf), summed
    const float m_thread = m;
    m = block_max(m_thread, sh);
    s = block_sum(m_thread == -INFINITY ? 0.0f : s * expf(m_thread - m), sh);
    const int t = tg[i];
    if (tid == 0) {
        // the same double formula as ce_finalize_kernel, so G equals the unfused path's for these m, s
        const float lse = float(double(m) + log(double(s)));
        s_max[i] = m;
        s_sum[i] = s;
        target_logit[i] = t >= 0 && t < nv ? row[t] : 0.0f;
        s_lse[i] = lse;
        sh_lse = lse;
    }
    if (!kGrad) return;
    __syncthreads();
    const float l = sh_lse;
    const bool counted = t >= 0 && t < nv;  // nv == V
    bf16* gr = G + size_t(i) * nv;
    // G = scale * (softmax - onehot(t)), 0 on uncounted rows (no exp needed there)
    if (vec) {
        for (int k = tid; k < n4; k += T) {
            float g0 = 0.0f, g1 = 0.0f, g2 = 0.0f, g3 = 0.0f;
            if (counted) {
                const float4 v = row4[k];
                g0 = __expf(v.x - l) * scale, g1 = __expf(v.y - l) * scale;
                g2 = __expf(v.z - l) * scale, g3 = __expf(v.w - l) * scale;
                if ((t >> 2) == k) {
                    const int c = t & 3;
                    if (c == 0) g0 -= scale;
                    if (c == 1) g1 -= scale;
                    if (c == 2) g2 -= scale;
                    if (c == 3) g3 -= scale;
                }
            }
            store_bf16x4(gr + 4 * k, g0, g1, g2, g3);
        }
    } else {
        for (int j = tid; j < nv; j += T) {
            float g = 0.0f;
            if (counted) {
                g = __expf(row[j] - l) * scale;
                if (j == t) g -= scale;
            }
            gr[j] = __float2bfloat16(g);
        }
    }
}

// Largest nv the fused CE kernel takes (its row must fit the opt-in shared memory of a block); raises
// the kernels' dynamic shared memory limit on the first call (on the current device, as the other
// opt-in kernels of this project do).
int ce_fused_max_nv() {
    static const int max_nv = [] {
        int dev = 0, optin = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        cudaFuncAttributes fa{}, fb{};
        CUDA_CHECK(cudaFuncGetAttributes(&fa, ce_fused_kernel<true>));
        CUDA_CHECK(cudaFuncGetAttributes(&fb, ce_fused_kernel<false>));
        const int dyn = optin - int(std::max(fa.sharedSizeBytes, fb.sharedSizeBytes));
        if (dyn <= 0) return 0;
        const auto attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
        CUDA_CHECK(cudaFuncSetAttribute(ce_fused_kernel<true>, attr, dyn));
        CUDA_CHECK(cudaFuncSetAttribute(ce_fused_kernel<false>, attr, dyn));
        return dyn / int(sizeof(float));
    }();
    return max_nv;
}

// ---- KL ----

// Per-thread online statistics of one row: student (ms, ss = sum exp(zs - ms)), teacher (mt, st = sum
// exp(zt - mt)) and cross = sum exp(zt - mt) (zt - zs); the sums are relative to the thread's own maxes.
struct KlPartial {
    float ms = -INFINITY, ss = 0.0f, mt = -INFINITY, st = 0.0f, c = 0.0f;
};

// Folds a group of n values of each stream (padding: -inf in both) into p. The maxes move once per group
// (rescaling the sums only when they grow), so the exp count stays at one per element plus one per group.
template <int n>
__device__ __forceinline__ void kl_fold(const float (&a)[n], const float (&b)[n], KlPartial& p) {
    lse_fold(a, p.ms, p.ss);
    float gb = b[0];
#pragma unroll
    for (int k = 1; k < n; ++k) gb = fmaxf(gb, b[k]);
    if (gb > p.mt) {  // as in lse_fold
        const float r = expf(p.mt - gb);
        p.st *= r;
        p.c *= r;
        p.mt = gb;
    }
    if (p.mt != -INFINITY) {
#pragma unroll
        for (int k = 0; k < n; ++k) {
            const float e = __expf(b[k] - p.mt);
            p.st += e;
            if (e > 0.0f) p.c += e * (b[k] - a[k]);  // e == 0 (zt = -inf): 0 * (zt - zs) could be NaN
        }
    }
}

constexpr int kKlUnroll = 4;  // kl_stats_kernel: 16-byte loads per stream and thread in flight

// Folds the tiles zs, zt (nb, nv) (one vocabulary chunk) into the rows' online statistics in ONE read of
// each (per-thread online max/sum, then a fixed-order block merge: block maxes, each thread's sums
// rescaled to them, block sums); first chunk resets; masked rows are skipped. 16-byte loads when
// nv % 4 == 0 (every row then starts 16-byte aligned). Grid nb, kThreads.
__global__ void kl_stats_kernel(const float* __restrict__ zs, const float* __restrict__ zt, int nv,
                                const uint8_t* __restrict__ mask, float* s_max, float* s_sum, float* t_max,
                                float* t_sum, float* cross, bool first) {
    __shared__ float sh[32];
    constexpr int T = kThreads, U = kKlUnroll;
    const int i = blockIdx.x, tid = threadIdx.x;
    if (mask && !mask[i]) return;  // block-uniform
    const float* a = zs + size_t(i) * nv;
    const float* b = zt + size_t(i) * nv;
    KlPartial p;
    if ((nv & 3) == 0) {
        const int n4 = nv >> 2;
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        for (int k0 = tid; k0 < n4; k0 += U * T) {
            float va[4 * U], vb[4 * U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int k = k0 + u * T;
                const float4 ninf = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
                const float4 x = k < n4 ? a4[k] : ninf, y = k < n4 ? b4[k] : ninf;
                va[4 * u] = x.x, va[4 * u + 1] = x.y, va[4 * u + 2] = x.z, va[4 * u + 3] = x.w;
                vb[4 * u] = y.x, vb[4 * u + 1] = y.y, vb[4 * u + 2] = y.z, vb[4 * u + 3] = y.w;
            }
            kl_fold(va, vb, p);
        }
    } else {
        for (int j0 = tid; j0 < nv; j0 += 4 * U * T) {
            float va[4 * U], vb[4 * U];
#pragma unroll
            for (int u = 0; u < 4 * U; ++u) {
                const int j = j0 + u * T;
                va[u] = j < nv ? a[j] : -INFINITY;
                vb[u] = j < nv ? b[j] : -INFINITY;
            }
            kl_fold(va, vb, p);
        }
    }
    const float ms_old = first ? -INFINITY : s_max[i], mt_old = first ? -INFINITY : t_max[i];
    const float ms_new = fmaxf(ms_old, block_max(p.ms, sh)), mt_new = fmaxf(mt_old, block_max(p.mt, sh));
    // the thread's sums relative to the row's new maxes (a thread that saw only -inf holds zeros)
    const float rs = p.ms == -INFINITY ? 0.0f : expf(p.ms - ms_new);
    const float rt = p.mt == -INFINITY ? 0.0f : expf(p.mt - mt_new);
    const float ss = block_sum(p.ss * rs, sh);
    const float st = block_sum(p.st * rt, sh);
    const float c = block_sum(p.c * rt, sh);
    if (tid == 0) {
        const float rs_old = ms_old == -INFINITY ? 0.0f : expf(ms_old - ms_new);
        const float rt_old = mt_old == -INFINITY ? 0.0f : expf(mt_old - mt_new);
        s_sum[i] = (first ? 0.0f : s_sum[i] * rs_old) + ss;
        t_sum[i] = (first ? 0.0f : t_sum[i] * rt_old) + st;
        cross[i] = (first ? 0.0f : cross[i] * rt_old) + c;
        s_max[i] = ms_new;
        t_max[i] = mt_new;
    }
}

__global__ void kl_finalize_kernel(int nb, const uint8_t* __restrict__ mask, const float* s_max, const float* s_sum,
                                   const float* t_max, const float* t_sum, const float* cross, float* s_lse,
                                   float* t_lse, float tau2, LossTotals* totals) {
    __shared__ double sh[32];
    double loss = 0, cnt = 0;
    for (int i = threadIdx.x; i < nb; i += blockDim.x) {
        if (mask && !mask[i]) continue;
        const double ls = double(s_max[i]) + log(double(s_sum[i]));
        const double lt = double(t_max[i]) + log(double(t_sum[i]));
        s_lse[i] = float(ls);
        t_lse[i] = float(lt);
        loss += double(tau2) * (double(cross[i]) / double(t_sum[i]) - lt + ls);
        cnt += 1;
    }
    loss = block_sum(loss, sh);
    cnt = block_sum(cnt, sh);
    if (threadIdx.x == 0) {
        totals->loss += loss;
        totals->count += (long long)(cnt);
    }
}

// G = g_mul * (p_s - p_t) (logits already / tau), 0 on masked rows. The last read of the tiles
// (streaming loads); 16-byte loads and 8-byte stores when nv % 4 == 0 (rows then start aligned), one
// float4 per thread and grid stride: grad_grid(nb, nv) covers a row of up to 64K in one stride.
__global__ void kl_grad_kernel(const float* __restrict__ zs, const float* __restrict__ zt, bf16* __restrict__ G,
                               int nv, const uint8_t* __restrict__ mask, const float* __restrict__ s_lse,
                               const float* __restrict__ t_lse, float g_mul) {
    const int i = blockIdx.y;
    const bool on = !mask || mask[i];
    const float ls = on ? s_lse[i] : 0.0f, lt = on ? t_lse[i] : 0.0f;
    const float* a = zs + size_t(i) * nv;
    const float* b = zt + size_t(i) * nv;
    bf16* gr = G + size_t(i) * nv;
    const int j0 = blockIdx.x * blockDim.x + threadIdx.x, stride = gridDim.x * blockDim.x;
    if ((nv & 3) == 0) {
        const int n4 = nv >> 2;
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        for (int k = j0; k < n4; k += stride) {
            float g0 = 0.0f, g1 = 0.0f, g2 = 0.0f, g3 = 0.0f;
            if (on) {
                const float4 x = __ldcs(a4 + k), y = __ldcs(b4 + k);
                g0 = (__expf(x.x - ls) - __expf(y.x - lt)) * g_mul;
                g1 = (__expf(x.y - ls) - __expf(y.y - lt)) * g_mul;
                g2 = (__expf(x.z - ls) - __expf(y.z - lt)) * g_mul;
                g3 = (__expf(x.w - ls) - __expf(y.w - lt)) * g_mul;
            }
            store_bf16x4(gr + 4 * k, g0, g1, g2, g3);
        }
    } else {
        for (int j = j0; j < nv; j += stride)
            gr[j] = __float2bfloat16(on ? (__expf(__ldcs(a + j) - ls) - __expf(__ldcs(b + j) - lt)) * g_mul
                                        : 0.0f);
    }
}

// ---- shared helpers ----

// dh_bf16 (nb, C) = bf16(acc (+ old)).
__global__ void dh_store_kernel(const float* __restrict__ acc, bf16* __restrict__ dh, int64_t n, bool accumulate) {
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
        float v = acc[k];
        if (accumulate) v += __bfloat162float(dh[k]);
        dh[k] = __float2bfloat16(v);
    }
}

void launch_check() { CUDA_CHECK(cudaGetLastError()); }

dim3 grad_grid(int64_t nb, int64_t nv) {
    const int bx = int(std::min<int64_t>((nv + kThreads * 4 - 1) / (kThreads * 4), 64));
    return dim3(unsigned(std::max(bx, 1)), unsigned(nb));
}

void check_grads(const char* what, const LmHeadGrads& g, const LmHeadLossWorkspace& ws, int64_t C) {
    HYDRA_CHECK(!(g.dh_f32 && g.dh_bf16), "{}: give dh as fp32 or bf16, not both", what);
    HYDRA_CHECK(!g.dh_bf16 || ws.max_C >= C, "{}: a bf16 dh needs a workspace with max_C >= {} (has {})", what, C,
                ws.max_C);
}

// Pass 2's two GEMMs for one tile, with dh's beta per chunk.
void backprop_tile(BlasContext& ctx, const LmHeadGrads& g, LmHeadLossWorkspace& ws, const bf16* G, const bf16* h_blk,
                   const bf16* W, int64_t r0, int64_t nb, int64_t C, int64_t v0, int64_t nv, bool first_chunk) {
    if (g.dh_f32) {
        const float beta = first_chunk && !g.accumulate_dh ? 0.0f : 1.0f;
        gemm_bf16(ctx, false, false, nb, C, nv, 1.0f, G, nv, W + v0 * C, C, beta, g.dh_f32 + r0 * C, C);
    } else if (g.dh_bf16) {
        gemm_bf16(ctx, false, false, nb, C, nv, 1.0f, G, nv, W + v0 * C, C, first_chunk ? 0.0f : 1.0f, ws.dh_acc, C);
    }
    if (g.dW) gemm_bf16(ctx, true, false, nv, C, nb, 1.0f, G, nv, h_blk, C, 1.0f, g.dW + v0 * C, C);
}

void store_bf16_dh(BlasContext& ctx, const LmHeadGrads& g, LmHeadLossWorkspace& ws, int64_t r0, int64_t nb,
                   int64_t C) {
    if (!g.dh_bf16) return;
    const int64_t n = nb * C;
    const int grid = int(std::min<int64_t>((n + 255) / 256, 2048));
    dh_store_kernel<<<grid, 256, 0, ctx.stream()>>>(ws.dh_acc, g.dh_bf16 + r0 * C, n, g.accumulate_dh);
    launch_check();
}

}  // namespace

// ---- totals ------------------------------------------------------------------------------------------

void zero_totals(LossTotals* d_totals, cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(d_totals, 0, sizeof(LossTotals), stream));
}

LossTotals read_totals(const LossTotals* d_totals, cudaStream_t stream) {
    LossTotals h;
    CUDA_CHECK(cudaMemcpyAsync(&h, d_totals, sizeof(LossTotals), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return h;
}

// ---- workspace ---------------------------------------------------------------------------------------

LmHeadLossWorkspace::LmHeadLossWorkspace(const LmHeadChunking& ck, bool kl_, int64_t max_C_)
    : chunking(ck), kl(kl_), max_C(max_C_) {
    HYDRA_CHECK(ck.row_block > 0 && ck.vocab_chunk > 0 && max_C_ >= 0 && ck.row_block <= 65535 &&
                    ck.row_block * ck.vocab_chunk <= (int64_t(1) << 31),
                "LmHeadLossWorkspace: need 0 < row_block <= 65535, vocab_chunk > 0, a tile below 2^31 elements and "
                "max_C >= 0 (got {}, {}, {})",
                ck.row_block, ck.vocab_chunk, max_C_);
    const size_t rb = size_t(ck.row_block), tile = rb * size_t(ck.vocab_chunk);
    auto a = [](size_t b) { return (b + 255) / 256 * 256; };
    const size_t b_zs = a(tile * 4), b_zt = kl ? a(tile * 4) : 0, b_g = a(tile * 2), b_row = a(rb * 4),
                 b_dh = a(rb * size_t(max_C) * 4);
    bytes = b_zs + b_zt + b_g + 8 * b_row + b_dh;
    CUDA_CHECK(cudaMalloc(&base_, bytes));
    char* p = static_cast<char*>(base_);
    auto take = [&](size_t b) {
        char* q = p;
        p += b;
        return q;
    };
    zs = reinterpret_cast<float*>(take(b_zs));
    zt = kl ? reinterpret_cast<float*>(take(b_zt)) : nullptr;
    g = reinterpret_cast<bf16*>(take(b_g));
    s_max = reinterpret_cast<float*>(take(b_row));
    s_sum = reinterpret_cast<float*>(take(b_row));
    t_max = reinterpret_cast<float*>(take(b_row));
    t_sum = reinterpret_cast<float*>(take(b_row));
    cross = reinterpret_cast<float*>(take(b_row));
    target_logit = reinterpret_cast<float*>(take(b_row));
    s_lse = reinterpret_cast<float*>(take(b_row));
    t_lse = reinterpret_cast<float*>(take(b_row));
    dh_acc = max_C > 0 ? reinterpret_cast<float*>(take(b_dh)) : nullptr;
}

LmHeadLossWorkspace::~LmHeadLossWorkspace() {
    if (base_) cudaFree(base_);
}

// ---- CE ----------------------------------------------------------------------------------------------

void cross_entropy_lm_head(BlasContext& ctx, const bf16* h, const bf16* W, const int32_t* targets, int64_t N,
                           int64_t C, int64_t V, const LmHeadGrads& grads, LossTotals* d_totals,
                           LmHeadLossWorkspace& ws) {
    const char* what = "cuda::cross_entropy_lm_head";
    HYDRA_CHECK(N >= 0 && C > 0 && V > 0 && V <= INT32_MAX, "{}: need N >= 0, C > 0, 0 < V < 2^31 (got {}, {}, {})",
                what, N, C, V);
    check_grads(what, grads, ws, C);
    const cudaStream_t st = ctx.stream();
    const bool want_grad = grads.dh_f32 || grads.dh_bf16 || grads.dW;
    const int64_t rb = ws.chunking.row_block, vc = std::min(ws.chunking.vocab_chunk, V);
    const bool resident = vc == V;  // one tile holds the block's whole logits: pass 2 reuses pass 1's
    // resident and a row fits in shared memory: one fused kernel reads each logits row once for the
    // statistics and G (instead of stats twice + grad once)
    const bool fused = resident && V <= ce_fused_max_nv();
    for (int64_t r0 = 0; r0 < N; r0 += rb) {
        const int64_t nb = std::min(rb, N - r0);
        const bf16* hb = h + r0 * C;
        const int32_t* tg = targets + r0;
        if (fused) {
            gemm_bf16(ctx, false, true, nb, V, C, 1.0f, hb, C, W, C, 0.0f, ws.zs, V);
            const size_t smem = size_t(V) * sizeof(float);
            if (want_grad)
                ce_fused_kernel<true><<<unsigned(nb), kCeFusedThreads, smem, st>>>(
                    ws.zs, ws.g, int(V), tg, ws.s_max, ws.s_sum, ws.target_logit, ws.s_lse, grads.grad_scale);
            else
                ce_fused_kernel<false><<<unsigned(nb), kCeFusedThreads, smem, st>>>(
                    ws.zs, ws.g, int(V), tg, ws.s_max, ws.s_sum, ws.target_logit, ws.s_lse, grads.grad_scale);
            launch_check();
            // the row losses and totals (G is already complete: the fused kernel had the lse)
            ce_finalize_kernel<<<1, 1024, 0, st>>>(int(nb), int(V), tg, ws.s_max, ws.s_sum, ws.target_logit,
                                                   ws.s_lse, d_totals);
            launch_check();
            if (!want_grad) continue;
            backprop_tile(ctx, grads, ws, ws.g, hb, W, r0, nb, C, 0, V, true);
            store_bf16_dh(ctx, grads, ws, r0, nb, C);
            continue;
        }
        for (int64_t v0 = 0; v0 < V; v0 += vc) {
            const int64_t nv = std::min(vc, V - v0);
            gemm_bf16(ctx, false, true, nb, nv, C, 1.0f, hb, C, W + v0 * C, C, 0.0f, ws.zs, nv);
            ce_stats_kernel<<<unsigned(nb), kThreads, 0, st>>>(ws.zs, int(nv), int(v0), tg, ws.s_max, ws.s_sum,
                                                               ws.target_logit, v0 == 0);
            launch_check();
        }
        ce_finalize_kernel<<<1, 1024, 0, st>>>(int(nb), int(V), tg, ws.s_max, ws.s_sum, ws.target_logit, ws.s_lse,
                                               d_totals);
        launch_check();
        if (!want_grad) continue;
        for (int64_t v0 = 0; v0 < V; v0 += vc) {
            const int64_t nv = std::min(vc, V - v0);
            if (!resident)
                gemm_bf16(ctx, false, true, nb, nv, C, 1.0f, hb, C, W + v0 * C, C, 0.0f, ws.zs, nv);
            ce_grad_kernel<<<grad_grid(nb, nv), kThreads, 0, st>>>(ws.zs, ws.g, int(nv), int(v0), int(V), tg,
                                                                   ws.s_lse, grads.grad_scale);
            launch_check();
            backprop_tile(ctx, grads, ws, ws.g, hb, W, r0, nb, C, v0, nv, v0 == 0);
        }
        store_bf16_dh(ctx, grads, ws, r0, nb, C);
    }
}

// ---- KL ----------------------------------------------------------------------------------------------

void kl_lm_head(BlasContext& ctx, const bf16* h_s, const bf16* W_s, int64_t Cs, const bf16* h_t, const bf16* W_t,
                int64_t Ct, const uint8_t* row_mask, int64_t N, int64_t V, float tau, const LmHeadGrads& grads,
                LossTotals* d_totals, LmHeadLossWorkspace& ws) {
    const char* what = "cuda::kl_lm_head";
    HYDRA_CHECK(N >= 0 && Cs > 0 && Ct > 0 && V > 0 && V <= INT32_MAX,
                "{}: need N >= 0, Cs, Ct > 0, 0 < V < 2^31 (got {}, {}, {}, {})", what, N, Cs, Ct, V);
    HYDRA_CHECK(std::isfinite(tau) && tau > 0, "{}: temperature tau must be > 0 (got {})", what, tau);
    HYDRA_CHECK(ws.kl, "{}: the workspace was made without kl = true", what);
    check_grads(what, grads, ws, Cs);
    const cudaStream_t st = ctx.stream();
    const bool want_grad = grads.dh_f32 || grads.dh_bf16 || grads.dW;
    const float inv_tau = 1.0f / tau, g_mul = grads.grad_scale * tau;
    const int64_t rb = ws.chunking.row_block, vc = std::min(ws.chunking.vocab_chunk, V);
    const bool resident = vc == V;  // one tile holds the block's whole logits: pass 2 reuses pass 1's
    for (int64_t r0 = 0; r0 < N; r0 += rb) {
        const int64_t nb = std::min(rb, N - r0);
        const bf16* hs = h_s + r0 * Cs;
        const bf16* ht = h_t + r0 * Ct;
        const uint8_t* mk = row_mask ? row_mask + r0 : nullptr;
        for (int64_t v0 = 0; v0 < V; v0 += vc) {
            const int64_t nv = std::min(vc, V - v0);
            gemm_bf16(ctx, false, true, nb, nv, Cs, inv_tau, hs, Cs, W_s + v0 * Cs, Cs, 0.0f, ws.zs, nv);
            gemm_bf16(ctx, false, true, nb, nv, Ct, inv_tau, ht, Ct, W_t + v0 * Ct, Ct, 0.0f, ws.zt, nv);
            kl_stats_kernel<<<unsigned(nb), kThreads, 0, st>>>(ws.zs, ws.zt, int(nv), mk, ws.s_max, ws.s_sum,
                                                               ws.t_max, ws.t_sum, ws.cross, v0 == 0);
            launch_check();
        }
        kl_finalize_kernel<<<1, 1024, 0, st>>>(int(nb), mk, ws.s_max, ws.s_sum, ws.t_max, ws.t_sum, ws.cross,
                                               ws.s_lse, ws.t_lse, tau * tau, d_totals);
        launch_check();
        if (!want_grad) continue;
        for (int64_t v0 = 0; v0 < V; v0 += vc) {
            const int64_t nv = std::min(vc, V - v0);
            if (!resident) {
                gemm_bf16(ctx, false, true, nb, nv, Cs, inv_tau, hs, Cs, W_s + v0 * Cs, Cs, 0.0f, ws.zs, nv);
                gemm_bf16(ctx, false, true, nb, nv, Ct, inv_tau, ht, Ct, W_t + v0 * Ct, Ct, 0.0f, ws.zt, nv);
            }
            kl_grad_kernel<<<grad_grid(nb, nv), kThreads, 0, st>>>(ws.zs, ws.zt, ws.g, int(nv), mk, ws.s_lse,
                                                                   ws.t_lse, g_mul);
            launch_check();
            backprop_tile(ctx, grads, ws, ws.g, hs, W_s, r0, nb, Cs, v0, nv, v0 == 0);
        }
        store_bf16_dh(ctx, grads, ws, r0, nb, Cs);
    }
}

// ---- MSE ---------------------------------------------------------------------------------------------

namespace {

// Block b covers elements [b * per, min(n, (b + 1) * per)): a fixed partition, so the sum is reproducible.
__global__ void mse_partial_kernel(const float* __restrict__ a, const float* __restrict__ tgt, int64_t n, int64_t per,
                                   float* __restrict__ da, bool accumulate, float two_scale, double* partial) {
    __shared__ double sh[32];
    const int64_t lo = int64_t(blockIdx.x) * per, hi = min(n, lo + per);
    double s = 0;
    for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
        const float d = a[k] - tgt[k];
        s += double(d) * double(d);
        if (da) da[k] = accumulate ? da[k] + two_scale * d : two_scale * d;
    }
    s = block_sum(s, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void mse_total_kernel(const double* partial, int nblocks, int64_t n, LossTotals* totals) {
    __shared__ double sh[32];
    double s = 0;
    for (int b = threadIdx.x; b < nblocks; b += blockDim.x) s += partial[b];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        totals->loss += s;
        totals->count += n;
    }
}

}  // namespace

MseWorkspace::MseWorkspace() { CUDA_CHECK(cudaMalloc(&partial, kBlocks * sizeof(double))); }
MseWorkspace::~MseWorkspace() {
    if (partial) cudaFree(partial);
}

void mse(const float* a, const float* target, int64_t n, float* da, bool accumulate, float grad_scale,
         LossTotals* d_totals, MseWorkspace& ws, cudaStream_t stream) {
    HYDRA_CHECK(n >= 0, "cuda::mse: negative element count {}", n);
    if (n == 0) return;
    const int64_t per = std::max<int64_t>((n + MseWorkspace::kBlocks - 1) / MseWorkspace::kBlocks, 1);
    const int nblocks = int((n + per - 1) / per);
    mse_partial_kernel<<<nblocks, 256, 0, stream>>>(a, target, n, per, da, accumulate, 2.0f * grad_scale, ws.partial);
    CUDA_CHECK(cudaGetLastError());
    mse_total_kernel<<<1, 1024, 0, stream>>>(ws.partial, nblocks, n, d_totals);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
