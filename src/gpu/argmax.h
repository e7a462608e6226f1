// Greedy token choice on the GPU: the index of the largest logit, the first one on ties (what
// std::max_element, i.e. serve/sampler's argmax, returns on the CPU), so only 4 bytes leave the device
// per decoded token. Checked and asynchronous on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

// out (1) int32 device: argmax of x (n) fp32 device. n >= 1.
void argmax_f32(int32_t* out, const float* x, int64_t n, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
