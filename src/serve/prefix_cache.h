// PrefixCache: backend snapshots (serve/batch_backend.h) keyed by the token prefix they hold, so a
// request whose prompt starts with a cached prefix restores the snapshot instead of prefilling it.
// Keys are compared token by token (a hash only finds candidates, so a collision can never restore a
// wrong cache); entries are evicted least recently used first once their bytes exceed the budget.
// Thread-safe (one mutex): the scheduler thread looks up and inserts, stats() readers call bytes().
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "serve/batch_backend.h"

namespace hydra::serve {

class PrefixCache {
  public:
    explicit PrefixCache(size_t max_bytes) : max_bytes_(max_bytes) {}

    struct Hit {
        std::shared_ptr<const PrefixSnapshot> snapshot;  // null: no hit
        int64_t tokens = 0;                              // prefix length (== snapshot->pos)
    };
    // The longest cached prefix of `prompt` of at most max_tokens tokens; marks it recently used.
    Hit lookup(std::span<const int32_t> prompt, int64_t max_tokens);
    // Caches `snapshot` for exactly `tokens` (snapshot->pos == tokens.size()). A prefix already cached
    // is only marked used; a snapshot larger than the whole budget is not kept.
    void insert(std::span<const int32_t> tokens, std::shared_ptr<const PrefixSnapshot> snapshot);

    size_t bytes() const;
    int64_t entries() const;

  private:
    struct Entry {
        std::vector<int32_t> tokens;
        std::shared_ptr<const PrefixSnapshot> snapshot;
        uint64_t hash = 0;
    };
    using Lru = std::list<Entry>;  // most recently used first
    void erase(Lru::iterator it);

    size_t max_bytes_;
    mutable std::mutex mu_;
    Lru lru_;
    std::unordered_multimap<uint64_t, Lru::iterator> by_hash_;
    std::map<int64_t, int64_t> lengths_;  // prefix length -> entries of that length
    size_t bytes_ = 0;
};

}  // namespace hydra::serve
