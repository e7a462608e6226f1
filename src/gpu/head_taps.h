// Head taps of the GPU decoder layer (gpu/gpu_decoder_layer.h's GpuHeadTaps): the device side of
// reading and overriding per-head outputs before o_proj, as head scoring needs them:
//   fill   rows [row0, row0 + rows) of heads (N, H, Dh) set to one row (H, Dh): copies of a run that join
//          a patched sweep at this layer take the base run's head outputs there
//   writes (row, first head, head count, source): a patch with stored activations, or (null source)
//          zero ablation, or a mean ablation with the mean as the source
// and broadcast_rows, the same fill for the fp32 residual rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

// One write into heads (N, H, Dh): heads[row, head .. head + count) = src (count * Dh), or 0 when src
// is null.
struct GpuHeadWrite {
    int32_t row = 0, head = 0, count = 1;
    const __nv_bfloat16* src = nullptr;
};

// writes: n entries in DEVICE memory, applied in parallel (entries must not overlap).
void apply_head_writes(__nv_bfloat16* heads, int64_t H, int64_t Dh, const GpuHeadWrite* writes, int64_t n,
                       cudaStream_t stream = nullptr);

// dst rows [0, rows) (row width `width`) = src (width).
void broadcast_rows(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t rows, int64_t width,
                    cudaStream_t stream = nullptr);
void broadcast_rows(float* dst, const float* src, int64_t rows, int64_t width, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
