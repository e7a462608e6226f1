// What CUDA devices this process can see (used by `hydra info` and the GPU benchmarks).
#pragma once

#include <string>

namespace hydra::cuda {

// One line per device ("0: NVIDIA H200, sm_90, 139.8 GiB"), or the reason there is none.
std::string device_summary();

}  // namespace hydra::cuda
