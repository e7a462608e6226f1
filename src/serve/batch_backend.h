// BatchBackend: what the serving scheduler (serve/scheduler.h) drives to run a model over many sequences
// at once. A backend holds up to max_slots() sequences ("slots"), each with its own hybrid cache (FA KV
// rows + GDN recurrent state and conv windows). One step() appends a chunk of tokens to each listed slot
// (a decode row is one token, a prefill chunk many) and returns the logits the scheduler asked for.
// The CPU backend (serve/cpu_batch_backend.h) and the GPU backend (gpu/gpu_batch_backend.h) implement it;
// the scheduler never knows which one it runs.
//
// Prefix caching needs one more thing from a backend: a snapshot of a slot's cache at its current
// position (FA KV rows [0, pos) plus the GDN state after exactly pos tokens; a recurrent state cannot be
// rewound, so a snapshot is the only way back to a prefix). restore() puts a snapshot into a slot, after
// which the slot continues as if it had prefilled those pos tokens itself: the output is identical.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace hydra::serve {

// One slot's part of a step. tokens are appended at positions pos(slot) .. pos(slot) + tokens.size().
struct StepRow {
    int32_t slot = -1;
    std::span<const int32_t> tokens;  // at least one
    int64_t n_logits = 1;             // logits of the last n_logits positions, 0 .. tokens.size()
};

// A backend's copy (or shared reference) of one slot's cache at position pos. Immutable once made.
struct PrefixSnapshot {
    virtual ~PrefixSnapshot() = default;
    int64_t pos = 0;    // tokens it holds
    size_t bytes = 0;   // memory it keeps alive beyond what the slots use (for the prefix cache's budget)
};

struct CacheUsage {
    size_t used_bytes = 0, total_bytes = 0;  // KV + state memory in use / available to slots
    int64_t used_slots = 0, total_slots = 0;
};

class BatchBackend {
public:
    virtual ~BatchBackend() = default;

    virtual int64_t vocab_size() const = 0;
    virtual int64_t max_slots() const = 0;
    virtual int64_t context() const = 0;  // positions one sequence may hold

    // A free slot with an empty cache, or -1 when all are taken.
    virtual int32_t acquire() = 0;
    // Gives the slot back (its cache is dropped; snapshots made from it stay valid).
    virtual void release(int32_t slot) = 0;
    virtual int64_t pos(int32_t slot) const = 0;
    // Reserves room for the slot to hold `positions` positions in all; false when the memory is not
    // there now (the scheduler then keeps the request waiting). Never shrinks a reservation.
    virtual bool reserve(int32_t slot, int64_t positions) = 0;

    // Runs every row (distinct slots, each reserved for pos + tokens). logits: (sum of n_logits, V) fp32
    // row-major, rows in the order of `rows`, each row's positions in order. A row's result does not
    // depend on which other rows share the step (the scheduler's batching is invisible in the output).
    virtual void step(std::span<const StepRow> rows, std::vector<float>& logits) = 0;

    // Snapshots are taken only at positions that are multiples of this (1: anywhere).
    virtual int64_t snapshot_granularity() const = 0;
    virtual std::shared_ptr<const PrefixSnapshot> snapshot(int32_t slot) = 0;
    // The slot (freshly acquired, pos 0) takes the snapshot's cache; pos(slot) becomes snapshot.pos.
    virtual void restore(int32_t slot, const PrefixSnapshot& snapshot) = 0;

    virtual CacheUsage usage() const = 0;
};

}  // namespace hydra::serve
