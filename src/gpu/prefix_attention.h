// Attention of n independent single-token rows at one position P over a shared cached prefix, on the
// GPU: the twin of model/prefix_attention.h for the GPU layer's shared-prefix mode
// (gpu/gpu_decoder_layer.h). Each row is its own copy of the sequence: it attends to the prefix
// keys/values [0, P) (read in place, shared by all rows) plus its own key/value at P:
//   o[b, h] = softmax_j(scale * q[b, h] . k_j) v_j,  k_j = prefix_k[j, kv(h)] (j < P), k_own[b, kv(h)] (j =
//   P)
// Head scoring runs its patched copies (B rows per call) and its retrieval decode (one row, the cache as
// the prefix) through it. One block per (row, head): fp32 scores of all P + 1 keys in shared memory,
// fp32 softmax and accumulation, bf16 output. top: the argmax key of each (row, head) (the copy-paste
// retrieval score's top-1 attended position; ties to the smaller position, as std::max_element).
// Layouts: q, out (n, n_fa, Dh); k_own, v_own (n, n_kv, Dh); prefix_k, prefix_v (>= P, n_kv, Dh);
// kv_index (n_fa) int32 DEVICE memory, the KV slot of each head (any map); Dh 64 or 128.
// Asynchronous on `stream`; launch errors are checked (hydra::Error).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hydra::gpu {

void prefix_attention(__nv_bfloat16* out, int32_t* top, const __nv_bfloat16* q, const __nv_bfloat16* k_own,
                      const __nv_bfloat16* v_own, const __nv_bfloat16* prefix_k,
                      const __nv_bfloat16* prefix_v, const int32_t* kv_index, int64_t n, int64_t P,
                      int64_t n_fa, int64_t n_kv, int64_t Dh, float scale, cudaStream_t stream = nullptr);

}  // namespace hydra::gpu
