// Causal depthwise short convolution followed by SiLU (the q/k/v "short conv" of a Gated DeltaNet
// head group, gdn.md §1.1 step 1), with a carried window so a sequence can be fed in pieces, and its
// backward pass. Decode is the forward with T = 1.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// Channels-last layout: x, out: (T, D); w: (D, W) with tap W-1 multiplying the current token
// (PyTorch cross-correlation with W-1 zeros on the left, first T outputs kept); no bias.
//   out[t, d] = silu( sum_{i<W} w[d, i] * x[t - W + 1 + i, d] )
// prev: (W-1, D) the last W-1 inputs before this segment, oldest row first (row W-2 is the input
// just before x[0]); null means zeros (sequence start). out must not alias x or prev.
template <typename T>
void short_conv_forward(T* out, const T* x, const T* w, const T* prev_or_null, int64_t num_tokens, int64_t D,
                        int64_t W);

// The window for the next segment: the last W-1 rows of [prev_in; x] (prev_in null = zeros), so it
// also works when the segment is shorter than W-1 tokens. prev_out: (W-1, D), may alias prev_in.
template <typename T>
void short_conv_next_prev(T* prev_out, const T* prev_in_or_null, const T* x, int64_t num_tokens, int64_t D,
                          int64_t W);

// Backward of short_conv_forward (the pre-activation is recomputed, nothing is saved). dout: (T, D).
// dx (T, D) is OVERWRITTEN; dw (D, W) is ACCUMULATED (+=; may be null when frozen); dprev (W-1, D) is
// OVERWRITTEN when not null (the gradient w.r.t. prev; zeros-at-start segments may pass null).
// dw is summed over tokens in double per channel; parallel over channel blocks, so no result depends
// on the thread count. No output may alias an input.
template <typename T>
void short_conv_backward(T* dx, T* dw, T* dprev_or_null, const T* dout, const T* x, const T* w,
                         const T* prev_or_null, int64_t num_tokens, int64_t D, int64_t W);

// Backward of short_conv_next_prev: routes d prev_out (W-1, D) to where each row came from.
// dx (T, D) and dprev_in (W-1, D, may be null) are ACCUMULATED (+=).
template <typename T>
void short_conv_next_prev_backward(T* dx, T* dprev_in_or_null, const T* dprev_out, int64_t num_tokens, int64_t D,
                                   int64_t W);

}  // namespace hydra::cpu
