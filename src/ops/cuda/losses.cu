// Vocabulary-chunked LM-head losses (CE, tau^2 KL) and MSE on the GPU (see losses.h). Per row block:
// pass 1 = for each vocabulary chunk one logits GEMM + a per-row statistics kernel (one thread block
// per row); a finalize kernel turns the statistics into log-sum-exps and row losses and adds their
// fixed-order sum to the totals; pass 2 = for each chunk the logits GEMM again (skipped when one chunk
// covers the whole vocabulary: the tile still holds them), an elementwise kernel writing the bf16 logit
// gradient G, and the GEMMs dh += G @ W_c, dW_c += G^T @ h.
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
__device__ float block_sum(float x, float* sh) {
    // pad lanes >= nw contribute 0: reduce explicitly instead of the generic padding
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    x = warp_sum(x);
    __syncthreads();
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    if (warp == 0) {
        float y = lane < nw ? sh[lane] : 0.0f;
        y = warp_sum(y);
        if (lane == 0) sh[0] = y;
    }
    __syncthreads();
    return sh[0];
}
__device__ double block_sum(double x, double* sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    x = warp_sum(x);
    __syncthreads();
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    if (warp == 0) {
        double y = lane < nw ? sh[lane] : 0.0;
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

// ---- KL ----

__global__ void kl_stats_kernel(const float* __restrict__ zs, const float* __restrict__ zt, int nv,
                                const uint8_t* __restrict__ mask, float* s_max, float* s_sum, float* t_max,
                                float* t_sum, float* cross, bool first) {
    __shared__ float sh[32];
    const int i = blockIdx.x;
    if (mask && !mask[i]) return;  // block-uniform
    const float* a = zs + size_t(i) * nv;
    const float* b = zt + size_t(i) * nv;
    float ms = -INFINITY, mt = -INFINITY;
    for (int j = threadIdx.x; j < nv; j += blockDim.x) {
        ms = fmaxf(ms, a[j]);
        mt = fmaxf(mt, b[j]);
    }
    ms = block_max(ms, sh);
    mt = block_max(mt, sh);
    const float ms_old = first ? -INFINITY : s_max[i], mt_old = first ? -INFINITY : t_max[i];
    const float ms_new = fmaxf(ms_old, ms), mt_new = fmaxf(mt_old, mt);
    float ss = 0.0f, st = 0.0f, c = 0.0f;
    for (int j = threadIdx.x; j < nv; j += blockDim.x) {
        if (ms_new != -INFINITY) ss += __expf(a[j] - ms_new);
        if (mt_new != -INFINITY) {
            const float e = __expf(b[j] - mt_new);
            st += e;
            if (e > 0.0f) c += e * (b[j] - a[j]);
        }
    }
    ss = block_sum(ss, sh);
    st = block_sum(st, sh);
    c = block_sum(c, sh);
    if (threadIdx.x == 0) {
        const float rs = ms_old == -INFINITY ? 0.0f : expf(ms_old - ms_new);
        const float rt = mt_old == -INFINITY ? 0.0f : expf(mt_old - mt_new);
        s_sum[i] = (first ? 0.0f : s_sum[i] * rs) + ss;
        t_sum[i] = (first ? 0.0f : t_sum[i] * rt) + st;
        cross[i] = (first ? 0.0f : cross[i] * rt) + c;
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

// G = g_mul * (p_s - p_t) (logits already / tau), 0 on masked rows.
__global__ void kl_grad_kernel(const float* __restrict__ zs, const float* __restrict__ zt, bf16* __restrict__ G,
                               int nv, const uint8_t* __restrict__ mask, const float* __restrict__ s_lse,
                               const float* __restrict__ t_lse, float g_mul) {
    const int i = blockIdx.y;
    const bool on = !mask || mask[i];
    const float ls = on ? s_lse[i] : 0.0f, lt = on ? t_lse[i] : 0.0f;
    const float* a = zs + size_t(i) * nv;
    const float* b = zt + size_t(i) * nv;
    bf16* gr = G + size_t(i) * nv;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < nv; j += gridDim.x * blockDim.x)
        gr[j] = __float2bfloat16(on ? (__expf(a[j] - ls) - __expf(b[j] - lt)) * g_mul : 0.0f);
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
    for (int64_t r0 = 0; r0 < N; r0 += rb) {
        const int64_t nb = std::min(rb, N - r0);
        const bf16* hb = h + r0 * C;
        const int32_t* tg = targets + r0;
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
            if (!resident) gemm_bf16(ctx, false, true, nb, nv, C, 1.0f, hb, C, W + v0 * C, C, 0.0f, ws.zs, nv);
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
