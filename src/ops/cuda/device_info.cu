// Device enumeration for hydra::cuda::device_summary (see device_info.h).
#include <fmt/format.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_info.h"

namespace hydra::cuda {

std::string device_summary() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) return fmt::format("no CUDA device ({})", cudaGetErrorString(err));
    std::string out;
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
        out += fmt::format("{}: {}, sm_{}{}, {:.1f} GiB\n", i, prop.name, prop.major, prop.minor,
                           double(prop.totalGlobalMem) / (1u << 30));
    }
    return out.empty() ? "no CUDA device" : out;
}

}  // namespace hydra::cuda
