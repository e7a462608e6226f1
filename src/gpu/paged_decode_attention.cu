// Paged split-key decode attention (see paged_decode_attention.h): one kernel, grid (splits, n_q, B), one
// block per split of a row's head, each key's row found through the block table; the head's last block to
// finish merges the row's own number of splits. The device code is gpu/decode_attention_core.cuh's, shared
// with the one-sequence kernel.
#include "gpu/paged_decode_attention.h"

#include <cmath>

#include "core/error.h"
#include "gpu/decode_attention_core.cuh"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

using decode_core::kDecodeWarps;
using decode_core::kLog2e;

template <int D>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    paged_kernel(__nv_bfloat16* __restrict__ o, int64_t ldo, float* __restrict__ workspace,
                 const __nv_bfloat16* __restrict__ q, int64_t ldq, const __nv_bfloat16* __restrict__ k,
                 const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ table, int max_blocks,
                 int bs, const int32_t* __restrict__ kv_index, int n_kv, const int32_t* __restrict__ pos,
                 const int32_t* __restrict__ slots, float scale2) {
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z, n_q = gridDim.y, max_splits = gridDim.x;
    const int L = pos[b] + 1;
    const int nsplit = int(decode_attention_splits(L)), kps = int(decode_keys_per_split(L));
    if (split >= nsplit) return;
    const int32_t* tb = table + int64_t(slots[b]) * max_blocks;
    const int j0 = split * kps, j1 = min(L, j0 + kps);
    const size_t row = size_t(n_kv) * D, off = size_t(kv_index[h]) * D;
    const size_t head = size_t(b) * n_q + h;
    float* partials = workspace + decode_core::kCounterSlots + head * max_splits * decode_partial_floats(D);
    // key j's row in the pool: block tb[j / bs], offset j % bs
    decode_core::split_partial<D>(
        partials + size_t(split) * decode_partial_floats(D), q + int64_t(b) * ldq + size_t(h) * D, k, v,
        [=](int j) { return (size_t(tb[j / bs]) * size_t(bs) + size_t(j % bs)) * row + off; }, j0, j1, L, L,
        scale2);
    if (decode_core::last_split_of_head(reinterpret_cast<int*>(workspace) + head, nsplit))
        decode_core::merge_partials<D>(o + int64_t(b) * ldo + size_t(h) * D, partials, nsplit);
}

}  // namespace

size_t paged_decode_attention_workspace_floats(int64_t B, int64_t n_q, int64_t D, int64_t max_splits) {
    return size_t(decode_core::kCounterSlots) +
           size_t(B) * size_t(n_q) * size_t(max_splits) * size_t(decode_partial_floats(D));
}

void paged_decode_attention(__nv_bfloat16* o, int64_t ldo, const __nv_bfloat16* q, int64_t ldq,
                            const PagedKv& kv, const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D,
                            int64_t B, const int32_t* pos, const int32_t* slots, int64_t max_splits,
                            float scale, float* partials, cudaStream_t stream) {
    HYDRA_ASSERT(D == 64 || D == 128, "paged_decode_attention: head dim {} (64 or 128)", D);
    HYDRA_ASSERT(n_q > 0 && n_kv > 0 && B > 0 && B <= 65535 && n_q <= 65535 && max_splits > 0 &&
                     max_splits <= kMaxDecodeSplits,
                 "paged_decode_attention: n_q {} n_kv {} B {} max_splits {}", n_q, n_kv, B, max_splits);
    HYDRA_ASSERT(
        kv.k_pool && kv.v_pool && kv.block_table && kv.block_size > 0 && kv.max_blocks > 0 && kv_index &&
            pos && slots && partials,
        "paged_decode_attention: pools, block table, kv_index, pos, slots and partials are required");
    // the split reads 16-byte pieces of q, K and V rows
    HYDRA_ASSERT(
        ldq >= n_q * D && ldo >= n_q * D && ldq % 8 == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0 &&
            reinterpret_cast<uintptr_t>(kv.k_pool) % 16 == 0 &&
            reinterpret_cast<uintptr_t>(kv.v_pool) % 16 == 0,
        "paged_decode_attention: ldq {} ldo {} (q, K and V 16-byte aligned, ldq a multiple of 8)", ldq, ldo);
    HYDRA_ASSERT(B * n_q <= decode_core::kCounterSlots,
                 "paged decode attention over {} rows x {} heads: at most {}", B, n_q,
                 decode_core::kCounterSlots);
    const dim3 grid{unsigned(max_splits), unsigned(n_q), unsigned(B)};
    const float s2 = scale * kLog2e;
    const int mb = int(kv.max_blocks), bs = int(kv.block_size);
    if (D == 64)
        paged_kernel<64><<<grid, kDecodeWarps * 32, 0, stream>>>(o, ldo, partials, q, ldq, kv.k_pool,
                                                                 kv.v_pool, kv.block_table, mb, bs, kv_index,
                                                                 int(n_kv), pos, slots, s2);
    else
        paged_kernel<128><<<grid, kDecodeWarps * 32, 0, stream>>>(o, ldo, partials, q, ldq, kv.k_pool,
                                                                  kv.v_pool, kv.block_table, mb, bs, kv_index,
                                                                  int(n_kv), pos, slots, s2);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::gpu
