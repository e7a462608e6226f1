// The test binary's main: OpenBLAS on the kernels this CPU supports (core/blas_kernels.h), as hydra runs,
// then GoogleTest.
#include <gtest/gtest.h>

#include "core/blas_kernels.h"

int main(int argc, char** argv) {
    hydra::ensure_blas_kernels(argv);
    ::testing::InitGoogleTest(&argc, argv);
    return RUN_ALL_TESTS();
}
