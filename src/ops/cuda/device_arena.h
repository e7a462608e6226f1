// Device memory for the GPU training step: a bump arena over one cudaMalloc (per-step activations,
// released wholesale with mark/reset), a small size-class caching allocator (long-lived buffers that
// come and go: workspaces, optimizer state), an owning DeviceBuffer<T>, and host<->device copies.
//
// DeviceArena: one cudaMalloc of `capacity` bytes at construction; alloc() hands out 256-byte aligned
// slices by bumping an offset (O(1), no CUDA call); mark() / reset(mark) free everything allocated
// after the mark at once (a training step: mark, forward + backward activations, reset). Nothing is
// freed individually. Running out throws hydra::Error naming the request, the used and the capacity
// bytes (no silent fallback to cudaMalloc). peak_bytes() is the high-water mark of used bytes.
// The arena does not synchronise: reset() while kernels still read the memory is the caller's bug;
// with one stream, reuse after reset is ordered by the stream anyway.
//
// CachingAllocator: requests rounded up to a size class (256 B .. 2^k, four classes per power of two)
// and served from a free list of that class, else cudaMalloc'd; free() returns the block to its list
// (not to CUDA) -- safe for reuse on the same stream in stream order. release_cached() cudaFree's
// the idle blocks. Reports in-use, cached and peak (in use) bytes. Not thread-safe.
//
// Every CUDA call is checked (CUDA_CHECK: hydra::Error with file:line).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

constexpr size_t kDeviceAlign = 256;

inline size_t align_up(size_t bytes, size_t align = kDeviceAlign) { return (bytes + align - 1) / align * align; }

class DeviceArena {
public:
    explicit DeviceArena(size_t capacity_bytes);
    ~DeviceArena();
    DeviceArena(const DeviceArena&) = delete;
    DeviceArena& operator=(const DeviceArena&) = delete;

    // `bytes` rounded up to 256; the returned pointer is 256-byte aligned. bytes == 0 gives a valid
    // (unique-offset) pointer of zero size. Throws when the arena is full.
    void* alloc_bytes(size_t bytes);
    template <typename T>
    T* alloc(int64_t n) {
        return static_cast<T*>(alloc_bytes(size_t(n < 0 ? 0 : n) * sizeof(T)));
    }

    size_t mark() const { return used_; }
    void reset(size_t mark);  // frees everything allocated after mark() returned `mark`
    void reset() { reset(0); }

    size_t used_bytes() const { return used_; }
    size_t capacity_bytes() const { return capacity_; }
    size_t peak_bytes() const { return peak_; }
    void reset_peak() { peak_ = used_; }
    char* base() const { return base_; }

private:
    char* base_ = nullptr;
    size_t capacity_ = 0, used_ = 0, peak_ = 0;
};

class CachingAllocator {
public:
    CachingAllocator() = default;
    ~CachingAllocator();  // cudaFree's everything (blocks still in use included)
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;

    void* allocate(size_t bytes);  // 256-byte aligned; bytes == 0 returns nullptr
    void free(void* p);            // p from allocate() (nullptr ignored); throws on a foreign pointer
    void release_cached();         // cudaFree the idle blocks

    // The size class a request of `bytes` is served from (>= bytes, multiple of 256).
    static size_t size_class(size_t bytes);

    size_t in_use_bytes() const { return in_use_; }
    size_t cached_bytes() const { return cached_; }
    size_t peak_bytes() const { return peak_; }  // high-water mark of in_use_bytes()

private:
    std::map<size_t, std::vector<void*>> free_;   // size class -> idle blocks
    std::unordered_map<void*, size_t> live_;      // block -> its size class
    size_t in_use_ = 0, cached_ = 0, peak_ = 0;
};

// Checked cudaMalloc / cudaFree / cudaMemsetAsync (throw hydra::Error on failure; bytes == 0 -> nullptr).
void* device_malloc(size_t bytes);
void device_free(void* p);
void device_memset(void* p, int byte, size_t bytes, cudaStream_t stream = nullptr);
void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream = nullptr);
void copy_to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream = nullptr);
void copy_device(void* dst, const void* src, size_t bytes, cudaStream_t stream = nullptr);

// Owning device array of n elements of T (any trivially copyable T), movable, not copyable. Contents
// are uninitialised. n == 0 holds no memory.
template <typename T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(int64_t n) { resize(n); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            if (p_) cudaFree(p_);
            p_ = o.p_, n_ = o.n_;
            o.p_ = nullptr, o.n_ = 0;
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    T* data() const { return p_; }
    int64_t size() const { return n_; }
    size_t bytes() const { return size_t(n_) * sizeof(T); }
    // Reallocates (contents lost) unless n == size(); throws for n < 0.
    void resize(int64_t n) {
        if (n == n_) return;
        release();
        p_ = static_cast<T*>(device_malloc(size_t(n < 0 ? -1 : n) * sizeof(T)));
        n_ = n;
    }
    void release() {
        if (p_) device_free(p_);
        p_ = nullptr;
        n_ = 0;
    }
    // Whole-buffer helpers, asynchronous on `stream` (host memory must stay valid until the copy ran:
    // for pageable host memory CUDA stages it before returning).
    void zero(cudaStream_t stream = nullptr) { device_memset(p_, 0, bytes(), stream); }
    // e.g. 0xFF poisons with NaN (bf16, fp32)
    void fill_bytes(int byte, cudaStream_t stream = nullptr) { device_memset(p_, byte, bytes(), stream); }
    void upload(const T* host, cudaStream_t stream = nullptr) { copy_to_device(p_, host, bytes(), stream); }
    void download(T* host, cudaStream_t stream = nullptr) const { copy_to_host(host, p_, bytes(), stream); }

private:
    T* p_ = nullptr;
    int64_t n_ = 0;
};

// n elements host -> device / device -> host, asynchronous on `stream`.
template <typename T>
void upload(T* dst, const T* host, int64_t n, cudaStream_t stream = nullptr) {
    copy_to_device(dst, host, size_t(n) * sizeof(T), stream);
}
template <typename T>
void download(T* host, const T* dst, int64_t n, cudaStream_t stream = nullptr) {
    copy_to_host(host, dst, size_t(n) * sizeof(T), stream);
}
// Synchronous conveniences (stream synchronised before returning).
std::vector<float> download_f32(const float* d, int64_t n, cudaStream_t stream = nullptr);
std::vector<float> download_bf16_as_f32(const bf16* d, int64_t n, cudaStream_t stream = nullptr);
// Host floats rounded to bf16 (round to nearest even) and copied to d (n elements); synchronous.
void upload_f32_as_bf16(bf16* d, const float* host, int64_t n, cudaStream_t stream = nullptr);

// On-device conversions over n contiguous elements (grid-stride kernels), asynchronous.
void cast_f32_to_bf16(const float* src, bf16* dst, int64_t n, cudaStream_t stream = nullptr);
void cast_bf16_to_f32(const bf16* src, float* dst, int64_t n, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
