// Rotary position embedding on the GPU (see rope.h), NEOX pairing (i, i + R/2). One thread per group of
// 1, 2 or 4 rotated pairs, laid out by token row; the angles come from an fp32 cos/sin table or are
// computed per pair in double.
#include "ops/cuda/rope.h"

#include <algorithm>
#include <cmath>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/layer_util.cuh"

namespace hydra::cuda {

namespace {

constexpr int kThreads = 256;

// The inverse frequency of pair i for a call reaching sequence length L (dynamic NTK: see RopeFreqs; the
// same expressions as model/rope_scaling.cpp's).
__device__ __forceinline__ double inv_freq_at(const RopeFreqs& f, int64_t i, int64_t L, int64_t rope_dim) {
    if (f.ntk_factor > 0 && L > f.ntk_original) {
        const double R = double(rope_dim);
        const double base =
            f.theta *
            pow(f.ntk_factor * double(L) / double(f.ntk_original) - (f.ntk_factor - 1.0), R / (R - 2.0));
        return pow(base, -2.0 * double(i) / R);
    }
    return f.inv_freq[i];
}

__global__ void k_rope_table(float* __restrict__ cos_t, float* __restrict__ sin_t, int64_t T,
                             int64_t rope_dim, int64_t pos0, const __grid_constant__ RopeFreqs f) {
    const int64_t half = rope_dim / 2, total = T * half;
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
         k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = k / half, i = k - t * half;
        double s, c;
        sincos(double(pos0 + t) * inv_freq_at(f, i, pos0 + T, rope_dim), &s, &c);
        cos_t[k] = float(double(f.scale) * c);
        sin_t[k] = float(double(f.scale) * s);
    }
}

// x + (s * T + t) * token_stride + h * Dh is head h of token t of sequence s. Table when cos_t is not
// null, else angles from pos0 and the frequencies f, pos0 read from device memory when pos_dev is not null
// (decode in a CUDA graph). inverse = rotate by the negative angle (the backward).
//
// A work item is a group of P consecutive pairs (i .. i + P - 1, partners i + half ..), read as one
// P-element bf16 vector (and P-float table vector) when the strides and pointers allow (P = 8, 4 or 2);
// else P = 1.

// The P angles of pairs i .. i + P - 1 at position t.
template <int P>
__device__ __forceinline__ void rope_angles(float (&c)[P], float (&sn)[P], const float* __restrict__ cos_t,
                                            const float* __restrict__ sin_t, int64_t t, int64_t T,
                                            int64_t half, int64_t i, int64_t pos0, const RopeFreqs& f,
                                            int64_t rope_dim, bool inverse) {
    if (cos_t) {
        const float* cp = cos_t + t * half + i;
        const float* sp = sin_t + t * half + i;
        if constexpr (P == 4 || P == 8) {
#pragma unroll
            for (int e = 0; e < P; e += 4) {
                const float4 a = *reinterpret_cast<const float4*>(cp + e),
                             b = *reinterpret_cast<const float4*>(sp + e);
                c[e] = a.x, c[e + 1] = a.y, c[e + 2] = a.z, c[e + 3] = a.w;
                sn[e] = b.x, sn[e + 1] = b.y, sn[e + 2] = b.z, sn[e + 3] = b.w;
            }
        } else if constexpr (P == 2) {
            const float2 a = *reinterpret_cast<const float2*>(cp), b = *reinterpret_cast<const float2*>(sp);
            c[0] = a.x, c[1] = a.y, sn[0] = b.x, sn[1] = b.y;
        } else {
            c[0] = cp[0], sn[0] = sp[0];
        }
    } else {
#pragma unroll
        for (int e = 0; e < P; ++e) {
            double sd, cd;
            sincos(double(pos0 + t) * inv_freq_at(f, i + e, pos0 + T, rope_dim), &sd, &cd);
            c[e] = float(double(f.scale) * cd);
            sn[e] = float(double(f.scale) * sd);
        }
    }
#pragma unroll
    for (int e = 0; e < P; ++e)
        if (inverse) sn[e] = -sn[e];
}

// P bf16 at p as floats and back (p aligned to 2 P bytes).
template <int P>
__device__ __forceinline__ void load_bf16(float (&f)[P], const bf16* p) {
    if constexpr (P == 1) {
        f[0] = __bfloat162float(*p);
    } else if constexpr (P == 8) {  // one 16-byte load
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w[e]));
            f[2 * e] = v.x, f[2 * e + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int e = 0; e < P; e += 2) {
            const float2 v = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(p)[e / 2]);
            f[e] = v.x, f[e + 1] = v.y;
        }
    }
}
template <int P>
__device__ __forceinline__ void store_bf16(bf16* p, const float (&f)[P]) {
    if constexpr (P == 1) {
        *p = __float2bfloat16_rn(f[0]);
    } else if constexpr (P == 2) {
        *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(f[0], f[1]);
    } else if constexpr (P == 8) {  // one 16-byte store
        uint32_t w[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const __nv_bfloat162 v = __floats2bfloat162_rn(f[2 * e], f[2 * e + 1]);
            w[e] = *reinterpret_cast<const uint32_t*>(&v);
        }
        *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        const __nv_bfloat162 a = __floats2bfloat162_rn(f[0], f[1]), b = __floats2bfloat162_rn(f[2], f[3]);
        uint2 u;
        u.x = *reinterpret_cast<const uint32_t*>(&a);
        u.y = *reinterpret_cast<const uint32_t*>(&b);
        *reinterpret_cast<uint2*>(p) = u;
    }
}

// Rotates pairs i .. i + P - 1 of the head at v (and stores the rotated pairs at `also` too, when given).
template <int P>
__device__ __forceinline__ void rope_rotate(bf16* v, int64_t i, int64_t half, const float (&c)[P],
                                            const float (&sn)[P], bf16* also = nullptr) {
    float a[P], b[P], ra[P], rb[P];
    load_bf16<P>(a, v + i);
    load_bf16<P>(b, v + i + half);
#pragma unroll
    for (int e = 0; e < P; ++e) {
        ra[e] = a[e] * c[e] - b[e] * sn[e];
        rb[e] = b[e] * c[e] + a[e] * sn[e];
    }
    store_bf16<P>(v + i, ra);
    store_bf16<P>(v + i + half, rb);
    if (also) {
        store_bf16<P>(also + i, ra);
        store_bf16<P>(also + i + half, rb);
    }
}

// One decode token: Hq + Hk heads at x rotated in place at position *pos (threads [0, (Hq + Hk) * half / P):
// one group of P pairs each), the k heads' rotated pairs also stored into k_cache's row *pos; every thread
// then copies its share of the v row and of the k heads' unrotated dims (rope_dim < Dh) into the caches.
template <int P>
__global__ void k_rope_decode_store_kv(bf16* __restrict__ x, int Hq, int Hk, int Dh, int rope_dim,
                                       const int32_t* __restrict__ pos, const __grid_constant__ RopeFreqs f,
                                       const bf16* __restrict__ v, bf16* __restrict__ k_cache,
                                       bf16* __restrict__ v_cache) {
    const int half = rope_dim / 2, groups = half / P, width = Hk * Dh, u = threadIdx.x;
    const int64_t p = int64_t(*pos);
    bf16* krow = k_cache + p * width;
    if (u < (Hq + Hk) * groups) {
        const int h = u / groups, i = (u - h * groups) * P;
        float c[P], sn[P];
        rope_angles<P>(c, sn, nullptr, nullptr, 0, 1, half, i, p, f, rope_dim, false);
        rope_rotate<P>(x + int64_t(h) * Dh, i, half, c, sn, h >= Hq ? krow + (h - Hq) * Dh : nullptr);
    }
    const bf16* k = x + int64_t(Hq) * Dh;
    bf16* vrow = v_cache + p * width;
    for (int e = u; e < width; e += blockDim.x) {
        vrow[e] = v[e];
        if (e % Dh >= rope_dim) krow[e] = k[e];  // dims past the rotated ones: copied as they are
    }
}

// Row layout (the usual case): block (U, R) with U = H * (half / P) threads per token row and R rows per
// block; the token row index is s * T + t itself, so a thread needs one division for its (h, i) and one
// for t (the table row), in int32.
template <int P>
__global__ void k_rope_rows(bf16* x, int64_t token_stride, int rows, int T, int Dh, int rope_dim,
                            const float* __restrict__ cos_t, const float* __restrict__ sin_t, int64_t pos0,
                            const int32_t* __restrict__ pos_dev, const __grid_constant__ RopeFreqs f,
                            bool inverse, int pos_per_row) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) return;
    const int half = rope_dim / 2, groups = half / P, u = threadIdx.x, h = u / groups,
              i = (u - h * groups) * P;
    const int t = row % T;
    if (pos_dev) pos0 = int64_t(pos_dev[pos_per_row ? row : 0]);
    float c[P], sn[P];
    rope_angles<P>(c, sn, cos_t, sin_t, t, T, half, i, pos0, f, rope_dim, inverse);
    rope_rotate<P>(x + int64_t(row) * token_stride + int64_t(h) * Dh, i, half, c, sn);
}

// Flat fallback (any size, int64): work item k = (s, t, h, pair i).
__global__ void k_rope_flat(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                            int64_t rope_dim, const float* __restrict__ cos_t,
                            const float* __restrict__ sin_t, int64_t pos0,
                            const int32_t* __restrict__ pos_dev, const __grid_constant__ RopeFreqs f,
                            bool inverse, int pos_per_row) {
    const int64_t half = rope_dim / 2, total = num_seqs * T * H * half;
    if (pos_dev && !pos_per_row) pos0 = int64_t(*pos_dev);
    for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
         k += int64_t(gridDim.x) * blockDim.x) {
        const int64_t i = k % half;
        int64_t r = k / half;
        const int64_t h = r % H;
        r /= H;
        const int64_t t = r % T, s = r / T;
        if (pos_dev && pos_per_row) pos0 = int64_t(pos_dev[s * T + t]);
        float c[1], sn[1];
        rope_angles<1>(c, sn, cos_t, sin_t, t, T, half, i, pos0, f, rope_dim, inverse);
        rope_rotate<1>(x + (s * T + t) * token_stride + h * Dh, i, half, c, sn);
    }
}

void launch(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
            int64_t rope_dim, const float* cos_t, const float* sin_t, int64_t pos0, const RopeFreqs& f,
            bool inverse, cudaStream_t stream, const int32_t* pos_dev = nullptr, bool pos_per_row = false) {
    if (token_stride == 0) token_stride = H * Dh;
    HYDRA_CUDA_REQUIRE(
        rope_dim % 2 == 0 && rope_dim <= Dh && token_stride >= H * Dh && rope_dim / 2 <= RopeFreqs::kMaxPairs,
        "rope: rope_dim must be even, <= head_dim and <= 2 * RopeFreqs::kMaxPairs, token stride >= H * Dh");
    const int64_t half = rope_dim / 2, rows = num_seqs * T;
    if (rows <= 0 || half <= 0 || H <= 0) return;
    // Widest vector the layout allows: every rotated element offset (row * stride + h * Dh + i, + half) a
    // multiple of P, x aligned to 2 P bytes, the table to 4 P bytes.
    const auto aligned = [](const void* p, unsigned bytes) {
        return reinterpret_cast<uintptr_t>(p) % bytes == 0;
    };
    const auto fits = [&](int64_t P) {
        return half % P == 0 && token_stride % P == 0 && Dh % P == 0 && aligned(x, unsigned(2 * P)) &&
               (!cos_t || (aligned(cos_t, unsigned(4 * P)) && aligned(sin_t, unsigned(4 * P))));
    };
    const int64_t P = fits(8) ? 8 : fits(4) ? 4 : fits(2) ? 2 : 1;
    const int64_t U = H * (half / P);
    if (U <= 1024 && rows < (int64_t(1) << 31) && T < (int64_t(1) << 31)) {
        const int64_t R = std::max<int64_t>(1, 256 / U);
        const dim3 block{unsigned(U), unsigned(R), 1u};
        const unsigned grid = unsigned((rows + R - 1) / R);
        if (P == 8)
            k_rope_rows<8><<<grid, block, 0, stream>>>(x, token_stride, int(rows), int(T), int(Dh),
                                                       int(rope_dim), cos_t, sin_t, pos0, pos_dev, f, inverse,
                                                       pos_per_row ? 1 : 0);
        else if (P == 4)
            k_rope_rows<4><<<grid, block, 0, stream>>>(x, token_stride, int(rows), int(T), int(Dh),
                                                       int(rope_dim), cos_t, sin_t, pos0, pos_dev, f, inverse,
                                                       pos_per_row ? 1 : 0);
        else if (P == 2)
            k_rope_rows<2><<<grid, block, 0, stream>>>(x, token_stride, int(rows), int(T), int(Dh),
                                                       int(rope_dim), cos_t, sin_t, pos0, pos_dev, f, inverse,
                                                       pos_per_row ? 1 : 0);
        else
            k_rope_rows<1><<<grid, block, 0, stream>>>(x, token_stride, int(rows), int(T), int(Dh),
                                                       int(rope_dim), cos_t, sin_t, pos0, pos_dev, f, inverse,
                                                       pos_per_row ? 1 : 0);
    } else {
        k_rope_flat<<<detail::grid_for(rows * H * half, kThreads), kThreads, 0, stream>>>(
            x, token_stride, num_seqs, T, H, Dh, rope_dim, cos_t, sin_t, pos0, pos_dev, f, inverse,
            pos_per_row ? 1 : 0);
    }
    CUDA_CHECK(cudaGetLastError());
}

// The table kernels never read the frequencies.
const RopeFreqs kUnused{};

}  // namespace

RopeFreqs RopeFreqs::plain(double theta, int64_t rope_dim) {
    RopeFreqs f;
    HYDRA_CUDA_REQUIRE(rope_dim % 2 == 0 && rope_dim / 2 <= kMaxPairs,
                       "rope: rope_dim out of range (even, <= 256)");
    for (int64_t i = 0; i < rope_dim / 2; ++i)
        f.inv_freq[i] = std::pow(theta, -2.0 * double(i) / double(rope_dim));
    return f;
}

void rope_table(float* cos, float* sin, int64_t T, int64_t rope_dim, int64_t pos0, double theta,
                cudaStream_t stream) {
    rope_table(cos, sin, T, rope_dim, pos0, RopeFreqs::plain(theta, rope_dim), stream);
}

void rope_table(float* cos, float* sin, int64_t T, int64_t rope_dim, int64_t pos0, const RopeFreqs& f,
                cudaStream_t stream) {
    const int64_t total = T * (rope_dim / 2);
    if (total <= 0) return;
    HYDRA_CUDA_REQUIRE(rope_dim % 2 == 0 && rope_dim / 2 <= RopeFreqs::kMaxPairs,
                       "rope_table: rope_dim out of range (even, <= 256)");
    k_rope_table<<<detail::grid_for(total, kThreads), kThreads, 0, stream>>>(cos, sin, T, rope_dim, pos0, f);
    CUDA_CHECK(cudaGetLastError());
}

void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim,
                  const float* cos, const float* sin, cudaStream_t stream) {
    launch(x, 0, num_seqs, T, H, Dh, rope_dim, cos, sin, 0, kUnused, false, stream);
}
void rope_backward(bf16* dx, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim,
                   const float* cos, const float* sin, cudaStream_t stream) {
    launch(dx, 0, num_seqs, T, H, Dh, rope_dim, cos, sin, 0, kUnused, true, stream);
}
void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  double theta, cudaStream_t stream) {
    launch(x, 0, num_seqs, T, H, Dh, rope_dim, nullptr, nullptr, pos0, RopeFreqs::plain(theta, rope_dim),
           false, stream);
}
void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  const RopeFreqs& f, cudaStream_t stream) {
    launch(x, 0, num_seqs, T, H, Dh, rope_dim, nullptr, nullptr, pos0, f, false, stream);
}
void rope_backward(bf16* dx, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim,
                   int64_t pos0, double theta, cudaStream_t stream) {
    launch(dx, 0, num_seqs, T, H, Dh, rope_dim, nullptr, nullptr, pos0, RopeFreqs::plain(theta, rope_dim),
           true, stream);
}
void rope_forward_decode(bf16* x, int64_t H, int64_t Dh, int64_t rope_dim, const int32_t* pos, double theta,
                         cudaStream_t stream) {
    rope_forward_decode(x, H, Dh, rope_dim, pos, RopeFreqs::plain(theta, rope_dim), stream);
}
void rope_forward_decode(bf16* x, int64_t H, int64_t Dh, int64_t rope_dim, const int32_t* pos,
                         const RopeFreqs& f, cudaStream_t stream) {
    HYDRA_CUDA_REQUIRE(pos != nullptr, "rope_forward_decode: the position pointer is required");
    launch(x, 0, 1, 1, H, Dh, rope_dim, nullptr, nullptr, 0, f, false, stream, pos);
}
void rope_decode_store_kv(bf16* x, int64_t Hq, int64_t Hk, int64_t Dh, int64_t rope_dim, const int32_t* pos,
                          const RopeFreqs& f, const bf16* v, bf16* k_cache, bf16* v_cache,
                          cudaStream_t stream) {
    HYDRA_CUDA_REQUIRE(pos && v && k_cache && v_cache && Hq >= 0 && Hk > 0,
                       "rope_decode_store_kv: position, v and both caches are required");
    HYDRA_CUDA_REQUIRE(
        rope_dim % 2 == 0 && rope_dim <= Dh && rope_dim / 2 <= RopeFreqs::kMaxPairs,
        "rope_decode_store_kv: rope_dim must be even, <= head_dim and <= 2 * RopeFreqs::kMaxPairs");
    const int64_t half = rope_dim / 2;
    const auto aligned = [](const void* p, unsigned bytes) {
        return reinterpret_cast<uintptr_t>(p) % bytes == 0;
    };
    const auto fits = [&](int64_t P) {
        return half % P == 0 && Dh % P == 0 && aligned(x, unsigned(2 * P)) &&
               aligned(k_cache, unsigned(2 * P));
    };
    const int64_t P = half == 0 ? 1 : fits(8) ? 8 : fits(4) ? 4 : fits(2) ? 2 : 1;
    const int64_t U = (Hq + Hk) * (half / P);
    const int threads = int(std::min<int64_t>(1024, std::max<int64_t>({U, Hk * Dh, 32})));
    HYDRA_CUDA_REQUIRE(U <= 1024, "rope_decode_store_kv: more than 1024 rotation groups for one block");
    if (P == 8)
        k_rope_decode_store_kv<8><<<1, threads, 0, stream>>>(x, int(Hq), int(Hk), int(Dh), int(rope_dim), pos,
                                                             f, v, k_cache, v_cache);
    else if (P == 4)
        k_rope_decode_store_kv<4><<<1, threads, 0, stream>>>(x, int(Hq), int(Hk), int(Dh), int(rope_dim), pos,
                                                             f, v, k_cache, v_cache);
    else if (P == 2)
        k_rope_decode_store_kv<2><<<1, threads, 0, stream>>>(x, int(Hq), int(Hk), int(Dh), int(rope_dim), pos,
                                                             f, v, k_cache, v_cache);
    else
        k_rope_decode_store_kv<1><<<1, threads, 0, stream>>>(x, int(Hq), int(Hk), int(Dh), int(rope_dim), pos,
                                                             f, v, k_cache, v_cache);
    CUDA_CHECK(cudaGetLastError());
}
void rope_forward_rows(bf16* x, int64_t token_stride, int64_t rows, int64_t H, int64_t Dh, int64_t rope_dim,
                       const int32_t* pos, const RopeFreqs& f, cudaStream_t stream) {
    HYDRA_CUDA_REQUIRE(pos != nullptr, "rope_forward_rows: the positions pointer is required");
    launch(x, token_stride, rows, 1, H, Dh, rope_dim, nullptr, nullptr, 0, f, false, stream, pos, true);
}
void rope_forward_strided(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                          int64_t rope_dim, const float* cos, const float* sin, cudaStream_t stream) {
    launch(x, token_stride, num_seqs, T, H, Dh, rope_dim, cos, sin, 0, kUnused, false, stream);
}
void rope_backward_strided(bf16* dx, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                           int64_t rope_dim, const float* cos, const float* sin, cudaStream_t stream) {
    launch(dx, token_stride, num_seqs, T, H, Dh, rope_dim, cos, sin, 0, kUnused, true, stream);
}

}  // namespace hydra::cuda
