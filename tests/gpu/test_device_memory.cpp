// The device arena and the caching allocator (ops/cuda/device_arena.h): 256-byte alignment, mark/reset
// and the high-water mark, a full arena throwing, and the allocator's size classes and reuse.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/cuda/device_arena.h"

namespace hydra::gputest {

namespace cu = hydra::cuda;

TEST(GpuDeviceMemory, ArenaAlignsMarksAndThrowsWhenFull) {
    cu::DeviceArena a(1 << 20);
    float* x = a.alloc<float>(1000);
    const size_t mk = a.mark();
    cu::bf16* y = a.alloc<cu::bf16>(77);
    double* z = a.alloc<double>(3);
    EXPECT_EQ(
        (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(z)) %
            256,
        0u);
    EXPECT_EQ(reinterpret_cast<char*>(y) - reinterpret_cast<char*>(x), 4096);
    const size_t peak = a.peak_bytes();
    a.reset(mk);
    EXPECT_EQ(a.used_bytes(), mk);
    EXPECT_EQ(a.peak_bytes(), peak);
    EXPECT_EQ(peak, 4096u + 256u + 256u);
    EXPECT_EQ(a.alloc<cu::bf16>(5), y);  // the same slice again after reset
    EXPECT_ANY_THROW(a.alloc_bytes(2 << 20));
    // write through an arena pointer (the memory is real)
    std::vector<float> h(1000, 3.0f);
    cu::upload(x, h.data(), 1000);
    EXPECT_EQ(cu::download_f32(x, 1000)[999], 3.0f);
}

TEST(GpuDeviceMemory, CachingAllocatorSizeClassesAndReuse) {
    cu::CachingAllocator c;
    void* p1 = c.allocate(1000);
    void* p2 = c.allocate(5000);
    EXPECT_EQ(c.in_use_bytes(),
              cu::CachingAllocator::size_class(1000) + cu::CachingAllocator::size_class(5000));
    c.free(p1);
    void* p3 = c.allocate(900);  // same class as 1000 -> the cached block
    EXPECT_EQ(p3, p1);
    EXPECT_GE(cu::CachingAllocator::size_class(5000), 5000u);
    EXPECT_EQ(cu::CachingAllocator::size_class(5000) % 256, 0u);
    EXPECT_EQ(cu::CachingAllocator::size_class(4097), 5120u);
    c.free(p2);
    c.free(p3);
    EXPECT_EQ(c.in_use_bytes(), 0u);
    EXPECT_GT(c.cached_bytes(), 0u);
    EXPECT_GE(c.peak_bytes(), 6000u);
    c.release_cached();
    EXPECT_EQ(c.cached_bytes(), 0u);
}

}  // namespace hydra::gputest
