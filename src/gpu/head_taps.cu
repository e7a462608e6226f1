// Head-output writes and row broadcasts for the GPU layer's head taps (see head_taps.h).
#include "gpu/head_taps.h"

#include <algorithm>

#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

__global__ void head_writes_kernel(__nv_bfloat16* heads, int H, int Dh, const GpuHeadWrite* writes) {
    const GpuHeadWrite w = writes[blockIdx.x];
    const int n = w.count * Dh;
    __nv_bfloat16* dst = heads + (size_t(w.row) * H + w.head) * Dh;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = w.src ? w.src[i] : __float2bfloat16(0.f);
}

template <typename T>
__global__ void broadcast_kernel(T* dst, const T* src, int64_t total, int64_t width) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
         i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = src[i % width];
}

template <typename T>
void broadcast(T* dst, const T* src, int64_t rows, int64_t width, cudaStream_t stream) {
    const int64_t total = rows * width;
    if (total == 0) return;
    const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 4096));
    broadcast_kernel<T><<<blocks, 256, 0, stream>>>(dst, src, total, width);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void apply_head_writes(__nv_bfloat16* heads, int64_t H, int64_t Dh, const GpuHeadWrite* writes, int64_t n,
                       cudaStream_t stream) {
    if (n == 0) return;
    head_writes_kernel<<<unsigned(n), 128, 0, stream>>>(heads, int(H), int(Dh), writes);
    CUDA_CHECK(cudaGetLastError());
}

void broadcast_rows(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t rows, int64_t width,
                    cudaStream_t stream) {
    broadcast(dst, src, rows, width, stream);
}

void broadcast_rows(float* dst, const float* src, int64_t rows, int64_t width, cudaStream_t stream) {
    broadcast(dst, src, rows, width, stream);
}

}  // namespace hydra::gpu
