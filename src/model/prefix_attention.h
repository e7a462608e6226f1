// Attention of n independent single-token rows at one position P over a shared cached prefix: the
// answer-position re-runs of head scoring. Each row is its own copy of the sequence: it attends to the
// prefix keys/values [0, P) (read in place, shared by all rows, never written) plus its own key/value
// at P. Per KV group g (query heads g*G .. g*G+G-1, G = H / Hkv; uniform groups only):
//   S = scale * Qg K_g[0:P]^T   (n*G, P)   one GEMM against the cached keys for all rows
//   S[:, P] = scale * q . k_own            each row's own key
//   row softmax, then Og = S[:, 0:P] V_g[0:P] + S[:, P] v_own
// The backward differentiates with respect to the rows' q, own k and own v only (the prefix is a
// constant: nothing at earlier positions depends on the re-run rows). Templated on float / double.
#pragma once

#include <cstdint>

namespace hydra {

// q, out: (n, H, Dh); k_own, v_own: (n, Hkv, Dh); prefix_k, prefix_v: (>= P, Hkv, Dh) row stride Hkv*Dh.
// probs: (Hkv, n*G, P+1) OVERWRITTEN, group-major: row b*G + j of group g is head g*G + j of row b;
// columns 0..P-1 the prefix, column P the row's own key (kept for the backward).
template <typename T>
void prefix_attention_forward(T* out, T* probs, const T* q, const T* k_own, const T* v_own, const T* prefix_k,
                              const T* prefix_v, int64_t n, int64_t P, int64_t H, int64_t Hkv, int64_t Dh,
                              double scale);

// dq (n, H, Dh), dk_own, dv_own (n, Hkv, Dh) OVERWRITTEN from dout (n, H, Dh) and the forward's probs.
template <typename T>
void prefix_attention_backward(T* dq, T* dk_own, T* dv_own, const T* dout, const T* probs, const T* q,
                               const T* k_own, const T* v_own, const T* prefix_k, const T* prefix_v,
                               int64_t n, int64_t P, int64_t H, int64_t Hkv, int64_t Dh, double scale);

}  // namespace hydra
