// Gated DeltaNet gates (gdn.md §1.1 step 3, §3.2 items 8-9): the per-token log-decay
// g = -exp(A_log) * softplus(a + dt_bias) <= 0 and the write strength beta = sigmoid(b)
// (or 2 * sigmoid(b), allow_neg_eigval), one scalar per (token, value head), with backward passes.
#pragma once

#include <cstdint>

namespace hydra::cpu {

// a, g: (T, HV); A_log, dt_bias: (HV). softplus(x) = log(1 + exp(x)), with the identity shortcut
// softplus(x) = x for x > 20 (as fla), computed in T. g may alias a.
template <typename T>
void gdn_gate_forward(T* g, const T* a, const T* A_log, const T* dt_bias, int64_t num_tokens, int64_t HV);

// Backward of gdn_gate_forward, dg: (T, HV); the derivative is that of the function computed, so
// d softplus / dx = sigmoid(x), and 1 above the shortcut threshold.
// da (T, HV) is OVERWRITTEN (may alias dg); dA_log, ddt_bias (HV) are ACCUMULATED (+=, null = frozen),
// summed over tokens in double in token order.
template <typename T>
void gdn_gate_backward(T* da, T* dA_log, T* ddt_bias, const T* dg, const T* a, const T* A_log,
                       const T* dt_bias, int64_t num_tokens, int64_t HV);

// b, beta: (N) = (T, HV) flattened; beta = s * sigmoid(b) with s = 2 when allow_neg_eigval, else 1.
// beta may alias b.
template <typename T>
void gdn_beta_forward(T* beta, const T* b, int64_t N, bool allow_neg_eigval);

// db = dbeta * s * sigmoid(b) * (1 - sigmoid(b)); db (N) is OVERWRITTEN and may alias dbeta.
template <typename T>
void gdn_beta_backward(T* db, const T* dbeta, const T* b, int64_t N, bool allow_neg_eigval);

}  // namespace hydra::cpu
