// Embedding forward/backward (see embedding.h).
#include "ops/cpu/embedding.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hydra::cpu {

namespace {

// Validated before any parallel loop: an exception must not escape an OpenMP region.
void check_tokens(const int32_t* tokens, int64_t num_tokens, int64_t V) {
    for (int64_t t = 0; t < num_tokens; ++t)
        HYDRA_CHECK(tokens[t] >= 0 && tokens[t] < V,
                    "embedding: token id {} at position {} is outside the vocabulary [0, {}); the input was "
                    "made for a different tokenizer",
                    tokens[t], t, V);
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* table, int64_t num_tokens, int64_t V,
                       int64_t C) {
    check_tokens(tokens, num_tokens, V);
#pragma omp parallel for schedule(static) if (num_tokens * C > 65536)
    for (int64_t t = 0; t < num_tokens; ++t)
        std::memcpy(out + t * C, table + int64_t(tokens[t]) * C, sizeof(T) * size_t(C));
}

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* tokens, int64_t num_tokens, int64_t V,
                        int64_t C) {
    check_tokens(tokens, num_tokens, V);
    // Parallel over column blocks: repeated tokens hit the same dtable row, so splitting over tokens
    // would race; every thread owns its columns and walks tokens in order (deterministic sums).
    constexpr int64_t kBlock = 64;
    const int64_t n_blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (num_tokens * C > 65536)
    for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
        for (int64_t t = 0; t < num_tokens; ++t) {
            T* row = dtable + int64_t(tokens[t]) * C;
            const T* g = dout + t * C;
            for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
        }
    }
}

// V = 2^31 accepts every non-negative int32 id: the upper bound is the caller's (see embedding.h).
constexpr int64_t kAnyId = int64_t(1) << 31;

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const T* table, int64_t num_tokens, int64_t C) {
    embedding_forward(out, tokens, table, num_tokens, kAnyId, C);
}

template <typename T>
void embedding_backward(T* dtable, const T* dout, const int32_t* tokens, int64_t num_tokens, int64_t C) {
    embedding_backward(dtable, dout, tokens, num_tokens, kAnyId, C);
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t, int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int64_t, int64_t);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t, int64_t);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t, int64_t, int64_t);
template void embedding_forward<float>(float*, const int32_t*, const float*, int64_t, int64_t);
template void embedding_forward<double>(double*, const int32_t*, const double*, int64_t, int64_t);
template void embedding_backward<float>(float*, const float*, const int32_t*, int64_t, int64_t);
template void embedding_backward<double>(double*, const double*, const int32_t*, int64_t, int64_t);

}  // namespace hydra::cpu
