// Linear forward/backward (see linear.h) on OpenBLAS: sgemm for float, dgemm for double.
#include "ops/cpu/linear.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/error.h"
#include "core/gemm.h"

namespace hydra::cpu {

template <typename T>
void linear_forward(T* out, const T* x, const T* W, const T* bias_or_null, int64_t N, int64_t K, int64_t M) {
    if (N <= 0 || M <= 0) return;
    if (bias_or_null) {
        for (int64_t n = 0; n < N; ++n) std::memcpy(out + n * M, bias_or_null, sizeof(T) * size_t(M));
    } else if (K <= 0) {
        std::fill(out, out + N * M, T(0));
    }
    if (K <= 0) return;  // BLAS needs leading dimensions >= 1
    if (N == 1) {  // decode: a matrix-vector product streams W once
        gemv(M, K, T(1), W, x, bias_or_null ? T(1) : T(0), out);
        return;
    }
    // out (N, M) = x (N, K) @ W^T (K, M) [+ out, which holds the broadcast bias]
    gemm(false, true, N, M, K, T(1), x, K, W, K, bias_or_null ? T(1) : T(0), out, M);
}

template <typename T>
void linear_backward(T* dx_or_null, T* dW, T* dbias_or_null, const T* dout, const T* x, const T* W, int64_t N,
                     int64_t K, int64_t M, bool accumulate_dx) {
    if (N <= 0) return;
    if (dx_or_null) {
        if (M <= 0 || K <= 0) {
            if (!accumulate_dx) std::fill(dx_or_null, dx_or_null + N * std::max<int64_t>(K, 0), T(0));
        } else {
            // dx (N, K) (+)= dout (N, M) @ W (M, K)
            gemm(false, false, N, K, M, T(1), dout, M, W, K, accumulate_dx ? T(1) : T(0), dx_or_null, K);
        }
    }
    if (M <= 0) return;
    // dW (M, K) += dout^T (M, N) @ x (N, K)
    if (dW && K > 0) gemm(true, false, M, K, N, T(1), dout, M, x, K, T(1), dW, K);
    if (dbias_or_null) {
        // Column sums; every thread owns a block of outputs and walks rows in order (deterministic).
        constexpr int64_t kBlock = 64;
        const int64_t n_blocks = (M + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (N * M > 65536)
        for (int64_t b = 0; b < n_blocks; ++b) {
            const int64_t m0 = b * kBlock, m1 = std::min(M, m0 + kBlock);
            double acc[kBlock] = {};
            for (int64_t n = 0; n < N; ++n)
                for (int64_t m = m0; m < m1; ++m) acc[m - m0] += double(dout[n * M + m]);
            for (int64_t m = m0; m < m1; ++m) dbias_or_null[m] += T(acc[m - m0]);
        }
    }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t,
                                    int64_t);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t,
                                     int64_t);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                     int64_t, int64_t, int64_t, bool);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int64_t, int64_t, int64_t, bool);

}  // namespace hydra::cpu
