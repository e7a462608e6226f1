// The gated delta rule, the core of a Gated DeltaNet head group (gdn.md §2-§3), on the CPU:
// a token-by-token recurrent form (reference, decode step, BPTT gradient oracle) and the chunked
// WY/UT form (the training path: GEMMs per chunk of C tokens), each with its backward pass.
//
// Inputs are ALREADY L2-normalised q, k (l2norm.h), the log-decay g <= 0 and the write strength beta
// (gdn_gates.h). Per value head j, with key head h = j / (HV / H) (grouped value attention, GVA)
// and alpha_t = exp(g_t), the state M (V x K, the transpose of gdn.md's S) follows §2.1:
//     M <- alpha_t M;   delta = beta_t (v_t - M k_t);   M <- M + delta k_t^T;   o_t = M (scale q_t)
// i.e. decay first, read after the write. scale is K^-1/2 in the model (passed explicitly).
//
// Layouts (row-major, all contiguous):
//   q, k: (T, H, K)     v, o: (T, HV, V)     g, beta: (T, HV)
//   state_in / state_out: (HV, V, K), V-major with K contiguous (fla state_v_first, llama.cpp);
//   state_in null = zeros; state_out null = not returned; state_out may alias state_in (in place).
// Gradient outputs (dq, dk, dv, dg, dbeta, dstate_in) are OVERWRITTEN; dq and dk are summed over
// the HV/H value heads that share a key head. dstate_out null = no gradient on the final state.
// Every function is parallel over value heads with a static schedule; each head's arithmetic is
// sequential (BLAS runs single-threaded inside the parallel region), so results do not depend on
// the thread count.
#pragma once

#include <cstdint>

namespace hydra::cpu {

struct GdnDims {
    int64_t T = 0;   // tokens
    int64_t H = 0;   // q/k heads
    int64_t HV = 0;  // value heads, a multiple of H
    int64_t K = 0;   // key head dim
    int64_t V = 0;   // value head dim
};

// Number of chunks of `chunk_size` tokens covering T tokens (the last one may be partial).
inline int64_t gdn_num_chunks(int64_t T, int64_t chunk_size) { return (T + chunk_size - 1) / chunk_size; }
// Elements of the per-chunk states saved by gdn_chunked_forward: (NT, HV, V, K).
inline int64_t gdn_chunk_states_numel(const GdnDims& d, int64_t chunk_size) {
    return gdn_num_chunks(d.T, chunk_size) * d.HV * d.V * d.K;
}

// Token-by-token forward (§2.1). Also the decode step (T = 1): no allocation when state_out is given
// (with state_out == state_in the state is updated in place). o: (T, HV, V) OVERWRITTEN.
template <typename T>
void gdn_recurrent_forward(T* o, T* state_out, const T* q, const T* k, const T* v, const T* g, const T* beta,
                           const T* state_in, const GdnDims& d, double scale);

// Backpropagation through time (§3.3): the gradient oracle. Recomputes and keeps every state of one
// value head at a time: (T + 1) V K elements per thread (e.g. 4097 * 64 * 64 * 4 B = 64 MiB in fp32
// at T = 4096, K = V = 64), plus (T, HV, K) x 2 scratch for dq/dk when HV > H.
// d_o: (T, HV, V); dstate_out: (HV, V, K) or null; dstate_in: (HV, V, K) or null (not wanted).
template <typename T>
void gdn_recurrent_backward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dstate_in, const T* d_o, const T* dstate_out,
                            const T* q, const T* k, const T* v, const T* g, const T* beta, const T* state_in,
                            const GdnDims& d, double scale);

// Chunked forward (§2.2): chunks of chunk_size tokens (the last may be partial); per chunk the
// strictly-lower Gram matrix A, T = (I + A)^-1 by forward substitution, W and U by GEMM, then the
// state scan and the outputs by GEMM. Same results as gdn_recurrent_forward up to rounding.
// chunk_states: (NT, HV, V, K) or null: receives the state ENTERING each chunk (chunk 0: state_in).
// That is all the chunked backward needs from the forward (K V / C elements per token per value head:
// 256 B in fp32 at K = V = C = 64); everything else is recomputed there.
template <typename T>
void gdn_chunked_forward(T* o, T* state_out, T* chunk_states, const T* q, const T* k, const T* v, const T* g,
                         const T* beta, const T* state_in, const GdnDims& d, double scale, int64_t chunk_size = 64);

// Chunked backward (§3.2): one reverse pass over the chunks of each value head, recomputing the
// chunk's A, T, W, U and delta from the entering state. chunk_states as written by gdn_chunked_forward
// with the same chunk_size; null = recompute them with a forward scan (NT V K elements per thread).
// Same gradients as gdn_recurrent_backward.
template <typename T>
void gdn_chunked_backward(T* dq, T* dk, T* dv, T* dg, T* dbeta, T* dstate_in, const T* d_o, const T* dstate_out,
                          const T* q, const T* k, const T* v, const T* g, const T* beta, const T* state_in,
                          const T* chunk_states, const GdnDims& d, double scale, int64_t chunk_size = 64);

}  // namespace hydra::cpu
