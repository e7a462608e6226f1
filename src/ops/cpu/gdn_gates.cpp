// Gated DeltaNet gate and beta activations, forward and backward (see gdn_gates.h). These are
// O(T HV) elementwise maps, so they run serially: nothing to gain from threads at these sizes.
#include "ops/cpu/gdn_gates.h"

#include <cmath>
#include <vector>

namespace hydra::cpu {

namespace {

constexpr double kSoftplusThreshold = 20.0;

template <typename T>
T softplus(T x) {
    return x > T(kSoftplusThreshold) ? x : std::log1p(std::exp(x));
}

template <typename T>
T softplus_grad(T x) {
    return x > T(kSoftplusThreshold) ? T(1) : T(1) / (T(1) + std::exp(-x));
}

template <typename T>
T sigmoid(T x) {
    return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

template <typename T>
void gdn_gate_forward(T* g, const T* a, const T* A_log, const T* dt_bias, int64_t num_tokens, int64_t HV) {
    for (int64_t t = 0; t < num_tokens; ++t)
        for (int64_t j = 0; j < HV; ++j) {
            const int64_t i = t * HV + j;
            g[i] = -std::exp(A_log[j]) * softplus(T(a[i] + dt_bias[j]));
        }
}

// g = -exp(A_log) sp(a + dt_bias): dg/da = dg/d dt_bias = -exp(A_log) sp'(.), dg/dA_log = g.
template <typename T>
void gdn_gate_backward(T* da, T* dA_log, T* ddt_bias, const T* dg, const T* a, const T* A_log, const T* dt_bias,
                       int64_t num_tokens, int64_t HV) {
    std::vector<double> sum_A(size_t(HV), 0.0), sum_dt(size_t(HV), 0.0);
    for (int64_t t = 0; t < num_tokens; ++t)
        for (int64_t j = 0; j < HV; ++j) {
            const int64_t i = t * HV + j;
            const T x = a[i] + dt_bias[j];
            const T A = std::exp(A_log[j]);
            const T grad = dg[i];  // read before da (which may alias dg) is written
            const T g = -A * softplus(x);
            const T d = grad * (-A) * softplus_grad(x);
            sum_A[size_t(j)] += double(grad) * double(g);
            sum_dt[size_t(j)] += double(d);
            da[i] = d;
        }
    for (int64_t j = 0; j < HV; ++j) {
        if (dA_log) dA_log[j] += T(sum_A[size_t(j)]);
        if (ddt_bias) ddt_bias[j] += T(sum_dt[size_t(j)]);
    }
}

template <typename T>
void gdn_beta_forward(T* beta, const T* b, int64_t N, bool allow_neg_eigval) {
    const T s = allow_neg_eigval ? T(2) : T(1);
    for (int64_t i = 0; i < N; ++i) beta[i] = s * sigmoid(b[i]);
}

template <typename T>
void gdn_beta_backward(T* db, const T* dbeta, const T* b, int64_t N, bool allow_neg_eigval) {
    const T s = allow_neg_eigval ? T(2) : T(1);
    for (int64_t i = 0; i < N; ++i) {
        const T sg = sigmoid(b[i]);
        db[i] = dbeta[i] * s * sg * (T(1) - sg);
    }
}

#define HYDRA_INSTANTIATE(T)                                                                             \
    template void gdn_gate_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t);                 \
    template void gdn_gate_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t); \
    template void gdn_beta_forward<T>(T*, const T*, int64_t, bool);                                       \
    template void gdn_beta_backward<T>(T*, const T*, const T*, int64_t, bool);
HYDRA_INSTANTIATE(float)
HYDRA_INSTANTIATE(double)
#undef HYDRA_INSTANTIATE

}  // namespace hydra::cpu
