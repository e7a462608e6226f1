// Row writes into the paged KV pool (see paged_kv_write.h): one block per (row, K or V), 16-byte chunks when
// the width and every base allow, else single bf16 values.
#include "gpu/paged_kv_write.h"

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

constexpr int kThreads = 128;

__device__ __forceinline__ void copy_row(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t width,
                                         bool vec16) {
    if (vec16) {
        for (int64_t i = threadIdx.x; i < width / 8; i += blockDim.x)
            reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    } else {
        for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
    }
}

// grid (B, 2): blockIdx.y 0 = K, 1 = V.
__global__ void k_write_kv_paged(__nv_bfloat16* k_pool, __nv_bfloat16* v_pool, const __nv_bfloat16* k,
                                 const __nv_bfloat16* v, int64_t ld, int64_t width, const int32_t* pos,
                                 const int32_t* slots, const int32_t* table, int64_t max_blocks, int64_t bs,
                                 bool vec16) {
    const int64_t b = blockIdx.x, p = pos[b];
    const int64_t blk = table[int64_t(slots[b]) * max_blocks + p / bs];
    __nv_bfloat16* dst = (blockIdx.y == 0 ? k_pool : v_pool) + (blk * bs + p % bs) * width;
    copy_row(dst, (blockIdx.y == 0 ? k : v) + b * ld, width, vec16);
}

// grid (T, 2): position row0 + blockIdx.x; to_blocks: rows -> blocks, else blocks -> rows.
__global__ void k_copy_rows_blocks(__nv_bfloat16* k_pool, __nv_bfloat16* v_pool, __nv_bfloat16* k,
                                   __nv_bfloat16* v, int64_t row0, int64_t width, const int32_t* table_row,
                                   int64_t bs, bool vec16, bool to_blocks) {
    const int64_t t = row0 + blockIdx.x;
    const int64_t blk = table_row[t / bs];
    __nv_bfloat16* pooled = (blockIdx.y == 0 ? k_pool : v_pool) + (blk * bs + t % bs) * width;
    __nv_bfloat16* row = (blockIdx.y == 0 ? k : v) + t * width;
    if (to_blocks)
        copy_row(pooled, row, width, vec16);
    else
        copy_row(row, pooled, width, vec16);
}

bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

}  // namespace

void write_kv_paged(__nv_bfloat16* k_pool, __nv_bfloat16* v_pool, const __nv_bfloat16* k,
                    const __nv_bfloat16* v, int64_t ld, int64_t width, int64_t B, const int32_t* pos,
                    const int32_t* slots, const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                    cudaStream_t stream) {
    HYDRA_ASSERT(width > 0 && ld >= width && B > 0 && B < (int64_t(1) << 31) && pos && slots && block_table &&
                     block_size > 0,
                 "write_kv_paged: width {} ld {} B {}", width, ld, B);
    const bool vec16 = width % 8 == 0 && ld % 8 == 0 && aligned16(k_pool) && aligned16(v_pool) &&
                       aligned16(k) && aligned16(v);
    k_write_kv_paged<<<dim3(unsigned(B), 2), kThreads, 0, stream>>>(
        k_pool, v_pool, k, v, ld, width, pos, slots, block_table, max_blocks, block_size, vec16);
    CUDA_CHECK(cudaGetLastError());
}

namespace {

void copy_rows_blocks(__nv_bfloat16* k_pool, __nv_bfloat16* v_pool, __nv_bfloat16* k, __nv_bfloat16* v,
                      int64_t row0, int64_t T, int64_t width, const int32_t* table_row, int64_t block_size,
                      bool to_blocks, cudaStream_t stream) {
    if (T <= 0) return;
    HYDRA_ASSERT(width > 0 && row0 >= 0 && T < (int64_t(1) << 31) && table_row && block_size > 0,
                 "paged KV row copy: width {} row0 {} T {}", width, row0, T);
    const bool vec16 =
        width % 8 == 0 && aligned16(k_pool) && aligned16(v_pool) && aligned16(k) && aligned16(v);
    k_copy_rows_blocks<<<dim3(unsigned(T), 2), kThreads, 0, stream>>>(
        k_pool, v_pool, k, v, row0, width, table_row, block_size, vec16, to_blocks);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void copy_rows_to_blocks(__nv_bfloat16* k_pool, __nv_bfloat16* v_pool, const __nv_bfloat16* k_src,
                         const __nv_bfloat16* v_src, int64_t row0, int64_t T, int64_t width,
                         const int32_t* table_row, int64_t block_size, cudaStream_t stream) {
    // the kernel only reads the rows on this path
    copy_rows_blocks(k_pool, v_pool, const_cast<__nv_bfloat16*>(k_src), const_cast<__nv_bfloat16*>(v_src),
                     row0, T, width, table_row, block_size, true, stream);
}

void copy_blocks_to_rows(__nv_bfloat16* k_dst, __nv_bfloat16* v_dst, const __nv_bfloat16* k_pool,
                         const __nv_bfloat16* v_pool, int64_t T, int64_t width, const int32_t* table_row,
                         int64_t block_size, cudaStream_t stream) {
    // the kernel only reads the pools on this path
    copy_rows_blocks(const_cast<__nv_bfloat16*>(k_pool), const_cast<__nv_bfloat16*>(v_pool), k_dst, v_dst, 0,
                     T, width, table_row, block_size, false, stream);
}

}  // namespace hydra::gpu
