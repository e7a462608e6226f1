// The CUDA device check every GPU entry point makes first, so a machine without a usable GPU gets one
// clear error instead of a failure deep inside an upload.
#pragma once

#include <string>

namespace hydra::gpu {

// Throws hydra::Error naming the problem when this process sees no usable CUDA device; returns the
// name of device 0 otherwise.
std::string require_cuda_device();

}  // namespace hydra::gpu
