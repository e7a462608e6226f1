// Per-item ready flags between two kernels running at the same time: a producer block sets an item's flag
// once its outputs are written, a consumer block waits for the flag before it copies them (the streamed GDN
// forward, gdn_chunk.cu: the prep produces chunks, the scan consumes them). The flags are ints in global
// memory, zero before both kernels start: zeroed by a memset before them, or once and then cleared by the
// consumer as it ends (the d 64 forward, whose runs then need no memset before their kernels).
#pragma once

namespace hydra::cuda::ready_flags {

// Producer, one thread, after a __syncthreads() that follows every store of the item by the block: the fence
// makes those stores visible at GPU scope before the flag (the pattern of a grid barrier's arrival).
__device__ __forceinline__ void signal_ready(int* flag) {
    __threadfence();
    asm volatile("st.relaxed.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(1) : "memory");
}

// Consumer: the flag's value now, without waiting for it (the load is issued early, a chunk ahead, and its
// register read only when the item is needed, so the load's latency stays off the consumer's critical path).
// No acquire fence follows: the consumer's copies of the item are issued after the value is seen (its block
// passes a barrier in between), and they are cp.async.cg copies, read from L2, where the producer's fenced
// stores are; an acquire load or fence per item would stall the consuming warp for an L2 round trip.
__device__ __forceinline__ int peek_ready(const int* flag) {
    int v;
    asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(flag));
    return v;
}

// The GPU's nanosecond timer.
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}

// Consumer, one thread: spins until the flag is set, sleeping between polls so that the co-resident producer
// blocks keep the issue slots. A producer that has not set it after 10 s is not running beside the consumer
// (e.g. SMs withheld from the process, so the producer found no room): the kernel stops with a message (the
// launch then fails) rather than hanging the process.
__device__ __forceinline__ void wait_ready(const int* flag) {
    if (peek_ready(flag) == 0) {
        const unsigned long long start = global_ns();
        while (peek_ready(flag) == 0) {
            __nanosleep(256);
            if (global_ns() - start > 10'000'000'000ull) {
                printf(
                    "hydra: a GDN scan block waited 10 s for the prep's chunk flag: the two kernels are not "
                    "running at the same time; set HYDRA_GDN_STREAM=0\n");
                __trap();
            }
        }
    }
    asm volatile("" ::: "memory");
}

}  // namespace hydra::cuda::ready_flags
