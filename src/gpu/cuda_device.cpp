// CUDA device check (see cuda_device.h).
#include "gpu/cuda_device.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

std::string require_cuda_device() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    HYDRA_CHECK(err == cudaSuccess && n > 0, "--device cuda: no usable CUDA device ({})",
                err == cudaSuccess ? std::string("none found") : std::string(cudaGetErrorString(err)));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    return prop.name;
}

}  // namespace hydra::gpu
