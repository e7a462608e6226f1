// Stage-1 alignment loss on the GPU (see align_loss.h): a two-pass deterministic fp64 reduction of the
// layer's error and update (block b sums the contiguous range [b * per, (b + 1) * per), one block adds
// the partials in block order), and the element-wise gradient whose scale is read from device memory.
#include "gpu/align_loss.h"

#include <algorithm>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

constexpr int kBlocks = 1024;  // partial sums (the most blocks of the first pass)
constexpr int kThreads = 256;  // first pass and gradient
constexpr int kFinal = 1024;   // second pass (one block)
constexpr int kGradBlocks = 4096;

__device__ __forceinline__ double warp_sum(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Sums a and b over the block (fixed tree: deterministic); sh holds 2 x 32 doubles. Thread 0 gets the result.
__device__ void block_sum2(double& a, double& b, double (*sh)[32]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    a = warp_sum(a);
    b = warp_sum(b);
    if (lane == 0) sh[0][warp] = a, sh[1][warp] = b;
    __syncthreads();
    if (warp == 0) {
        a = lane < nw ? sh[0][lane] : 0.0;
        b = lane < nw ? sh[1][lane] : 0.0;
        a = warp_sum(a);
        b = warp_sum(b);
    }
}

// partial (2 * gridDim.x): {sum (y - t)^2, sum (t - x)^2} of this block's range, in fp64 as the CPU.
__global__ void __launch_bounds__(kThreads)
    align_partial_kernel(const float* __restrict__ y, const float* __restrict__ t,
                         const float* __restrict__ x, int64_t n, int64_t per, double* __restrict__ partial) {
    __shared__ double sh[2][32];
    const int64_t lo = int64_t(blockIdx.x) * per, hi = min(n, lo + per);
    double err = 0, upd = 0;
    for (int64_t k = lo + threadIdx.x; k < hi; k += blockDim.x) {
        const double tk = double(t[k]);
        const double e = double(y[k]) - tk, u = tk - double(x[k]);
        err += e * e;
        upd += u * u;
    }
    block_sum2(err, upd, sh);
    if (threadIdx.x == 0) partial[2 * blockIdx.x] = err, partial[2 * blockIdx.x + 1] = upd;
}

// sums (2) = {err, max(update, 1e-12)} from the nblocks partials.
__global__ void __launch_bounds__(kFinal)
    align_total_kernel(const double* __restrict__ partial, int nblocks, double* __restrict__ sums) {
    __shared__ double sh[2][32];
    double err = 0, upd = 0;
    for (int b = threadIdx.x; b < nblocks; b += blockDim.x) err += partial[2 * b], upd += partial[2 * b + 1];
    block_sum2(err, upd, sh);
    // std::max(update, 1e-12) of the CPU: a NaN update stays NaN (the step is then skipped as non-finite)
    if (threadIdx.x == 0) sums[0] = err, sums[1] = upd < 1e-12 ? 1e-12 : upd;
}

// dy = float(2 / update / L * (double(y) - t)): the CPU's expression and rounding (align_step.cpp).
__global__ void __launch_bounds__(kThreads)
    align_grad_kernel(float* __restrict__ dy, const float* __restrict__ y, const float* __restrict__ t,
                      const double* __restrict__ sums, double num_layers, int64_t n) {
    const double scale = 2.0 / sums[1] / num_layers;
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += int64_t(gridDim.x) * blockDim.x)
        dy[k] = float(scale * (double(y[k]) - double(t[k])));
}

}  // namespace

int64_t align_sums_workspace_doubles() {
    return 2 * kBlocks;
}

void align_layer_sums(double* sums, const float* y, const float* t_next, const float* t_prev, int64_t n,
                      double* partial, cudaStream_t stream) {
    HYDRA_ASSERT(n > 0, "align_layer_sums: n = {}", n);
    const int64_t per = std::max<int64_t>((n + kBlocks - 1) / kBlocks, 1);
    const int nblocks = int((n + per - 1) / per);  // <= kBlocks
    align_partial_kernel<<<nblocks, kThreads, 0, stream>>>(y, t_next, t_prev, n, per, partial);
    CUDA_CHECK(cudaGetLastError());
    align_total_kernel<<<1, kFinal, 0, stream>>>(partial, nblocks, sums);
    CUDA_CHECK(cudaGetLastError());
}

void align_layer_grad(float* dy, const float* y, const float* t_next, const double* sums, int64_t num_layers,
                      int64_t n, cudaStream_t stream) {
    HYDRA_ASSERT(n > 0 && num_layers > 0, "align_layer_grad: n = {}, num_layers = {}", n, num_layers);
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kGradBlocks);
    align_grad_kernel<<<int(blocks), kThreads, 0, stream>>>(dy, y, t_next, sums, double(num_layers), n);
    CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydra::gpu
