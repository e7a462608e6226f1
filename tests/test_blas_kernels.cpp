// The OpenBLAS kernel choice (core/blas_kernels.h): which detected cores are replaced on which CPUs.
#include <gtest/gtest.h>

#include "core/blas_kernels.h"

namespace hydra {
namespace {

TEST(BlasKernels, CoreLevelsOfOpenBlasNames) {
    EXPECT_EQ(blas_core_level("Prescott"), 0);
    EXPECT_EQ(blas_core_level("NEHALEM"), 0);
    EXPECT_EQ(blas_core_level("Sandybridge"), 1);
    EXPECT_EQ(blas_core_level("Haswell"), 2);
    EXPECT_EQ(blas_core_level("Zen"), 2);
    EXPECT_EQ(blas_core_level("SkylakeX"), 3);
    EXPECT_EQ(blas_core_level("Cooperlake"), 3);
    EXPECT_EQ(blas_core_level("Neoversen1"), -1);  // not an x86-64 core this code knows
    EXPECT_EQ(blas_core_level(""), -1);
}

TEST(BlasKernels, WeakerKernelsThanTheCpuAreReplaced) {
    // the case that motivated it: an AVX-512 CPU too new for the library, given the SSE3 kernels
    EXPECT_EQ(blas_core_override("Prescott", SimdLevel::kAvx512), "SkylakeX");
    EXPECT_EQ(blas_core_override("Haswell", SimdLevel::kAvx512), "SkylakeX");
    EXPECT_EQ(blas_core_override("Prescott", SimdLevel::kAvx2), "Haswell");
    EXPECT_EQ(blas_core_override("Core2", SimdLevel::kAvx), "Sandybridge");
}

TEST(BlasKernels, MatchingUnknownOrStrongerKernelsAreKept) {
    EXPECT_EQ(blas_core_override("SkylakeX", SimdLevel::kAvx512), "");
    EXPECT_EQ(blas_core_override("Cooperlake", SimdLevel::kAvx512), "");
    EXPECT_EQ(blas_core_override("Haswell", SimdLevel::kAvx2), "");
    EXPECT_EQ(blas_core_override("Prescott", SimdLevel::kSse), "");
    // a CPU reported weaker than its kernels (a hypervisor hiding flags): never downgrade
    EXPECT_EQ(blas_core_override("SkylakeX", SimdLevel::kAvx2), "");
    EXPECT_EQ(blas_core_override("ThunderX2", SimdLevel::kAvx512), "");
}

}  // namespace
}  // namespace hydra
