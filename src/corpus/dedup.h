// Duplicate documents: exact (a 128-bit hash of dedup_key(), text_normalize.h) and near (MinHash over
// word 5-shingles, banded LSH, estimated Jaccard >= a threshold). Both are first-come: the first copy
// is kept and later ones are reported, so a build's result depends only on the document order.
//
// The MinHash is one-permutation hashing: each shingle's 64-bit hash picks one of kMinHashBins bins by
// its high bits and the bin keeps the least low word, with empty bins filled from the next non-empty one
// (rotation densification). One hash per shingle instead of one per shingle and permutation keeps the
// ~150M words of the full corpus to seconds. LSH: 16 bands of 8 bins, so a pair at Jaccard 0.8 becomes
// a candidate with probability 0.95 and a pair at 0.5 with 0.06; candidates are then checked on the
// whole signature.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace hydra {

inline constexpr int kMinHashBins = 128;
inline constexpr int kLshBands = 16;
inline constexpr int kLshRows = kMinHashBins / kLshBands;
inline constexpr int kShingleWords = 5;

using MinHashSignature = std::array<uint32_t, kMinHashBins>;

// Over lower-cased whitespace-separated words; a text of fewer than kShingleWords words is one shingle.
// An empty text gives all bins UINT32_MAX.
MinHashSignature minhash_signature(std::string_view text);

// Fraction of equal bins: an estimate of the Jaccard similarity of the two shingle sets.
double signature_similarity(const MinHashSignature& a, const MinHashSignature& b);

struct TextHash128 {
    uint64_t lo = 0, hi = 0;
    bool operator==(const TextHash128&) const = default;
};
TextHash128 exact_text_hash(std::string_view text);  // of dedup_key(text)

class DuplicateFilter {
  public:
    explicit DuplicateFilter(double near_threshold = 0.8);

    enum class Verdict { kKept, kExact, kNear };
    // Checks one document against all kept ones and keeps it when it is new.
    Verdict add(const TextHash128& exact, const MinHashSignature& sig);
    size_t kept() const { return sigs_.size(); }

  private:
    struct HashOf {
        size_t operator()(const TextHash128& h) const {
            return size_t(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull));
        }
    };
    double threshold_;
    std::unordered_set<TextHash128, HashOf> exact_;
    std::vector<MinHashSignature> sigs_;
    std::array<std::unordered_map<uint64_t, std::vector<uint32_t>>, kLshBands> bands_;
};

}  // namespace hydra
