// Device bump arena, size-class caching allocator, DeviceBuffer<T>, copies and f32<->bf16 casts
// (see device_arena.h).
#include "ops/cuda/device_arena.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::cuda {

// ---- DeviceArena -------------------------------------------------------------------------------------

DeviceArena::DeviceArena(size_t capacity_bytes) : capacity_(align_up(capacity_bytes)) {
    if (capacity_ > 0) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), capacity_));
}

DeviceArena::~DeviceArena() {
    if (base_) cudaFree(base_);  // no throw from a destructor; a failure here is reported by the next call
}

void* DeviceArena::alloc_bytes(size_t bytes) {
    const size_t need = align_up(bytes);
    HYDRA_CHECK(need <= capacity_ - used_,
                "device arena full: a request of {} bytes with {} of {} bytes in use (raise the arena size)", bytes,
                used_, capacity_);
    void* p = base_ + used_;
    used_ += need;
    peak_ = std::max(peak_, used_);
    return p;
}

void DeviceArena::reset(size_t mark) {
    HYDRA_ASSERT(mark <= used_ && mark % kDeviceAlign == 0, "reset to {} with {} bytes in use", mark, used_);
    used_ = mark;
}

// ---- CachingAllocator --------------------------------------------------------------------------------

size_t CachingAllocator::size_class(size_t bytes) {
    if (bytes <= kDeviceAlign) return kDeviceAlign;
    // four classes per power of two: 2^k, 1.25 2^k, 1.5 2^k, 1.75 2^k (waste < 25%)
    size_t p = kDeviceAlign;
    while (p * 2 < bytes) p *= 2;  // p < bytes <= 2p
    const size_t step = p / 4;
    return align_up((bytes + step - 1) / step * step);
}

CachingAllocator::~CachingAllocator() {
    for (auto& [cls, list] : free_)
        for (void* p : list) cudaFree(p);
    for (auto& [p, cls] : live_) cudaFree(p);
}

void* CachingAllocator::allocate(size_t bytes) {
    if (bytes == 0) return nullptr;
    const size_t cls = size_class(bytes);
    void* p = nullptr;
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_ -= cls;
    } else {
        cudaError_t err = cudaMalloc(&p, cls);
        if (err == cudaErrorMemoryAllocation && cached_ > 0) {  // give the idle blocks back and retry once
            (void)cudaGetLastError();
            release_cached();
            err = cudaMalloc(&p, cls);
        }
        CUDA_CHECK(err);
    }
    live_[p] = cls;
    in_use_ += cls;
    peak_ = std::max(peak_, in_use_);
    return p;
}

void CachingAllocator::free(void* p) {
    if (!p) return;
    auto it = live_.find(p);
    HYDRA_CHECK(it != live_.end(), "CachingAllocator::free: pointer {} was not allocated here", p);
    const size_t cls = it->second;
    live_.erase(it);
    in_use_ -= cls;
    free_[cls].push_back(p);
    cached_ += cls;
}

void CachingAllocator::release_cached() {
    for (auto& [cls, list] : free_) {
        for (void* p : list) CUDA_CHECK(cudaFree(p));
        list.clear();
    }
    cached_ = 0;
}

// ---- checked primitives ------------------------------------------------------------------------------

void* device_malloc(size_t bytes) {
    HYDRA_CHECK(bytes != size_t(-1) && int64_t(bytes) >= 0, "device_malloc: negative size");
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

void device_free(void* p) {
    if (p) CUDA_CHECK(cudaFree(p));
}

void device_memset(void* p, int byte, size_t bytes, cudaStream_t stream) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, byte, bytes, stream));
}

// ---- copies ------------------------------------------------------------------------------------------

void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
}
void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
}
void copy_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

std::vector<float> download_f32(const float* d, int64_t n, cudaStream_t stream) {
    std::vector<float> h(size_t(std::max<int64_t>(n, 0)));
    copy_to_host(h.data(), d, h.size() * sizeof(float), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return h;
}

std::vector<float> download_bf16_as_f32(const bf16* d, int64_t n, cudaStream_t stream) {
    // bf16 bits in uint16_t host storage (std::vector<bf16> trips nvcc's C++20 constexpr construct_at)
    std::vector<uint16_t> b(size_t(std::max<int64_t>(n, 0)));
    copy_to_host(b.data(), d, b.size() * sizeof(uint16_t), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> h(b.size());
    for (size_t i = 0; i < b.size(); ++i) {
        const uint32_t bits = uint32_t(b[i]) << 16;
        std::memcpy(&h[i], &bits, 4);
    }
    return h;
}

void upload_f32_as_bf16(bf16* d, const float* host, int64_t n, cudaStream_t stream) {
    std::vector<uint16_t> b(size_t(std::max<int64_t>(n, 0)));
    for (size_t i = 0; i < b.size(); ++i) {
        const bf16 x = __float2bfloat16(host[i]);
        std::memcpy(&b[i], &x, 2);
    }
    copy_to_device(d, b.data(), b.size() * sizeof(uint16_t), stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // b is freed on return
}

// ---- casts -------------------------------------------------------------------------------------------

namespace {

__global__ void f32_to_bf16_kernel(const float* __restrict__ src, bf16* __restrict__ dst, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = __float2bfloat16(src[i]);
}

__global__ void bf16_to_f32_kernel(const bf16* __restrict__ src, float* __restrict__ dst, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = __bfloat162float(src[i]);
}

int grid_for(int64_t n, int threads) {
    return int(std::min<int64_t>((n + threads - 1) / threads, 132 * 16));
}

}  // namespace

void cast_f32_to_bf16(const float* src, bf16* dst, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    f32_to_bf16_kernel<<<grid_for(n, 256), 256, 0, stream>>>(src, dst, n);
    CUDA_CHECK(cudaGetLastError());
}

void cast_bf16_to_f32(const bf16* src, float* dst, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    bf16_to_f32_kernel<<<grid_for(n, 256), 256, 0, stream>>>(src, dst, n);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::cuda
