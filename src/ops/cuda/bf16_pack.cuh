// Packed bf16 vectors for the CUDA kernels that move bf16 element-wise (short_conv.cu, gated_rmsnorm.cu,
// gdn_chunk.cu): V = 1 or 2 consecutive bf16 held as one raw 16- or 32-bit word (element 0 in the low half),
// loaded and stored with one access and widened to fp32 only where used (`using namespace bf16_pack;` in a
// .cu file). Not a public API.
#pragma once

#include <cuda_bf16.h>

namespace hydra::cuda::bf16_pack {

template <int V>
struct RawT;
template <>
struct RawT<1> {
    using type = unsigned short;
};
template <>
struct RawT<2> {
    using type = unsigned int;
};
template <int V>
using raw_t = typename RawT<V>::type;

template <int V>
__device__ __forceinline__ raw_t<V> raw_zero() {
    return raw_t<V>(0);
}
// Plain load of V bf16 at p (p aligned to 2 V bytes): for pointers that may alias an output (each element
// read before it is written, by the same thread).
template <int V>
__device__ __forceinline__ raw_t<V> raw_ld(const __nv_bfloat16* p) {
    return *reinterpret_cast<const raw_t<V>*>(p);
}
// Read-only (non-coherent cache) load: pure inputs only.
template <int V>
__device__ __forceinline__ raw_t<V> raw_ldg(const __nv_bfloat16* p) {
    return __ldg(reinterpret_cast<const raw_t<V>*>(p));
}
template <int V>
__device__ __forceinline__ void raw_st(__nv_bfloat16* p, raw_t<V> r) {
    *reinterpret_cast<raw_t<V>*>(p) = r;
}
// Element v (compile-time after unrolling) as fp32: bf16 is the top half of an fp32, so this is exact.
template <int V>
__device__ __forceinline__ float raw_get(const raw_t<V>& r, int v) {
    if constexpr (V == 1) {
        return __uint_as_float(unsigned(r) << 16);
    } else {
        return __uint_as_float(v == 0 ? r << 16 : r & 0xffff0000u);
    }
}
__device__ __forceinline__ unsigned bf16_bits(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
// V floats rounded to bf16 (round to nearest even) and packed.
template <int V>
__device__ __forceinline__ raw_t<V> raw_pack(const float (&f)[V]) {
    if constexpr (V == 1) {
        return raw_t<1>(bf16_bits(f[0]));
    } else {
        return bf16_bits(f[0]) | (bf16_bits(f[1]) << 16);
    }
}

}  // namespace hydra::cuda::bf16_pack
