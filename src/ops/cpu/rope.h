// Rotary position embedding, NEOX / HF rotate_half pairing: within each head, dims i and i + R/2
// (R = rotated dims) rotate by angle pos * theta^(-2i/R). GGUF llama weights are un-permuted at
// load time so this single convention serves GGUF and HF models (engines.md §2.7).
#pragma once

#include <cstdint>

namespace hydra::cpu {

// x: (T, H, Dh), rotated in place; token t sits at absolute position pos0 + t.
template <typename T>
void rope_forward(T* x, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  double theta);

// Backward of rope_forward, in place: dx (T, H, Dh) holds the gradient of the rotated output on entry
// and the gradient of the input on return (OVERWRITTEN). The rotation is orthogonal, so this is the
// rotation by the negative angle; dims >= rope_dim pass through unchanged.
template <typename T>
void rope_backward(T* dx, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                   double theta);

// The rotation factors of positions pos0 .. pos0+T-1 once, for callers that rotate several tensors at the
// same positions (the train step: q and k of every sequence, forward and backward). cos, sin: (T, rope_dim/2)
// OVERWRITTEN with T(cos(angle)), T(sin(angle)) computed in double, the values rope_forward uses.
template <typename T>
void rope_table(T* cos, T* sin, int64_t num_tokens, int64_t rope_dim, int64_t pos0, double theta);
// The same from explicit frequencies (RoPE scaling, model/rope_scaling.h): angle (pos0 + t) * inv_freq[i]
// in double, cos and sin both multiplied by `scale` (YaRN's attention factor; 1 otherwise). The backward
// with such a table is the transpose of the scaled rotation, so the gradients stay exact.
template <typename T>
void rope_table(T* cos, T* sin, int64_t num_tokens, int64_t rope_dim, int64_t pos0, const double* inv_freq,
                double scale);

// rope_forward / rope_backward with a table from rope_table: token t uses row t (bit-identical results).
template <typename T>
void rope_forward(T* x, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, const T* cos, const T* sin);
template <typename T>
void rope_backward(T* dx, int64_t num_tokens, int64_t H, int64_t Dh, int64_t rope_dim, const T* cos, const T* sin);

}  // namespace hydra::cpu
