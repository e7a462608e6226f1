// Rotary position embedding on the GPU (mirror of ops/cpu/rope.h), NEOX / HF rotate_half pairing:
// within each head dims i and i + R/2 (R = rope_dim) rotate by angle pos * theta^(-2i/R); dims >= R
// pass through. In place on bf16 q or k; the backward is the rotation by the negative angle.
//
// Layout: x: (num_seqs, T, H, Dh) bf16; token t of every sequence sits at absolute position pos0 + t.
// token_stride (the _strided overloads): elements between consecutive tokens, so q and k can be rotated
// in place inside a fused QKV GEMM output row (pass x = the row's first q or k element).
// cos, sin: (T, R/2) fp32 tables from rope_table (angles in double, like the CPU's), or, in the overloads
// taking pos0/theta, angles computed per element in double on the device (same values).
// RoPE scaling (model/rope_scaling.h): the frequencies come as a RopeFreqs, passed by value into the
// kernels (no device copy, so a CUDA graph captures them); cos and sin are both multiplied by its
// attention scale. The overloads taking theta are the unscaled RopeFreqs::plain.
// Every CUDA call is checked (hydra::Error on failure); the functions are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::cuda {

using bf16 = __nv_bfloat16;

// The frequencies of one model's RoPE, by value (about 1 KB of kernel parameters).
struct RopeFreqs {
    static constexpr int kMaxPairs = 128;  // rope_dim <= 256
    double inv_freq[kMaxPairs] = {};       // angle of pair i at position p: p * inv_freq[i]
    float scale = 1.f;                     // on cos and sin (YaRN's attention factor)
    // Dynamic NTK, for the kernels that learn the position on the device (a CUDA-graph decode step): when
    // ntk_factor > 0, a call reaching sequence length L = pos0 + T > ntk_original uses base
    // theta * (ntk_factor * L / ntk_original - (ntk_factor - 1))^(R / (R - 2)) instead of inv_freq
    // (model/rope_scaling.h's rule; the host computes the same for the tables).
    double theta = 0, ntk_factor = 0;
    int64_t ntk_original = 0;

    // Unscaled RoPE: inv_freq[i] = theta^(-2i / rope_dim).
    static RopeFreqs plain(double theta, int64_t rope_dim);
};

// cos, sin: (T, rope_dim/2) OVERWRITTEN with cos/sin((pos0 + t) * theta^(-2i/rope_dim)), computed in double.
void rope_table(float* cos, float* sin, int64_t T, int64_t rope_dim, int64_t pos0, double theta,
                cudaStream_t stream = nullptr);
// The same from frequencies: scale * cos/sin((pos0 + t) * inv_freq[i]) in double (dynamic NTK at L = pos0 +
// T).
void rope_table(float* cos, float* sin, int64_t T, int64_t rope_dim, int64_t pos0, const RopeFreqs& f,
                cudaStream_t stream = nullptr);

// In place, from a table (token t uses row t; the same table serves every sequence).
void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, const float* cos,
                  const float* sin, cudaStream_t stream = nullptr);
void rope_backward(bf16* dx, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim,
                   const float* cos, const float* sin, cudaStream_t stream = nullptr);

// In place, angles computed on the fly (decode, or one-off use).
void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  double theta, cudaStream_t stream = nullptr);
void rope_backward(bf16* dx, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                   double theta, cudaStream_t stream = nullptr);
// One token (T = 1) of H heads at x (heads contiguous), its position read from device memory (*pos) when the
// kernel runs: the CUDA-graph form of the pos0 overload (same kernel, same angles), one launch for q and k
// when k's heads follow q's.
void rope_forward_decode(bf16* x, int64_t H, int64_t Dh, int64_t rope_dim, const int32_t* pos, double theta,
                         cudaStream_t stream = nullptr);
// The scaled forms of the two above (decode: L = *pos + 1).
void rope_forward(bf16* x, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh, int64_t rope_dim, int64_t pos0,
                  const RopeFreqs& f, cudaStream_t stream = nullptr);
void rope_forward_decode(bf16* x, int64_t H, int64_t Dh, int64_t rope_dim, const int32_t* pos,
                         const RopeFreqs& f, cudaStream_t stream = nullptr);

// The decode step's RoPE and cache write in one launch (a CUDA graph's step): x holds Hq query heads and then
// Hk key heads of one token; both are rotated in place at position *pos as rope_forward_decode does (the same
// angles and roundings), and the rotated key row and the value row v (Hk * Dh) are stored at row *pos of
// k_cache and v_cache ((rows, Hk * Dh) bf16).
void rope_decode_store_kv(bf16* x, int64_t Hq, int64_t Hk, int64_t Dh, int64_t rope_dim, const int32_t* pos,
                          const RopeFreqs& f, const bf16* v, bf16* k_cache, bf16* v_cache,
                          cudaStream_t stream = nullptr);

// Batched decode (serving): `rows` tokens, each its own sequence, row r at x + r * token_stride (0: H * Dh) at
// position pos[r] read from device memory (pos: (rows) int32); dynamic NTK at L = pos[r] + 1 per row. The
// same angles as rope_forward_decode at that position.
void rope_forward_rows(bf16* x, int64_t token_stride, int64_t rows, int64_t H, int64_t Dh, int64_t rope_dim,
                       const int32_t* pos, const RopeFreqs& f, cudaStream_t stream = nullptr);

// Strided variants: head h of token (s, t) starts at x + (s * T + t) * token_stride + h * Dh.
void rope_forward_strided(bf16* x, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                          int64_t rope_dim, const float* cos, const float* sin, cudaStream_t stream = nullptr);
void rope_backward_strided(bf16* dx, int64_t token_stride, int64_t num_seqs, int64_t T, int64_t H, int64_t Dh,
                           int64_t rope_dim, const float* cos, const float* sin, cudaStream_t stream = nullptr);

}  // namespace hydra::cuda
