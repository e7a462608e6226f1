// The two small non-cryptographic hashes the corpus, the shard split and the data loader share:
// splitmix64's mixing step (Steele et al.; also how Rng expands a seed) and 64-bit FNV-1a over bytes.
// Their exact bits are part of stored results: which chunk lands in the held-out split, which documents
// dedup keeps, which rows an epoch draws. Change them and every corpus and split changes.
#pragma once

#include <cstdint>
#include <string_view>

namespace hydra {

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;

// splitmix64's output for state x: x advanced by the golden-ratio increment, then mixed.
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// FNV-1a over `bytes`, starting from `basis` (a seeded variant passes kFnv1aBasis ^ seed).
inline uint64_t fnv1a64(std::string_view bytes, uint64_t basis = kFnv1aBasis) {
    uint64_t h = basis;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    return h;
}

}  // namespace hydra
