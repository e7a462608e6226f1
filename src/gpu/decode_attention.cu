// Split-key decode attention over one contiguous cache (see decode_attention.h): one kernel, grid (splits,
// n_q), one block per split of a head's keys; the head's last block to finish merges its splits. The device
// code is gpu/decode_attention_core.cuh's, shared with the paged kernel.
#include "gpu/decode_attention.h"

#include <cmath>

#include "core/error.h"
#include "gpu/decode_attention_core.cuh"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_arena.h"

namespace hydra::gpu {

namespace {

using decode_core::kDecodeWarps;
using decode_core::kLog2e;

// L keys by value, or (graph form) from kv_len when it runs: the grid is sized for the largest L and the
// blocks past L's splits exit. workspace: kCounterSlots counters, then the partials (h, split).
template <int D>
__global__ void __launch_bounds__(kDecodeWarps * 32)
    decode_attn_kernel(__nv_bfloat16* __restrict__ o, float* __restrict__ workspace,
                       const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                       const __nv_bfloat16* __restrict__ v, const int32_t* __restrict__ kv_index, int n_kv,
                       int L, const int32_t* __restrict__ kv_len, float scale2,
                       const int32_t* __restrict__ window, int sinks) {
    const int split = blockIdx.x, h = blockIdx.y;
    if (kv_len) L = *kv_len;
    const int nsplit = int(decode_attention_splits(L)), kps = int(decode_keys_per_split(L));
    if (split >= nsplit) return;
    const int j0 = split * kps, j1 = min(L, j0 + kps);
    // a sliding window W > 0 hides the keys [sinks, L - W) from the query at position L - 1
    const int W = window ? window[h] : 0;
    const int hide_lo = W > 0 ? sinks : L, hide_hi = W > 0 ? L - W : L;
    const size_t row = size_t(n_kv) * D, off = size_t(kv_index[h]) * D;
    float* partials = workspace + decode_core::kCounterSlots + size_t(h) * nsplit * decode_partial_floats(D);
    decode_core::split_partial<D>(
        partials + size_t(split) * decode_partial_floats(D), q + size_t(h) * D, k, v,
        [=](int j) { return size_t(j) * row + off; }, j0, j1, hide_lo, hide_hi, scale2);
    if (decode_core::last_split_of_head(reinterpret_cast<int*>(workspace) + h, nsplit))
        decode_core::merge_partials<D>(o + size_t(h) * D, partials, nsplit);
}

// Both forms: grid (splits, n_q); kv_len null = L by value.
void launch(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
            const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D, int64_t L, const int32_t* kv_len,
            int64_t splits, float scale, float* workspace, cudaStream_t stream, const DecodeWindows& win) {
    HYDRA_ASSERT(reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(k) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(v) % 16 == 0,
                 "decode attention: q, K and V must be 16-byte aligned (the split reads 16-byte pieces)");
    HYDRA_ASSERT(n_q <= decode_core::kCounterSlots, "decode attention over {} heads: at most {}", n_q,
                 decode_core::kCounterSlots);
    const dim3 grid{unsigned(splits), unsigned(n_q)};
    const float s2 = scale * kLog2e;
    if (D == 64)
        decode_attn_kernel<64><<<grid, kDecodeWarps * 32, 0, stream>>>(
            o, workspace, q, k, v, kv_index, int(n_kv), int(L), kv_len, s2, win.window, int(win.sinks));
    else
        decode_attn_kernel<128><<<grid, kDecodeWarps * 32, 0, stream>>>(
            o, workspace, q, k, v, kv_index, int(n_kv), int(L), kv_len, s2, win.window, int(win.sinks));
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

size_t decode_attention_workspace_floats(int64_t n_q, int64_t D, int64_t L) {
    return size_t(decode_core::kCounterSlots) +
           size_t(n_q) * size_t(decode_max_splits(L)) * size_t(decode_partial_floats(D));
}

void decode_attention_workspace_clear(float* workspace, cudaStream_t stream) {
    cuda::device_memset(workspace, 0, size_t(decode_core::kCounterSlots) * sizeof(float), stream);
}

float* ensure_decode_attention_workspace(cuda::DeviceBuffer<float>& buf, int64_t floats,
                                         cudaStream_t stream) {
    if (buf.size() < floats) {
        buf.resize(floats);
        decode_attention_workspace_clear(buf.data(), stream);
    }
    return buf.data();
}

void decode_attention(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                      const __nv_bfloat16* v, const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D,
                      int64_t L, float scale, float* partials, cudaStream_t stream,
                      const DecodeWindows& windows) {
    HYDRA_ASSERT(D == 64 || D == 128, "decode_attention: head dim {} (64 or 128)", D);
    HYDRA_ASSERT(n_q > 0 && n_kv > 0 && L > 0 && L < (int64_t(1) << 31),
                 "decode_attention: n_q {} n_kv {} L {}", n_q, n_kv, L);
    HYDRA_ASSERT(kv_index != nullptr, "decode_attention: kv_index is required");
    launch(o, q, k, v, kv_index, n_q, n_kv, D, L, nullptr, decode_attention_splits(L), scale, partials,
           stream, windows);
}

void decode_attention_dev(__nv_bfloat16* o, const __nv_bfloat16* q, const __nv_bfloat16* k,
                          const __nv_bfloat16* v, const int32_t* kv_index, int64_t n_q, int64_t n_kv,
                          int64_t D, const int32_t* kv_len, int64_t max_splits, float scale, float* partials,
                          cudaStream_t stream, const DecodeWindows& windows) {
    HYDRA_ASSERT(D == 64 || D == 128, "decode_attention_dev: head dim {} (64 or 128)", D);
    HYDRA_ASSERT(n_q > 0 && n_kv > 0 && max_splits > 0 && max_splits <= kMaxDecodeSplits,
                 "decode_attention_dev: n_q {} n_kv {} max_splits {}", n_q, n_kv, max_splits);
    HYDRA_ASSERT(kv_index != nullptr && kv_len != nullptr,
                 "decode_attention_dev: kv_index and kv_len are required");
    launch(o, q, k, v, kv_index, n_q, n_kv, D, 0, kv_len, max_splits, scale, partials, stream, windows);
}

}  // namespace hydra::gpu
