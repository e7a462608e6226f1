// Causal GQA attention forward (see attention.h): one pass per (token, head) with a
// max-subtracted softmax; parallel over tokens x heads.
#include "ops/cpu/attention.h"

#include <cmath>
#include <vector>

namespace hydra::cpu {

template <typename T>
void causal_attention_forward(T* out, T* probs, const T* q, const T* k, const T* v, int64_t num_tokens,
                              int64_t pos0, int64_t H, int64_t Hkv, int64_t Dh, double scale) {
    const int64_t group = H / Hkv;
    const int64_t S = pos0 + num_tokens;
#pragma omp parallel
    {
        std::vector<T> scores(static_cast<size_t>(S));
        std::vector<T> acc(static_cast<size_t>(Dh));
#pragma omp for schedule(dynamic, 4) collapse(2)
        for (int64_t t = 0; t < num_tokens; ++t) {
            for (int64_t h = 0; h < H; ++h) {
                const int64_t kvh = h / group;
                const int64_t n_keys = pos0 + t + 1;
                const T* qv = q + (t * H + h) * Dh;
                T max_score = -INFINITY;
                for (int64_t s = 0; s < n_keys; ++s) {
                    const T* kv = k + (s * Hkv + kvh) * Dh;
                    T dot = 0;
#pragma omp simd reduction(+ : dot)
                    for (int64_t d = 0; d < Dh; ++d) dot += qv[d] * kv[d];
                    dot *= T(scale);
                    scores[size_t(s)] = dot;
                    if (dot > max_score) max_score = dot;
                }
                T sum = 0;
                for (int64_t s = 0; s < n_keys; ++s) {
                    const T e = std::exp(scores[size_t(s)] - max_score);
                    scores[size_t(s)] = e;
                    sum += e;
                }
                const T inv = T(1) / sum;
                for (int64_t d = 0; d < Dh; ++d) acc[size_t(d)] = 0;
                for (int64_t s = 0; s < n_keys; ++s) {
                    const T p = scores[size_t(s)] * inv;
                    const T* vv = v + (s * Hkv + kvh) * Dh;
#pragma omp simd
                    for (int64_t d = 0; d < Dh; ++d) acc[size_t(d)] += p * vv[d];
                    if (probs) probs[(t * H + h) * S + s] = p;
                }
                if (probs)
                    for (int64_t s = n_keys; s < S; ++s) probs[(t * H + h) * S + s] = 0;
                T* o = out + (t * H + h) * Dh;
                for (int64_t d = 0; d < Dh; ++d) o[d] = acc[size_t(d)];
            }
        }
    }
}

template void causal_attention_forward<float>(float*, float*, const float*, const float*, const float*, int64_t,
                                              int64_t, int64_t, int64_t, int64_t, double);
template void causal_attention_forward<double>(double*, double*, const double*, const double*, const double*,
                                               int64_t, int64_t, int64_t, int64_t, int64_t, double);

}  // namespace hydra::cpu
