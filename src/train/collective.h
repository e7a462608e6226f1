// Collective: the operations data-parallel training needs from a group of ranks, with no transport in
// this header. The NCCL implementation (gpu/nccl_collective.h) works on device buffers on the stream it
// is bound to; the CPU tests' implementation (tests/thread_collective.h) works on host buffers across
// threads. The ZeRO-1 and bucket logic (train/zero_shards.h, train/gradient_sync.h) is written against
// this interface only, so the CPU tests run the same code the GPU engine runs.
//
// Every rank must issue the same calls in the same order with the same ranges (a collective matches by
// order). Calls may be asynchronous (NCCL: enqueued on the bound stream); synchronise() waits for them.
#pragma once

#include <cstdint>
#include <vector>

namespace hydra {

enum class CollType { F32, BF16, F64, I64 };

inline int64_t coll_type_bytes(CollType t) {
    return t == CollType::BF16 ? 2 : t == CollType::F32 ? 4 : 8;
}

// [begin, end) in elements of a buffer.
struct ElemRange {
    int64_t begin = 0, end = 0;
    int64_t size() const { return end - begin; }
    bool empty() const { return end <= begin; }
    bool operator==(const ElemRange&) const = default;
};

class Collective {
  public:
    virtual ~Collective() = default;
    virtual int rank() const = 0;
    virtual int world_size() const = 0;

    // In place over each range of `buf` (one group of operations): the elementwise sum over the ranks,
    // divided by the world size when `mean`. With one rank the values are left unchanged.
    virtual void all_reduce(void* buf, CollType type, const std::vector<ElemRange>& ranges, bool mean) = 0;
    // owned[r] (one range per rank, disjoint) of rank r's `buf` is copied into every rank's `buf`.
    virtual void all_gather(void* buf, CollType type, const std::vector<ElemRange>& owned) = 0;
    // owned[r] of rank r's `buf` is copied into root's `buf` (the other ranks' buffers are untouched).
    virtual void gather_to_root(void* buf, CollType type, const std::vector<ElemRange>& owned, int root) = 0;
    // Waits until every call issued so far on this rank has completed (throws when a peer failed or
    // the operation timed out).
    virtual void synchronise() = 0;
    // Host-side helpers (synchronous): every rank leaves once all ranks entered; the OR of a flag.
    virtual void barrier() = 0;
    virtual bool any(bool flag) = 0;
};

}  // namespace hydra
