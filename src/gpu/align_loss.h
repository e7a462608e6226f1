// The loss of stage 1 (align) on the GPU: the two reductions and the gradient of train/align_step.cpp's
// per-layer loss, kept on the device so a layer's backward can start without a host round trip.
//
// For layer l of L, with x = t_l (the teacher's layer input), t = t_{l+1} (its output) and y the student
// layer's output on x, all (n = N * C) fp32:
//   err    = sum (y - t)^2                      (fp64)
//   update = max(sum (t - x)^2, 1e-12)          (fp64)
//   loss_l = err / update, loss = mean_l loss_l  (the host divides, after the step)
//   dy     = 2 / (update * L) * (y - t)         (scale and difference in fp64, rounded to fp32, as the CPU)
// The sums are deterministic: fixed per-block element ranges (a function of n only), block partials
// summed in order by one block. Everything is asynchronous on `stream`; every call is checked.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

// Doubles of scratch align_layer_sums needs (the per-block partials).
int64_t align_sums_workspace_doubles();

// sums (2) fp64 device, OVERWRITTEN: {err, update} of one layer (see above). y, t_next, t_prev (n) fp32
// device; partial: align_sums_workspace_doubles() doubles of device scratch.
void align_layer_sums(double* sums, const float* y, const float* t_next, const float* t_prev, int64_t n,
                      double* partial, cudaStream_t stream = nullptr);

// dy (n) fp32 device, OVERWRITTEN: 2 / (sums[1] * num_layers) * (y - t_next), sums[1] read on the device
// (the clamped update from align_layer_sums). dy may not alias y or t_next.
void align_layer_grad(float* dy, const float* y, const float* t_next, const double* sums, int64_t num_layers,
                      int64_t n, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
