// The GDN kernels' options (src/ops/cuda/gdn_kernel_options.h): the one environment override,
// HYDRA_GDN_STREAM, on by default and parsed strictly. No GPU needed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"
#include "ops/cuda/gdn_kernel_options.h"

using namespace hydra::cuda;

namespace {

// Sets HYDRA_GDN_STREAM for one test and restores what was there.
class StreamEnv {
  public:
    explicit StreamEnv(const char* value) {
        if (const char* old = std::getenv("HYDRA_GDN_STREAM")) old_ = old;
        if (value)
            setenv("HYDRA_GDN_STREAM", value, 1);
        else
            unsetenv("HYDRA_GDN_STREAM");
    }
    ~StreamEnv() {
        if (old_)
            setenv("HYDRA_GDN_STREAM", old_->c_str(), 1);
        else
            unsetenv("HYDRA_GDN_STREAM");
    }

  private:
    std::optional<std::string> old_;
};

}  // namespace

TEST(GdnKernelOptions, StreamedByDefault) {
    const StreamEnv env(nullptr);
    EXPECT_TRUE(gdn_kernel_options_from_env().stream_forward);
    const StreamEnv empty("");
    EXPECT_TRUE(gdn_kernel_options_from_env().stream_forward);
}

TEST(GdnKernelOptions, StreamSwitch) {
    {
        const StreamEnv env("0");
        EXPECT_FALSE(gdn_kernel_options_from_env().stream_forward);
    }
    {
        const StreamEnv env("1");
        EXPECT_TRUE(gdn_kernel_options_from_env().stream_forward);
    }
}

TEST(GdnKernelOptions, BadValueIsAnError) {
    for (const char* bad : {"2", "yes", "off", " 0", "00"}) {
        const StreamEnv env(bad);
        EXPECT_THROW(gdn_kernel_options_from_env(), hydra::Error) << bad;
    }
}
