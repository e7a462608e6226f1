// Device-side decode step record and the cache-row write that reads it (see decode_step.h).
#include "gpu/decode_step.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

__global__ void k_set_decode_step(int32_t* ids, DecodeStep* step, int32_t token, int32_t pos) {
    ids[0] = token;
    step->pos = pos;
    step->kv_len = pos + 1;
}

// blockIdx.y: 0 = K, 1 = V. 16-byte chunks when every address allows, else single bf16 values.
__global__ void k_write_kv_row(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* k,
                               const __nv_bfloat16* v, int64_t width, const DecodeStep* step, bool vec16) {
    const __nv_bfloat16* src = blockIdx.y == 0 ? k : v;
    __nv_bfloat16* dst = (blockIdx.y == 0 ? k_cache : v_cache) + int64_t(step->pos) * width;
    const int64_t i0 = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
    if (vec16) {
        const int64_t n = width / 8;
        for (int64_t i = i0; i < n; i += stride) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    } else {
        for (int64_t i = i0; i < width; i += stride) dst[i] = src[i];
    }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void set_decode_step(int32_t* ids, DecodeStep* step, int32_t token, int32_t pos, cudaStream_t stream) {
    HYDRA_ASSERT(ids != nullptr && step != nullptr && pos >= 0, "set_decode_step: ids, step, pos {}", pos);
    k_set_decode_step<<<1, 1, 0, stream>>>(ids, step, token, pos);
    CUDA_CHECK(cudaGetLastError());
}

void write_kv_row(__nv_bfloat16* k_cache, __nv_bfloat16* v_cache, const __nv_bfloat16* k, const __nv_bfloat16* v,
                  int64_t width, const DecodeStep* step, cudaStream_t stream) {
    HYDRA_ASSERT(width > 0 && step != nullptr, "write_kv_row: width {}", width);
    // rows start at pos * width elements: 16-byte chunks need width % 8 == 0 and 16-byte aligned bases
    const bool vec16 = width % 8 == 0 && aligned16(k_cache) && aligned16(v_cache) && aligned16(k) && aligned16(v);
    constexpr int kThreads = 128;
    const int64_t items = vec16 ? width / 8 : width;
    const unsigned blocks = unsigned(std::min<int64_t>((items + kThreads - 1) / kThreads, 64));
    k_write_kv_row<<<dim3(blocks, 2), kThreads, 0, stream>>>(k_cache, v_cache, k, v, width, step, vec16);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::gpu
