// Causal depthwise short convolution + SiLU of the Gated DeltaNet q/k/v path on the GPU (mirror of
// ops/cpu/short_conv.h, gdn.md §1.1 step 1), with the carried window for feeding a sequence in pieces
// (decode = T 1), and the backward (pre-activation recomputed, nothing saved).
//
//   out[b, t, d] = silu( sum_{i<W} w[d, i] * xc[b, t + i, d] ),  xc[b] = [prev[b]; x[b]] (W-1 + T rows)
// Tap W-1 multiplies the current token; prev row W-2 is the input just before x[b, 0].
// Layouts: x, dx: (B, T, D) bf16, token rows x_stride elements apart (0 = D; lets the conv read a slice
// of a fused projection output); out, dout: (B, T, D) bf16 contiguous; w, dw: (D, W) fp32;
// prev, prev_out, dprev, dprev_out: (B, W-1, D) fp32 (the carried window, oldest row first).
// 1 <= W <= 8. fp32 arithmetic. Every CUDA call is checked (hydra::Error on failure); the functions are
// asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// out OVERWRITTEN (must not alias x). prev null = zeros (sequence start). prev_out, when not null, is
// OVERWRITTEN with the window for the next segment, the last W-1 rows of xc (works for T < W-1 too);
// prev_out may alias prev.
void short_conv_forward(bf16* out, float* prev_out, const bf16* x, int64_t x_stride, const float* w,
                        const float* prev, int64_t B, int64_t T, int64_t D, int64_t W, cudaStream_t stream = nullptr);

// The same with the carried windows in a slot pool (serving: every sequence b of the batch is its own slot):
// sequence b's (W-1, D) window is at windows + slots[b] * slot_stride (slots: (B) int32 in device memory),
// read and then OVERWRITTEN with the next window, as prev and prev_out = prev above. Rows sharing a slot
// (a padding row's scratch slot) leave that slot's window unspecified.
void short_conv_forward_slots(bf16* out, float* windows, const int32_t* slots, int64_t slot_stride, const bf16* x,
                              int64_t x_stride, const float* w, int64_t B, int64_t T, int64_t D, int64_t W,
                              cudaStream_t stream = nullptr);

// One decode token (T = 1) of the q, k and v convolutions at once, each with its own weights, windows and
// output: the three short_conv_forward calls (or _slots calls) of a decode step in one launch, the same
// sums and bits. x: (B, 3 D) bf16 rows x_stride apart, group g's channels at column g D (the fused q|k|v
// projection); out[g]: (B, D) bf16; w[g]: (D, W); windows[g]: the carried (W-1, D) windows, read and then
// OVERWRITTEN with the next ones: row b's at windows[g] + slots[b] * slot_stride (slots on the device), or
// at windows[g] + b (W-1) D when slots is null (W = 1: no windows, which may be null).
struct ConvDecodeGroups {
    bf16* out[3];
    float* windows[3];
    const float* w[3];
};
void short_conv_decode_qkv(const ConvDecodeGroups& g, const bf16* x, int64_t x_stride, const int32_t* slots,
                           int64_t slot_stride, int64_t B, int64_t D, int64_t W,
                           cudaStream_t stream = nullptr);

// Backward. dout: gradient of out; dprev_out: gradient of the forward's prev_out (null = none).
// dx OVERWRITTEN (row stride dx_stride, 0 = D), including what dprev_out routes to x;
// dw ACCUMULATED (+=, null = frozen; deterministic: fixed token blocks summed in order, device scratch
// from cudaMallocAsync on `stream`); dprev OVERWRITTEN when not null (gradient of prev). prev as in the
// forward (null = zeros). No output may alias an input.
void short_conv_backward(bf16* dx, int64_t dx_stride, float* dw, float* dprev, const bf16* dout,
                         const float* dprev_out, const bf16* x, int64_t x_stride, const float* w, const float* prev,
                         int64_t B, int64_t T, int64_t D, int64_t W, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
