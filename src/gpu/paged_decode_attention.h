// Paged decode attention on the GPU (serving, gpu/gpu_batch_backend.h): B new query tokens, each of its own
// sequence, every FA head against that sequence's cached keys / values, which live in fixed-size blocks of a
// shared pool (gpu/paged_kv_pool.h) found through the sequence's block table. The math of
// gpu/decode_attention.h (split-K flash-decoding: gpu/decode_splits.h's splits, fp32 scores and online
// softmax with base-2 exponentials, the same split boundaries and merge), so a row's output equals the
// one-sequence kernel's on the same keys up to the position of its keys in memory.
//
//   o[b, h] = softmax_j(scale * q[b, h] . k[b, j, kv(h)]) v[b, j, kv(h)],  j in [0, pos[b] + 1)
// Layouts: q: row b at q + b * ldq, (n_q, D) bf16 heads contiguous; o: row b at o + b * ldo;
// k_pool, v_pool: (blocks, block_size, n_kv, D) bf16, key j of row b in block
// block_table[slots[b] * max_blocks + j / block_size] at offset j % block_size; pos, slots: (B) int32 in
// DEVICE memory (the kernels read them when they run, so one captured CUDA graph serves every step);
// kv_index: (n_q) device int32, the KV group of each query head (any map). D in {64, 128}.
// max_splits: key splits per (row, head) of the grid; every row's decode_attention_splits(pos[b] + 1) <=
// max_splits <= kMaxDecodeSplits (blocks past a row's last split exit at once). partials:
// paged_decode_attention_workspace_floats(B, n_q, D, max_splits) fp32 (B * n_q <= 16384), cleared once after
// allocation (gpu/decode_attention.h's ensure_decode_attention_workspace); the kernel leaves it clear. Every
// CUDA call is checked (hydra::Error on failure); asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace hydra::gpu {

size_t paged_decode_attention_workspace_floats(int64_t B, int64_t n_q, int64_t D, int64_t max_splits);

struct PagedKv {
    const __nv_bfloat16* k_pool = nullptr;
    const __nv_bfloat16* v_pool = nullptr;
    const int32_t* block_table = nullptr;  // (slots, max_blocks) device
    int64_t max_blocks = 0, block_size = 0;
};

void paged_decode_attention(__nv_bfloat16* o, int64_t ldo, const __nv_bfloat16* q, int64_t ldq,
                            const PagedKv& kv, const int32_t* kv_index, int64_t n_q, int64_t n_kv, int64_t D,
                            int64_t B, const int32_t* pos, const int32_t* slots, int64_t max_splits,
                            float scale, float* partials, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
