// Writes into the paged FA KV pool (gpu/paged_kv_pool.h): key / value rows of n_kv * Dh bf16 go to position
// p of a sequence = offset p % block_size of block table[p / block_size] of that sequence's block table.
//   write_kv_paged: a batched decode step's new rows (row b of sequence slots[b] at position pos[b], both
//                   read on the device: the CUDA-graph form, like gpu/decode_step.h's write_kv_row);
//   copy_rows_to_blocks: a prefilled sequence's rows [row0, row0 + T) from a contiguous cache
//                        (gpu/gpu_cache.h) into its blocks (table_row: that sequence's row of the block
//                        table, device); copy_blocks_to_rows: the way back, rows [0, T) (a continued prompt
//                        runs on the contiguous cache).
// Every CUDA call is checked (hydra::Error on failure); asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

// k_pool, v_pool: (blocks, block_size, width) bf16; k, v: row b at k + b * ld (width contiguous bf16).
void write_kv_paged(__nv_bfloat16* k_pool, __nv_bfloat16* v_pool, const __nv_bfloat16* k,
                    const __nv_bfloat16* v, int64_t ld, int64_t width, int64_t B, const int32_t* pos,
                    const int32_t* slots, const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                    cudaStream_t stream);

// k_src, v_src: (>= row0 + T, width) bf16 contiguous; row r goes to position r.
void copy_rows_to_blocks(__nv_bfloat16* k_pool, __nv_bfloat16* v_pool, const __nv_bfloat16* k_src,
                         const __nv_bfloat16* v_src, int64_t row0, int64_t T, int64_t width,
                         const int32_t* table_row, int64_t block_size, cudaStream_t stream);
// k_dst, v_dst: (>= T, width) bf16 contiguous, rows [0, T) OVERWRITTEN with positions [0, T).
void copy_blocks_to_rows(__nv_bfloat16* k_dst, __nv_bfloat16* v_dst, const __nv_bfloat16* k_pool,
                         const __nv_bfloat16* v_pool, int64_t T, int64_t width, const int32_t* table_row,
                         int64_t block_size, cudaStream_t stream);

}  // namespace hydra::gpu
