// Token embedding lookup on the CPU (a row gather from the table) and its backward (a scatter-add).
#pragma once

#include <cstdint>

namespace hydra::cpu {

// tokens: (T) ids; table: (V, C); out: (T, C) OVERWRITTEN with out[t] = table[tokens[t]].
// Throws hydra::Error when an id is outside [0, V) (ids can come from user files).
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* table, int64_t num_tokens, int64_t V,
                       int64_t C);

// Backward: dtable (V, C) is ACCUMULATED (+=) with dout (T, C) at the rows of tokens (T); a token
// that occurs several times receives the sum of its rows. Same id check as the forward.
template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* tokens, int64_t num_tokens, int64_t V,
                        int64_t C);

// The same without the vocabulary size, for callers that have already checked every id against V
// (e.g. the train step validates its batch once): only negative ids are rejected here.
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* table, int64_t num_tokens, int64_t C);
template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* tokens, int64_t num_tokens, int64_t C);

}  // namespace hydra::cpu
