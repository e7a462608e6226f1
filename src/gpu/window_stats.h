// Held-out statistics of a window computed where the logits are: for each position t of a window, from the
// teacher's and the student's logits rows (fp32, on the device) and the next token, KL(p_t || p_s), whether
// the argmaxes agree, and both negative log-likelihoods; the host then receives 4 doubles per position
// instead of two (T, V) logits blocks (at V = 49152 that is 400 MB per model per 2048-token window, whose
// copy and host log-softmax dominated the held-out pass). Same formulas as eval/heldout_metrics.cpp's
// window_stats: max-shifted log-sum-exp, ties of the argmax to the lowest index, KL clamped at 0.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace hydra::gpu {

// teacher, student: (n, V) fp32 device rows (the same pointer for a model against itself);
// next: (n) device token ids, each in [0, V); out: (n, 4) device doubles per position:
// {kl, agree (0/1), nll_student, nll_teacher}.
void window_stats_rows(double* out, const float* teacher, const float* student, const int32_t* next,
                       int64_t n, int64_t V, cudaStream_t stream);

}  // namespace hydra::gpu
