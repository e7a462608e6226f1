// Prefix cache (see prefix_cache.h). A lookup hashes every prefix of the prompt once (O(prompt)) and
// probes only the lengths that have entries, longest first.
#include "serve/prefix_cache.h"

#include <algorithm>

#include "core/error.h"

namespace hydra::serve {
namespace {

// FNV-1a style hash of a token prefix, extended one token at a time.
uint64_t extend(uint64_t h, int32_t token) {
    h ^= uint32_t(token);
    h *= 1099511628211ull;
    h ^= h >> 29;
    return h;
}
constexpr uint64_t kSeed = 1469598103934665603ull;

}  // namespace

PrefixCache::Hit PrefixCache::lookup(std::span<const int32_t> prompt, int64_t max_tokens) {
    std::lock_guard lock(mu_);
    max_tokens = std::min<int64_t>(max_tokens, int64_t(prompt.size()));
    if (lengths_.empty() || max_tokens <= 0) return {};
    std::vector<uint64_t> prefix_hash(size_t(max_tokens) + 1);
    prefix_hash[0] = kSeed;
    for (int64_t i = 0; i < max_tokens; ++i)
        prefix_hash[size_t(i + 1)] = extend(prefix_hash[size_t(i)], prompt[size_t(i)]);
    for (auto len = lengths_.upper_bound(max_tokens); len != lengths_.begin();) {
        --len;
        const int64_t n = len->first;
        auto [b, e] = by_hash_.equal_range(prefix_hash[size_t(n)]);
        for (auto it = b; it != e; ++it) {
            const Entry& entry = *it->second;
            if (int64_t(entry.tokens.size()) == n &&
                std::equal(entry.tokens.begin(), entry.tokens.end(), prompt.begin())) {
                lru_.splice(lru_.begin(), lru_, it->second);
                return {entry.snapshot, n};
            }
        }
    }
    return {};
}

void PrefixCache::insert(std::span<const int32_t> tokens, std::shared_ptr<const PrefixSnapshot> snapshot) {
    HYDRA_ASSERT(snapshot && snapshot->pos == int64_t(tokens.size()) && !tokens.empty(),
                 "snapshot of {} positions for a prefix of {} tokens", snapshot ? snapshot->pos : -1,
                 tokens.size());
    std::lock_guard lock(mu_);
    uint64_t h = kSeed;
    for (int32_t t : tokens) h = extend(h, t);
    auto [b, e] = by_hash_.equal_range(h);
    for (auto it = b; it != e; ++it)
        if (std::equal(it->second->tokens.begin(), it->second->tokens.end(), tokens.begin(), tokens.end())) {
            lru_.splice(lru_.begin(), lru_, it->second);
            return;
        }
    if (snapshot->bytes > max_bytes_) return;
    lru_.push_front(Entry{std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(snapshot), h});
    by_hash_.emplace(h, lru_.begin());
    ++lengths_[int64_t(tokens.size())];
    bytes_ += lru_.front().snapshot->bytes;
    while (bytes_ > max_bytes_) erase(std::prev(lru_.end()));
}

void PrefixCache::erase(Lru::iterator it) {
    auto [b, e] = by_hash_.equal_range(it->hash);
    for (auto h = b; h != e; ++h)
        if (h->second == it) {
            by_hash_.erase(h);
            break;
        }
    const int64_t n = int64_t(it->tokens.size());
    if (--lengths_[n] == 0) lengths_.erase(n);
    bytes_ -= it->snapshot->bytes;
    lru_.erase(it);
}

size_t PrefixCache::bytes() const {
    std::lock_guard lock(mu_);
    return bytes_;
}

int64_t PrefixCache::entries() const {
    std::lock_guard lock(mu_);
    return int64_t(lru_.size());
}

}  // namespace hydra::serve
