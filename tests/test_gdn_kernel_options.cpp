// The GDN kernels' options (src/ops/cuda/gdn_kernel_options.h): the one environment override,
// HYDRA_GDN_STREAM, on by default and parsed strictly. No GPU needed.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ops/cuda/gdn_kernel_options.h"
#include "scoped_env.h"

using namespace hydra::cuda;

TEST(GdnKernelOptions, StreamedByDefault) {
    const hydra::ScopedEnv env("HYDRA_GDN_STREAM", nullptr);
    EXPECT_TRUE(gdn_kernel_options_from_env().stream_forward);
    const hydra::ScopedEnv empty("HYDRA_GDN_STREAM", "");
    EXPECT_TRUE(gdn_kernel_options_from_env().stream_forward);
}

TEST(GdnKernelOptions, StreamSwitch) {
    {
        const hydra::ScopedEnv env("HYDRA_GDN_STREAM", "0");
        EXPECT_FALSE(gdn_kernel_options_from_env().stream_forward);
    }
    {
        const hydra::ScopedEnv env("HYDRA_GDN_STREAM", "1");
        EXPECT_TRUE(gdn_kernel_options_from_env().stream_forward);
    }
}

TEST(GdnKernelOptions, BadValueIsAnError) {
    for (const char* bad : {"2", "yes", "off", " 0", "00"}) {
        const hydra::ScopedEnv env("HYDRA_GDN_STREAM", bad);
        EXPECT_THROW(gdn_kernel_options_from_env(), hydra::Error) << bad;
    }
}
