// When single-token GPU decode replays CUDA graphs, and which graph a step uses (gpu_forward.h). Pure host
// logic without CUDA, so the CPU tests cover it.
#pragma once

#include <cctype>
#include <cstdint>
#include <string>

#include "gpu/decode_splits.h"

namespace hydra::gpu {

// HYDRA_CUDA_GRAPHS: unset or empty = on (the default); "0", "off", "false", "no" (any case) = off, the
// eager path of one launch per kernel; anything else = on.
inline bool cuda_graphs_from_env(const char* value) {
    if (value == nullptr) return true;
    std::string v;
    for (const char* p = value; *p; ++p) v.push_back(char(std::tolower(static_cast<unsigned char>(*p))));
    return !(v == "0" || v == "off" || v == "false" || v == "no");
}

// Key splits per head of the decode-attention grid in the graph that serves a step over kv_len keys
// (1 <= kv_len <= capacity): the next power of two at or above the splits kv_len needs
// (gpu/decode_splits.h), capped at the most any length of the cache needs. Blocks past kv_len's last split
// exit at once, so fewer than half of the grid's blocks are spare, and a cache needs at most
// log2(kMaxDecodeSplits) + 1 graphs.
inline int64_t decode_graph_splits(int64_t kv_len, int64_t capacity) {
    const int64_t need = decode_attention_splits(kv_len), most = decode_max_splits(capacity);
    int64_t s = 1;
    while (s < need) s *= 2;
    return s < most ? s : most;
}

}  // namespace hydra::gpu
