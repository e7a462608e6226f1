// The GDN chunked backward's reverse state-gradient scan (the algorithm: gdn_chunk.cu's header): one block
// per (sequence, value head, slice of dM) walks the chunks from the last, writing d delta and the dM leaving
// each chunk for the per-chunk backward. The same variants as the forward scan (gdn_scan_policy.h).
#include "ops/cuda/bf16_pack.cuh"
#include "ops/cuda/gdn_device.cuh"
#include "ops/cuda/gdn_kernels.h"
#include "ops/cuda/mma_util.cuh"

namespace hydra::cuda::gdn {

using namespace hydra::cuda::mma;
using namespace hydra::cuda::bf16_pack;

namespace {

// The reverse scan, one block per (sequence, value head, VT-row slice of dM) with NW warps (4, 8 or 16), in
// the forward scan's shapes (gdn_scan_policy.h): warp w computes d delta rows 16 (w % 4) .. +16 for its share
// of the slice's columns; dM is held in registers over all warps (BlockGemm tiling GM).
template <int D, int VT, int ST>
struct BScanSmem {
    static constexpr int LD = D + 8, LV = VT + 8;
    bf16 QW[ST][128 * LD];  // rows 0..63: Q, rows 64..127: W
    bf16 Ks[ST][64 * LD];
    bf16 dOs[ST][64 * LV];
    bf16 Ps[ST][64 * 72];
    float gam[ST][64], rq[ST][64], rk[ST][64];
    bf16 dMb[VT * LD];
    bf16 AD[128 * LV];  // rows 0..63: scale Gamma dO, rows 64..127: -d delta
};

template <int D, int VT, int ST, int NW>
__global__ void __launch_bounds__(NW * 32) gdn_bwd_scan_kernel(BScanArgs a) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using S = BScanSmem<D, VT, ST>;
    auto& s = *reinterpret_cast<S*>(smem_raw);
    constexpr int NTH = NW * 32, LD = S::LD, LV = S::LV;
    constexpr int NCG = NW / 4, NV = VT / NCG / 8;  // column groups of d delta, n-tiles per warp
    const int v0 = blockIdx.x * VT, bj = blockIdx.y, b = bj / a.HV, j = bj % a.HV, h = j / (a.HV / a.H);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t Tp = size_t(a.NT) * kC;
    const int r0 = 16 * (warp % 4), c0 = (warp / 4) * (VT / NCG);  // this warp's tile of d delta

    auto issue = [&](int n, int st) {
        const int t0 = n * kC, L = min(kC, a.T - t0);
        const size_t qrow0 = (size_t(b) * a.T + t0) * a.H + h;
        const size_t vrow0 = (size_t(b) * a.T + t0) * a.HV + j;
        const size_t hrow0 = size_t(bj) * Tp + t0;
        load_rows<64, D, NTH>(s.QW[st], LD, a.q + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, D, NTH>(s.QW[st] + 64 * LD, LD, a.W + hrow0 * D, D, L, tid);
        load_rows<64, D, NTH>(s.Ks[st], LD, a.k + qrow0 * D, size_t(a.H) * D, L, tid);
        load_rows<64, VT, NTH>(s.dOs[st], LV, a.d_o + vrow0 * D + v0, size_t(a.HV) * D, L, tid);
        load_rows<64, 64, NTH>(s.Ps[st], 72, a.P + (size_t(bj) * a.NT + n) * (kC * kC), kC, 64, tid);
        load_chunk_scalars(s.gam[st], s.rq[st], s.rk[st], a, hrow0, tid);
        cp_async_commit();
    };

    constexpr int WR = VT / 16 < NW ? VT / 16 : NW;  // warp rows x columns of the dM tiling
    using GM = BlockGemm<VT, D, 128, WR, NW / WR, true, false>;
    float dM[GM::MT][GM::NT][4];
    GM::each(dM, warp, lane, [&](int r, int c, float& x) {
        x = a.dht ? a.dht[(size_t(bj) * D + v0 + r) * D + c] : 0.f;
        s.dMb[r * LD + c] = __float2bfloat16(x);
    });
    issue(a.NT - 1, 0);
    for (int i = 0; i < a.NT; ++i) {
        const int n = a.NT - 1 - i, st = ST == 2 ? (i & 1) : 0, t0 = n * kC, L = min(kC, a.T - t0);
        cp_async_wait_all();
        __syncthreads();
        if (ST == 2 && n > 0) issue(n - 1, st ^ 1);
        if (a.dstates)
            store_slice<D, VT, NTH>(a.dstates + ((size_t(bj) * a.NT + n) * D + v0) * D, s.dMb, tid);
        const float* gm = s.gam[st];
        const float glast = gm[L - 1];
        // d delta = diag(dec) K dM^T + scale P^T dO
        float a1[1][NV][4], a2[1][NV][4];
        zero(a1);
        zero(a2);
        warp_gemm<1, NV, D / 16, false, true>(a1, s.Ks[st] + r0 * LD, LD, s.dMb + c0 * LD, LD, lane);
        // P^T is upper triangular: rows r0 .. +16 need the k-steps from their 16-row block on
        warp_gemm<1, NV, 4, true, false>(a2, s.Ps[st] + r0, 72, s.dOs[st] + c0, LV, lane, r0 / 16, 4);
#pragma unroll
        for (int e = 0; e < 4; e += 2) {  // the accumulator's column pairs: 8- and 4-byte accesses
            const int t = r0 + frag_row(0, e, lane);
            // with k_t's 1 / norm; computed for every row, then selected (no branch in the warp)
            const float dec_t = expf(glast - gm[t]) * s.rk[st][t], dec = t < L ? dec_t : 0.f;
#pragma unroll
            for (int nt = 0; nt < NV; ++nt) {
                const int c = c0 + frag_col(nt, e, lane);
                const float d0 = dec * a1[0][nt][e] + a.scale * a2[0][nt][e];
                const float d1 = dec * a1[0][nt][e + 1] + a.scale * a2[0][nt][e + 1];
                if (t < L)
                    *reinterpret_cast<__nv_bfloat162*>(&a.ddelta[(size_t(bj) * Tp + t0 + t) * D + v0 + c]) =
                        __floats2bfloat162_rn(d0, d1);
                *reinterpret_cast<__nv_bfloat162*>(&s.AD[(64 + t) * LV + c]) =
                    __floats2bfloat162_rn(-d0, -d1);
            }
        }
        // scale diag(Gamma rq) dO: eight columns (16 bytes) at a time, the row factor once per piece
        for (int idx = tid; idx < 64 * VT / 8; idx += NTH) {
            const int t = idx / (VT / 8), c = (idx % (VT / 8)) * 8;
            const float f = a.scale * expf(gm[t]) * s.rq[st][t];
            uint4 u = *reinterpret_cast<const uint4*>(&s.dOs[st][t * LV + c]);
            raw_t<2>* w = reinterpret_cast<raw_t<2>*>(&u);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                w[e] = raw_pack<2>({raw_get<2>(w[e], 0) * f, raw_get<2>(w[e], 1) * f});
            *reinterpret_cast<uint4*>(&s.AD[t * LV + c]) = u;
        }
        __syncthreads();
        // dM0 = Gamma_L dM + [scale Gamma dO; -d delta]^T [Q; W]
        const float gl = expf(glast);
        GM::each(dM, warp, lane, [&](int, int, float& x) { x *= gl; });
        GM::run(dM, s.AD, LV, s.QW[st], LD, warp, lane);
        GM::each_pair(dM, warp, lane, [&](int r, int c, float& x0, float& x1) {
            *reinterpret_cast<__nv_bfloat162*>(&s.dMb[r * LD + c]) = __floats2bfloat162_rn(x0, x1);
        });
        if (ST == 1 && n > 0) {
            __syncthreads();
            issue(n - 1, 0);
        }
    }
    if (a.dh0)
        GM::each(dM, warp, lane,
                 [&](int r, int c, float& x) { a.dh0[(size_t(bj) * D + v0 + r) * D + c] = x; });
}

}  // namespace

namespace {

template <int D>
void launch(const BScanArgs& a, int variant, cudaStream_t st) {
    with_scan_shape<D>(variant, [&](auto shape) {
        using V = decltype(shape);
        const auto kern = gdn_bwd_scan_kernel<D, V::vt, V::st, V::nw>;
        constexpr size_t smem = sizeof(BScanSmem<D, V::vt, V::st>);
        static const bool attributed = (set_smem(kern, smem), true);  // once per kernel
        (void)attributed;
        kern<<<dim3(D / V::vt, a.B * a.HV), V::nw * 32, smem, st>>>(a);
    });
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void launch_bwd_scan(const BScanArgs& a, int D, int variant, cudaStream_t st) {
    if (D == 64)
        launch<64>(a, variant, st);
    else
        launch<128>(a, variant, st);
}

}  // namespace hydra::cuda::gdn
