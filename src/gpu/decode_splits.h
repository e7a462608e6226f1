// How decode attention (gpu/decode_attention.h, gpu/paged_decode_attention.h) splits one head's L keys over
// blocks: splits of kMinKeysPerSplit keys until a head has kMaxDecodeSplits of them, then longer splits. A
// short cache thus still spreads over several blocks, and a long one gives each block enough keys that its
// loads overlap and the grid stays about one wave on the GPU (a model's heads x 64 splits; 256 shorter splits
// made two waves of blocks that each waited on a few memory round trips, about half as fast at 32K keys), and
// keeps the merge of the partials short. Pure arithmetic,
// compiled for the host and the device, so the kernels, their callers and the CPU tests agree on it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HYDRA_HOST_DEVICE __host__ __device__
#else
#define HYDRA_HOST_DEVICE
#endif

namespace hydra::gpu {

constexpr int64_t kMinKeysPerSplit =
    64;  // whole steps of a block (decode_step_keys: 64 keys at D 64, 32 at D 128)
constexpr int64_t kMaxDecodeSplits = 64;  // splits per head at most: the merge walks them all

// Keys per split for L >= 1 keys: the smallest multiple of kMinKeysPerSplit that needs at most
// kMaxDecodeSplits splits.
HYDRA_HOST_DEVICE constexpr int64_t decode_keys_per_split(int64_t L) {
    constexpr int64_t span = kMinKeysPerSplit * kMaxDecodeSplits;
    return kMinKeysPerSplit * ((L + span - 1) / span);
}

// Splits (blocks per head) for L >= 1 keys: ceil(L / decode_keys_per_split(L)), at most kMaxDecodeSplits.
HYDRA_HOST_DEVICE constexpr int64_t decode_attention_splits(int64_t L) {
    const int64_t kps = decode_keys_per_split(L);
    return (L + kps - 1) / kps;
}

// fp32 values of one split's partial: its max m, its sum l, two unused (so that acc starts 16-byte aligned:
// the merge reads it as float4), then acc[D].
HYDRA_HOST_DEVICE constexpr int64_t decode_partial_floats(int64_t D) {
    return D + 4;
}

// The most splits any length 1..capacity needs (the grid and partials of a cache of `capacity` keys).
// decode_attention_splits is not monotone in L (it drops where the split length grows), so this is the cap,
// not decode_attention_splits(capacity).
HYDRA_HOST_DEVICE constexpr int64_t decode_max_splits(int64_t capacity) {
    const int64_t n = (capacity + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
    return n < kMaxDecodeSplits ? n : kMaxDecodeSplits;
}

}  // namespace hydra::gpu
