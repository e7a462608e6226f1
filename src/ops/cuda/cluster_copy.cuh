// Copies by the copy engine (sm_90), optionally shared by the blocks of a thread-block cluster: tensor-map
// tiles copied once from global memory and delivered into the shared memory of every block of the
// cluster (.multicast::cluster), completing on each block's own mbarrier, and the mbarrier handshake that
// tells a block when all of the cluster has finished reading a buffer, so that it may copy into it again.
// Used by the GDN forward scan (gdn_fwd_scan.cu), whose D / VT slice blocks of one head each read the same
// chunk operands (W, Q, K): one copy for the cluster instead of one per block takes that many times less of
// the L2's bandwidth, and one copy instruction a 64 x 64 tile instead of 512 16-byte copies by the threads.
// (Rows multicast by one cp.async.bulk each were three times slower.)
// Written from the PTX ISA (mbarrier, cp.async.bulk, mapa, barrier.cluster); no third-party code.
#pragma once

#include <cstdint>

#include "ops/cuda/mma_util.cuh"

namespace hydra::cuda::cluster_copy {

using mma::smem_addr;

// This block's rank in its cluster and the cluster's size in blocks.
__device__ __forceinline__ uint32_t rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t size() {
    uint32_t n;
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
    return n;
}

// Every thread of every block of the cluster: a barrier over the whole cluster (release / acquire), so
// that what one block wrote in its shared memory before (an mbarrier's initialisation) is seen by the others
// after, and that no block leaves while another may still signal its mbarriers.
__device__ __forceinline__ void sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}

// One thread: an mbarrier for `arrivals` arrivals, its initialisation released to the cluster (the caller
// runs sync() before any block uses it).
__device__ __forceinline__ void init(uint64_t* bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// One thread: its arrival on this block's barrier, announcing `bytes` that copies will complete on it (the
// copies of any block of the cluster; some may have landed already, which the barrier allows).
__device__ __forceinline__ void expect(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}

// One thread: the 4-d box at coordinates (c0 .. c3) of tensor map `map` (a __grid_constant__ kernel
// parameter) into shared memory at `smem` (1024-byte aligned for a 128-byte swizzle), completing on bar;
// with mask > 1 into the same offset of every block in mask (cluster ranks), completing on each one's bar.
// Elements outside the tensor are written as zeros.
__device__ __forceinline__ void tile4(void* smem, const void* map, int c0, int c1, int c2, int c3,
                                      uint64_t* bar, uint16_t mask) {
    if (mask <= 1)
        asm volatile(
            "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
            "{%2, %3, "
            "%4, %5}], [%6];\n" ::"r"(smem_addr(smem)),
            "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
            : "memory");
    else
        asm volatile(
            "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::"
            "cluster "
            "[%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n" ::"r"(smem_addr(smem)),
            "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar)), "h"(mask)
            : "memory");
}

// The issuing thread, before copies by the copy engine of data that other kernels' blocks wrote with
// ordinary stores (and whose flag this block has seen): orders those writes before the copies' reads.
__device__ __forceinline__ void fence_async_global() {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// Each calling thread: an arrival on this block's barrier once every cp.async copy the thread has issued
// before has landed (noinc: the arrival is one of the count the barrier was initialised with).
__device__ __forceinline__ void arrive_on_copies(uint64_t* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

// One thread: an arrival on the mbarrier at bar's offset in the block of rank `target`, e.g. "this block has
// finished reading the buffer that barrier guards" (after a barrier that follows every read of it). The
// arrival has the default semantics (release at CTA scope), as the consumer release of CUTLASS's multicast
// copy pipelines: the reads it follows have completed (their values were used), and a release at cluster
// scope cost the arriving warp about 330 cycles a chunk in the forward scan.
__device__ __forceinline__ void arrive_remote(uint64_t* bar, uint32_t target) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(bar)), "r"(target));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

// Waits until phase `parity` of this block's barrier has completed: for copies (their data is in this block's
// shared memory once the phase completes), or for other blocks' arrivals (arrive_remote) before copying into
// their buffers. The labels are local to the braces.
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}

}  // namespace hydra::cuda::cluster_copy
