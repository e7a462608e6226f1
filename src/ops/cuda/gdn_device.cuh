// Device helpers shared by the GDN chunked kernels (gdn_kernels.h lists their files): the state-slice store
// and the per-chunk scalar copies of the two scans, and a warp sum.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

#include "ops/cuda/gdn_kernels.h"
#include "ops/cuda/mma_util.cuh"

namespace hydra::cuda::gdn {

// A VT x D bf16 state slice from shared memory (row stride D + 8) to global memory (row stride D), 16 bytes
// per access, NTH threads.
template <int D, int VT, int NTH>
__device__ __forceinline__ void store_slice(bf16* dst, const bf16* src, int tid) {
    for (int idx = tid; idx < VT * D / 8; idx += NTH) {
        const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
        *reinterpret_cast<uint4*>(dst + size_t(r) * D + c) =
            *reinterpret_cast<const uint4*>(&src[r * (D + 8) + c]);
    }
}

// The chunk's 64 gate cumsums and q / k 1/norms (head-major rows from hrow0, Args = ScanArgs or
// BScanArgs) into shared memory with threads 0..47, in the caller's copy group.
template <class Args>
__device__ __forceinline__ void load_chunk_scalars(float* gam, float* rq, float* rk, const Args& a,
                                                   size_t hrow0, int tid) {
    if (tid < 16)
        mma::cp_async16(&gam[tid * 4], a.gam + hrow0 + tid * 4);
    else if (tid < 32)
        mma::cp_async16(&rq[(tid - 16) * 4], a.rq + hrow0 + (tid - 16) * 4);
    else if (tid < 48)
        mma::cp_async16(&rk[(tid - 32) * 4], a.rk + hrow0 + (tid - 32) * 4);
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

}  // namespace hydra::cuda::gdn
