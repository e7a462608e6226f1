// GDN causal depthwise short conv + SiLU on the GPU (see short_conv.h).
//
// Work split: a thread owns V consecutive channels (V = 2 or 1: 4- or 2-byte bf16 accesses, the widest one
// the channel count, row strides and pointer alignment allow; checked at run time, V = 1 is the fallback
// for odd shapes) of one chunk of L token rows of one sequence (L = kLF = 8 forward, kLB = 16 backward).
// A block is kLanes x kChunks threads: threadIdx.x walks channel groups (a warp reads kLanes * V
// consecutive channels of a token row, 64 or 128 contiguous bytes per load instruction), threadIdx.y walks
// kChunks consecutive chunks (a tile of kChunks * L tokens); blockIdx.x = (sequence, token tile),
// blockIdx.y = channel tile. All the index math comes from the launch grid (one int32 division per thread,
// no per-element div/mod); element offsets are int64.
//
// A thread issues all its input loads into registers up front (W is a template parameter, 1..8), so the
// loads overlap instead of forming a chain; the bf16 words stay packed in registers and are widened to
// fp32 where used. The W-1 x rows (backward: 2(W-1) x rows and W-1 dout rows) a chunk shares with the
// chunk before it are loaded by both (normally L1/L2 hits: the neighbour chunk is in the same block).
// Token, channel and tile indices are int32 (checked on the host: T <= 2^30, D <= 2^26).
// The sigmoid uses the SFU approximations (fast_sigmoid, ~1e-6 relative error) where registers allow; the
// exact expf + IEEE division made the kernels ALU-bound rather than memory-bound.
//
// The backward recomputes the pre-activation. dw is deterministic (layer_util.cuh contract): a thread sums
// its own kLB positions in order, the block sums its kChunks threads per channel in chunk order through
// shared memory and writes one partial row per (sequence, token tile) — a function of (B, T, W) only — and
// detail::accumulate_partials adds the partial rows in order.
#include "ops/cuda/short_conv.h"

#include <climits>
#include <cstdint>

#include "ops/cuda/bf16_pack.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kLanes = 32;  // channel groups per block (threadIdx.x)
constexpr int kChunks = 8;  // token chunks per block (threadIdx.y); one dw partial row per block
constexpr int kThreads = kLanes * kChunks;
constexpr int kMaxW = 8;
// Token rows per thread. Forward: 8. Its W-1 overlap rows cost only extra (L1-hit) loads, no math, and
// short chunks keep it at <= 64 registers (4 blocks = 32 warps per SM, twice the warps of 16-row chunks to
// hide the DRAM latency; 8 x 2048 tokens x 512 channels = 2048 blocks, ~4 waves on 132 SMs, so the tail
// wave is small). Backward: 16. Each chunk recomputes the pre-activation of the W-1 positions before it,
// so longer chunks waste less math; 16 rows (~2 (kLB + W) packed words) still fit in registers.
constexpr int kLF = 8;
constexpr int kLB = 16;
constexpr int kFwdMinBlocks = 4;  // forward: __launch_bounds__(256, 4), <= 64 registers
// Backward: __launch_bounds__(256, 2), <= 128 registers (2 blocks = 16 warps per SM). With fast_sigmoid the
// body is branch-free and ptxas interleaves more positions: W <= 4 then needs up to 127 registers (same
// occupancy as the 88-92 of the exact sigmoid). For W >= 5 that would spill, so those widths keep the
// exact sigmoid (its division's slow-path branch bounds the interleaving: 86-124 registers, no spills).
// The backward's first chunk is the only one whose rows touch prev (xc rows < W-1, needs kLB >= 2 (W-1)).
static_assert(kLB >= 2 * (kMaxW - 1), "short_conv: chunk shorter than two windows");

// sigmoid(x) = 1 / (1 + 2^(-x log2 e)) with the SFU's ex2.approx / rcp.approx (flush-to-zero; ~2^-22
// relative error each, far below the bf16 outputs' 2^-9). The exact expf + IEEE division cost ~20
// instructions per element, which made both kernels as much ALU- as memory-bound. Limits stay right:
// x -> -inf gives 1 + inf -> rcp 0, x -> +inf gives 2^-huge -> 0 -> 1. NaN propagates. Host-side
// compilation (no __CUDA_ARCH__, e.g. a CPU simulation of the kernels) uses the exact formula.
__device__ __forceinline__ float fast_sigmoid(float x) {
#ifdef __CUDA_ARCH__
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.f + e));
    return r;
#else
    return detail::sigmoidf_(x);
#endif
}

using namespace bf16_pack;  // packed bf16 vectors

// Row j of xc = [prev; x] for sequence b, channel d (j in [0, W-1+T)).
// Where sequence b's carried window starts: its own (W-1, D) rows of prev, or those of its slot
// (slots: serving, each batch row's window lives in a slot pool, slot_stride floats apart).
__device__ __forceinline__ int64_t window_at(int64_t b, int64_t P, int64_t D, const int32_t* slots,
                                             int64_t slot_stride) {
    return slots ? int64_t(slots[b]) * slot_stride : b * P * D;
}

template <int W>
__device__ __forceinline__ float xc_at(const bf16* x, int64_t xs, const float* prev, int64_t b, int64_t T,
                                       int64_t D, int64_t d, int64_t j, const int32_t* slots = nullptr,
                                       int64_t slot_stride = 0) {
    if (j < W - 1) return prev ? prev[window_at(b, W - 1, D, slots, slot_stride) + j * D + d] : 0.f;
    return __bfloat162float(x[(b * T + j - (W - 1)) * xs + d]);
}

// Thread (b, chunk c, channels d..d+V-1) writes out rows t0 .. t0+kLF-1 (t0 = c kLF, < T) from xc rows
// t0 .. t0+kLF+W-2 (xc row j = x token j-(W-1), or prev row j for j < W-1: only in chunk 0).
// Grid: (B * ntile, ceil(D / (kLanes V))), block (kLanes, kChunks).
template <int W, int V>
__global__ void __launch_bounds__(kThreads, kFwdMinBlocks)
    k_conv_forward(bf16* __restrict__ out, const bf16* __restrict__ x, int64_t xs,
                   const float* __restrict__ w, const float* __restrict__ prev, int T, int D, int ntile,
                   const int32_t* __restrict__ slots, int64_t slot_stride) {
    constexpr int P = W - 1, NR = kLF + P;
    const int b = int(blockIdx.x) / ntile;
    const int t0 = ((int(blockIdx.x) - b * ntile) * kChunks + int(threadIdx.y)) * kLF;
    const int d = (int(blockIdx.y) * kLanes + int(threadIdx.x)) * V;  // D % V == 0: all V channels valid
    if (t0 >= T || d >= D) return;

    // All loads first (x rows, then w and the window), so they are in flight together. Row offsets are
    // stepped by the stride (one 64-bit add per row, no multiply).
    const bf16* xb = x + int64_t(b) * T * xs + d;  // token t of sequence b at xb + t xs
    raw_t<V> xr[NR];                               // xr[m] = x token t0 + m - P (xc row t0 + m); 0 outside
    int64_t xo = int64_t(t0 - P) * xs;
#pragma unroll
    for (int m = 0; m < NR; ++m, xo += xs) {
        const int t = t0 + m - P;
        xr[m] = (t >= 0 && t < T) ? raw_ldg<V>(xb + xo) : raw_zero<V>();
    }
    float wr[W][V];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
        for (int i = 0; i < W; ++i) wr[i][v] = __ldg(w + (d + v) * W + i);
    // xc rows t0 .. t0+P-1 in fp32: the carried window in chunk 0 (zeros when prev is null), else x rows.
    float pw[P > 0 ? P : 1][V];
#pragma unroll
    for (int m = 0; m < P; ++m)
#pragma unroll
        for (int v = 0; v < V; ++v)
            pw[m][v] =
                t0 == 0
                    ? (prev ? __ldg(prev + window_at(b, P, D, slots, slot_stride) + int64_t(m) * D + d + v)
                            : 0.f)
                    : raw_get<V>(xr[m], v);
    auto xf = [&](int m, int v) { return m < P ? pw[m][v] : raw_get<V>(xr[m], v); };  // xc row t0 + m

    bf16* ob = out + (int64_t(b) * T + t0) * D + d;
#pragma unroll
    for (int t = 0; t < kLF; ++t, ob += D) {
        if (t0 + t >= T) break;
        float y[V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
            float pre = 0.f;
#pragma unroll
            for (int i = 0; i < W; ++i) pre += wr[i][v] * xf(t + i, v);
            y[v] = pre * fast_sigmoid(pre);  // 38-64 registers for every W: no spills
        }
        raw_st<V>(ob, raw_pack<V>(y));
    }
}

// prev_out[b, r] = xc[b, T + r], r < W-1. All loads before the stores: prev_out may alias prev.
// (Inference only, B * D threads: left simple.)
template <int W>
__global__ void k_conv_next_prev(float* prev_out, const bf16* __restrict__ x, int64_t xs, const float* prev,
                                 int64_t B, int64_t T, int64_t D, const int32_t* __restrict__ slots,
                                 int64_t slot_stride) {
    const int64_t total = B * D;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
         k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t d = k % D, b = k / D;
        float v[W];
#pragma unroll
        for (int r = 0; r < W - 1; ++r) v[r] = xc_at<W>(x, xs, prev, b, T, D, d, T + r, slots, slot_stride);
        const int64_t o = window_at(b, W - 1, D, slots, slot_stride);
#pragma unroll
        for (int r = 0; r < W - 1; ++r) prev_out[o + r * D + d] = v[r];
    }
}

// Decode (T = 1), q, k and v together: thread (b, group, d) forms the pre-activation from its carried
// window and the new token in the order k_conv_forward uses (taps 0 .. W-1), writes the output, and shifts
// the window by one row (rows 1 .. W-2, then the token), the same values k_conv_next_prev writes.
template <int W>
__global__ void k_conv_decode_qkv(ConvDecodeGroups g, const bf16* __restrict__ x, int64_t xs,
                                  const int32_t* __restrict__ slots, int64_t slot_stride, int B, int D) {
    constexpr int P = W - 1;
    const int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (k >= int64_t(B) * 3 * D) return;
    const int d = int(k % D), grp = int((k / D) % 3), b = int(k / (int64_t(3) * D));
    const float xv = __bfloat162float(x[int64_t(b) * xs + int64_t(grp) * D + d]);
    float* win = P > 0 ? g.windows[grp] + window_at(b, P, D, slots, slot_stride) + d : nullptr;
    const float* w = g.w[grp] + int64_t(d) * W;
    float xc[W];
#pragma unroll
    for (int i = 0; i < P; ++i) xc[i] = win[int64_t(i) * D];
    xc[P] = xv;
    float pre = 0.f;
#pragma unroll
    for (int i = 0; i < W; ++i) pre += __ldg(w + i) * xc[i];
    g.out[grp][int64_t(b) * D + d] = __float2bfloat16_rn(pre * fast_sigmoid(pre));
#pragma unroll
    for (int i = 0; i < P; ++i) win[int64_t(i) * D] = xc[i + 1];
}

template <int W>
void decode_qkv_w(const ConvDecodeGroups& g, const bf16* x, int64_t xs, const int32_t* slots,
                  int64_t slot_stride, int64_t B, int64_t D, cudaStream_t stream) {
    const int64_t n = B * 3 * D;
    constexpr int threads = 256;
    k_conv_decode_qkv<W><<<unsigned((n + threads - 1) / threads), threads, 0, stream>>>(
        g, x, xs, slots, slot_stride, int(B), int(D));
    CUDA_CHECK(cudaGetLastError());
}

// Thread (b, chunk c, channels d..d+V-1) owns xc rows j in [j0, j0 + kLB) (j0 = c kLB, j < J = T + W-1) of
// d xc (the gradient of [prev; x]):
//   dxc[j] = sum_i w[i] dpre[j - i] (+ dprev_out[j - T] for j >= T),  dpre[t] = dout[t] silu'(pre[t])
// and the dw terms of the positions t = j < T: dw[d, i] += dpre[t] xc[t + i]. It recomputes pre for the
// W-1 positions before its rows too (positions tb + m, tb = j0 - (W-1), m < kLB + W-1, which need xc rows
// tb .. tb + kLB + 2(W-1) - 1). Rows j < W-1 go to dprev, the others to dx token j - (W-1).
// partials (B * ntile, D * W): row b * ntile + tile = the dw sums of that token tile, written by the
// block's threads after a chunk-ordered sum in shared memory. Same grid as the forward, with chunks over J.
template <int W, int V>
__global__ void __launch_bounds__(kThreads, 2)
    k_conv_backward(bf16* __restrict__ dx, int64_t dxs, float* __restrict__ partials,
                    float* __restrict__ dprev, const bf16* __restrict__ dout,
                    const float* __restrict__ dprev_out, const bf16* __restrict__ x, int64_t xs,
                    const float* __restrict__ w, const float* __restrict__ prev, int T, int D, int ntile) {
    constexpr int P = W - 1, NT = kLB + P, NX = NT + P, NS = 2 * P > 0 ? 2 * P : 1;
    const int J = T + P;
    const int b = int(blockIdx.x) / ntile, tile = int(blockIdx.x) - b * ntile;
    const int j0 = (tile * kChunks + int(threadIdx.y)) * kLB;
    const int dbase = int(blockIdx.y) * (kLanes * V);
    const int d = dbase + int(threadIdx.x) * V;  // D % V == 0: all V channels valid when d < D

    float dwp[W][V];  // this thread's dw terms, summed over its positions in order
#pragma unroll
    for (int i = 0; i < W; ++i)
#pragma unroll
        for (int v = 0; v < V; ++v) dwp[i][v] = 0.f;

    if (j0 < J && d < D) {  // no early return: the whole block meets at the __syncthreads below
        const int tb = j0 - P;
        const bf16* xb = x + int64_t(b) * T * xs + d;
        const bf16* gb = dout + int64_t(b) * T * D + d;
        // All loads first (x rows, dout rows, then w and the window), so they are in flight together. Row
        // offsets are stepped by the stride (one 64-bit add per row, no multiply).
        raw_t<V> xr[NX];  // xr[m] = x token tb + m - P (xc row tb + m); 0 outside [0, T)
#pragma unroll
        for (int m = 0; m < NX; ++m) {
            const int t = tb + m - P;
            xr[m] = (t >= 0 && t < T) ? raw_ldg<V>(xb + int64_t(t) * xs) : raw_zero<V>();
        }
        raw_t<V> gr[NT];  // gr[m] = dout at position tb + m; 0 outside [0, T)
#pragma unroll
        for (int m = 0; m < NT; ++m) {
            const int t = tb + m;
            gr[m] = (t >= 0 && t < T) ? raw_ldg<V>(gb + int64_t(t) * D) : raw_zero<V>();
        }
        float wr[W][V];
#pragma unroll
        for (int v = 0; v < V; ++v)
#pragma unroll
            for (int i = 0; i < W; ++i) wr[i][v] = __ldg(w + (d + v) * W + i);
        // xc rows tb .. tb+2P-1 in fp32. Chunk 0 (tb = -P): rows < 0 are zero padding, rows 0..P-1 the
        // carried window (zeros when prev is null). Later chunks (j0 >= kLB >= 2P): x rows, from xr.
        float pw[NS][V];
#pragma unroll
        for (int m = 0; m < 2 * P; ++m) {
            const int j = tb + m;
#pragma unroll
            for (int v = 0; v < V; ++v)
                pw[m][v] = j0 == 0 ? ((j >= 0 && prev) ? __ldg(prev + (int64_t(b) * P + j) * D + d + v) : 0.f)
                                   : raw_get<V>(xr[m], v);
        }
        auto xf = [&](int m, int v) { return m < 2 * P ? pw[m][v] : raw_get<V>(xr[m], v); };  // xc row tb + m

        // One pass over the positions; the dx row of position m is emitted as soon as its W dpre exist,
        // so only a window of dpre stays live.
        float dpv[NT][V];  // dpre at position tb + m (0 outside [0, T): dout is 0 there)
#pragma unroll
        for (int m = 0; m < NT; ++m) {
#pragma unroll
            for (int v = 0; v < V; ++v) {
                float pre = 0.f;
#pragma unroll
                for (int i = 0; i < W; ++i) pre += wr[i][v] * xf(m + i, v);
                const float s = W <= 4 ? fast_sigmoid(pre) : detail::sigmoidf_(pre);  // see kFwdMinBlocks
                dpv[m][v] = raw_get<V>(gr[m], v) * s * (1.f + pre * (1.f - s));
                if (m >= P) {  // position j0 + (m - P) is one of this thread's rows: its dw terms
#pragma unroll
                    for (int i = 0; i < W; ++i) dwp[i][v] += dpv[m][v] * xf(m + i, v);
                }
            }
            if (m >= P) {
                const int j = j0 + (m - P);  // xc row
                if (j < J) {
                    float acc[V];
#pragma unroll
                    for (int v = 0; v < V; ++v) {
                        acc[v] = 0.f;
#pragma unroll
                        for (int i = 0; i < W; ++i) acc[v] += wr[i][v] * dpv[m - i][v];
                        if (dprev_out && j >= T)
                            acc[v] += __ldg(dprev_out + (int64_t(b) * P + (j - T)) * D + d + v);
                    }
                    if (j < P) {
                        if (dprev) {
#pragma unroll
                            for (int v = 0; v < V; ++v) dprev[(int64_t(b) * P + j) * D + d + v] = acc[v];
                        }
                    } else {
                        raw_st<V>(dx + (int64_t(b) * T + (j - P)) * dxs + d, raw_pack<V>(acc));
                    }
                }
            }
        }
    }

    if (partials) {  // block-uniform
        // s_dw[y][lane * SW + v * W + i] = dwp[i][v] of thread (lane, y); SW odd: conflict-free writes.
        constexpr int VW = V * W, SW = VW | 1;
        __shared__ float s_dw[kChunks][kLanes * SW];
#pragma unroll
        for (int v = 0; v < V; ++v)
#pragma unroll
            for (int i = 0; i < W; ++i) s_dw[threadIdx.y][threadIdx.x * SW + v * W + i] = dwp[i][v];
        __syncthreads();
        const int nch = (J + kLB - 1) / kLB;
        const int ny = min(kChunks, nch - tile * kChunks);  // chunks of this tile inside the sequence, >= 1
        // This block's slice of the partial row: channels [dbase, dbase + kLanes V) x W taps, contiguous;
        // column col = (lane V + v) W + i.
        float* pr = partials + (int64_t(b) * ntile + tile) * (int64_t(D) * W) + int64_t(dbase) * W;
        const int ncol = min(kLanes * V, D - dbase) * W;
        for (int col = int(threadIdx.y) * kLanes + int(threadIdx.x); col < ncol; col += kThreads) {
            const int si = (col / VW) * SW + col % VW;
            float s = s_dw[0][si];
            for (int y = 1; y < ny; ++y) s += s_dw[y][si];
            pr[col] = s;
        }
    }
}

bool aligned(const void* p, int bytes) {
    return reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) == 0;
}

// Chunks of L rows, token tiles, channel tiles of a (B, rows, D) launch, with the int32 / grid-size checks.
struct ConvGrid {
    int ntile = 0;
    dim3 grid, block;
};
ConvGrid conv_grid(int64_t B, int64_t rows, int64_t D, int V, int L, const char* what) {
    HYDRA_CUDA_REQUIRE(rows <= (int64_t(1) << 30) && D <= (int64_t(1) << 26),
                       std::string(what) + ": T or D too large for the int32 index math");
    const int64_t nch = (rows + L - 1) / L, ntile = (nch + kChunks - 1) / kChunks;
    const int64_t ctiles = (D + int64_t(kLanes) * V - 1) / (int64_t(kLanes) * V);
    HYDRA_CUDA_REQUIRE(B * ntile <= INT_MAX && ctiles <= 65535,
                       std::string(what) + ": launch grid too large");
    ConvGrid g;
    g.ntile = int(ntile);
    g.grid = dim3(unsigned(B * ntile), unsigned(ctiles));
    g.block = dim3(kLanes, kChunks);
    return g;
}

template <int W, int V>
void forward_w(bf16* out, float* prev_out, const bf16* x, int64_t xs, const float* w, const float* prev,
               int64_t B, int64_t T, int64_t D, cudaStream_t stream, const int32_t* slots,
               int64_t slot_stride) {
    if (T > 0) {
        const ConvGrid g = conv_grid(B, T, D, V, kLF, "short_conv_forward");
        k_conv_forward<W, V><<<g.grid, g.block, 0, stream>>>(out, x, xs, w, prev, int(T), int(D), g.ntile,
                                                             slots, slot_stride);
        CUDA_CHECK(cudaGetLastError());
    }
    if (prev_out && W > 1) {
        k_conv_next_prev<W><<<detail::grid_for(B * D, 256), 256, 0, stream>>>(prev_out, x, xs, prev, B, T, D,
                                                                              slots, slot_stride);
        CUDA_CHECK(cudaGetLastError());
    }
}

template <int W, int V>
void backward_w(bf16* dx, int64_t dxs, float* dw, float* dprev, const bf16* dout, const float* dprev_out,
                const bf16* x, int64_t xs, const float* w, const float* prev, int64_t B, int64_t T, int64_t D,
                cudaStream_t stream) {
    const int64_t J = T + W - 1;
    if (J <= 0) return;  // W = 1 and T = 0: nothing to write
    const ConvGrid g = conv_grid(B, J, D, V, kLB, "short_conv_backward");
    const int64_t nparts = B * g.ntile;
    detail::Scratch part(dw ? size_t(nparts * D * W) : 0, stream);
    k_conv_backward<W, V><<<g.grid, g.block, 0, stream>>>(dx, dxs, part.get(), dprev, dout, dprev_out, x, xs,
                                                          w, prev, int(T), int(D), g.ntile);
    CUDA_CHECK(cudaGetLastError());
    if (dw) detail::accumulate_partials(dw, part.get(), nparts, D * W, D * W, stream);
    part.release();
}

template <int V>
void forward_v(bf16* out, float* prev_out, const bf16* x, int64_t xs, const float* w, const float* prev,
               int64_t B, int64_t T, int64_t D, int64_t W, cudaStream_t stream,
               const int32_t* slots = nullptr, int64_t slot_stride = 0) {
#define FWD(w_) forward_w<w_, V>(out, prev_out, x, xs, w, prev, B, T, D, stream, slots, slot_stride)
    HYDRA_DISPATCH_1_TO_8(W, FWD, "short_conv: kernel width")
#undef FWD
}

template <int V>
void backward_v(bf16* dx, int64_t dxs, float* dw, float* dprev, const bf16* dout, const float* dprev_out,
                const bf16* x, int64_t xs, const float* w, const float* prev, int64_t B, int64_t T, int64_t D,
                int64_t W, cudaStream_t stream) {
#define BWD(w_) backward_w<w_, V>(dx, dxs, dw, dprev, dout, dprev_out, x, xs, w, prev, B, T, D, stream)
    HYDRA_DISPATCH_1_TO_8(W, BWD, "short_conv: kernel width")
#undef BWD
}

}  // namespace

void short_conv_forward(bf16* out, float* prev_out, const bf16* x, int64_t x_stride, const float* w,
                        const float* prev, int64_t B, int64_t T, int64_t D, int64_t W, cudaStream_t stream) {
    if (B <= 0 || D <= 0 || T < 0) return;
    if (x_stride == 0) x_stride = D;
    HYDRA_CUDA_REQUIRE(x_stride >= D, "short_conv_forward: row stride below the channel count");
    // Widest access every row start allows (x rows x_stride apart, out rows D apart), bf16x2 at most:
    // 8-byte words would double the packed rows in registers (spills at W >= 5 under the 64-register
    // bound) for no gain in coalescing (a warp's bf16x2 row access is already one 128-byte line).
    auto fits = [&](int v) {
        return D % v == 0 && x_stride % v == 0 && aligned(x, 2 * v) && aligned(out, 2 * v);
    };
    if (fits(2))
        forward_v<2>(out, prev_out, x, x_stride, w, prev, B, T, D, W, stream);
    else
        forward_v<1>(out, prev_out, x, x_stride, w, prev, B, T, D, W, stream);
}

void short_conv_forward_slots(bf16* out, float* windows, const int32_t* slots, int64_t slot_stride,
                              const bf16* x, int64_t x_stride, const float* w, int64_t B, int64_t T,
                              int64_t D, int64_t W, cudaStream_t stream) {
    if (B <= 0 || D <= 0 || T < 0) return;
    if (x_stride == 0) x_stride = D;
    HYDRA_CUDA_REQUIRE(x_stride >= D, "short_conv_forward_slots: row stride below the channel count");
    HYDRA_CUDA_REQUIRE(windows != nullptr && slots != nullptr && slot_stride >= (W - 1) * D,
                       "short_conv_forward_slots: windows, slots and a slot stride >= (W-1) D are required");
    auto fits = [&](int v) {
        return D % v == 0 && x_stride % v == 0 && aligned(x, 2 * v) && aligned(out, 2 * v);
    };
    if (fits(2))
        forward_v<2>(out, windows, x, x_stride, w, windows, B, T, D, W, stream, slots, slot_stride);
    else
        forward_v<1>(out, windows, x, x_stride, w, windows, B, T, D, W, stream, slots, slot_stride);
}

void short_conv_decode_qkv(const ConvDecodeGroups& g, const bf16* x, int64_t x_stride, const int32_t* slots,
                           int64_t slot_stride, int64_t B, int64_t D, int64_t W, cudaStream_t stream) {
    if (B <= 0 || D <= 0) return;
    HYDRA_CUDA_REQUIRE(x_stride >= 3 * D && B * 3 * D < (int64_t(1) << 31),
                       "short_conv_decode_qkv: x rows at least 3 D apart, B 3 D < 2^31");
    HYDRA_CUDA_REQUIRE(!slots || slot_stride >= (W - 1) * D,
                       "short_conv_decode_qkv: a slot stride >= (W-1) D is required");
    for (int i = 0; i < 3; ++i)
        HYDRA_CUDA_REQUIRE(g.out[i] && g.w[i] && (g.windows[i] || W == 1),
                           "short_conv_decode_qkv: every group needs an output, weights and (W > 1) windows");
#define DEC(w_) decode_qkv_w<w_>(g, x, x_stride, slots, slot_stride, B, D, stream)
    HYDRA_DISPATCH_1_TO_8(W, DEC, "short_conv_decode_qkv: kernel width")
#undef DEC
}

void short_conv_backward(bf16* dx, int64_t dx_stride, float* dw, float* dprev, const bf16* dout,
                         const float* dprev_out, const bf16* x, int64_t x_stride, const float* w,
                         const float* prev, int64_t B, int64_t T, int64_t D, int64_t W, cudaStream_t stream) {
    if (B <= 0 || D <= 0 || T < 0) return;
    if (x_stride == 0) x_stride = D;
    if (dx_stride == 0) dx_stride = D;
    HYDRA_CUDA_REQUIRE(x_stride >= D && dx_stride >= D,
                       "short_conv_backward: row stride below the channel count");
    // bf16x2 at most: the backward keeps ~2 (kLB + W) packed rows per thread in registers;
    // 8-byte words would double them and cut the occupancy. V changes only which thread owns a channel,
    // never a summation order, so every V gives the same bits.
    const bool v2 = D % 2 == 0 && x_stride % 2 == 0 && dx_stride % 2 == 0 && aligned(x, 4) &&
                    aligned(dx, 4) && aligned(dout, 4);
    if (v2)
        backward_v<2>(dx, dx_stride, dw, dprev, dout, dprev_out, x, x_stride, w, prev, B, T, D, W, stream);
    else
        backward_v<1>(dx, dx_stride, dw, dprev, dout, dprev_out, x, x_stride, w, prev, B, T, D, W, stream);
}

}  // namespace hydra::cuda
