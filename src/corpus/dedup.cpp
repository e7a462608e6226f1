// Exact and MinHash/LSH near-duplicate detection (see dedup.h).
#include "corpus/dedup.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "core/error.h"
#include "core/hash_mix.h"
#include "corpus/text_normalize.h"

namespace hydra {

namespace {

uint64_t hash_bytes(std::string_view s, uint64_t seed) {
    return splitmix64(fnv1a64(s, kFnv1aBasis ^ seed));
}

}  // namespace

MinHashSignature minhash_signature(std::string_view text) {
    // Word hashes of the lower-cased words.
    std::vector<uint64_t> words;
    uint64_t h = kFnv1aBasis;
    bool in_word = false;
    for (char ch : text) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c == ' ' || c == '\t' || c == '\n') {
            if (in_word) words.push_back(splitmix64(h));
            h = kFnv1aBasis;
            in_word = false;
            continue;
        }
        h ^= uint64_t(std::tolower(c));
        h *= 0x100000001b3ull;
        in_word = true;
    }
    if (in_word) words.push_back(splitmix64(h));

    MinHashSignature sig;
    sig.fill(UINT32_MAX);
    std::array<bool, kMinHashBins> filled{};
    auto add = [&](uint64_t sh) {
        const size_t bin = size_t(sh >> 57);  // top 7 bits: kMinHashBins = 128
        const uint32_t v = uint32_t(sh);
        if (!filled[bin] || v < sig[bin]) sig[bin] = v, filled[bin] = true;
    };
    if (words.empty()) return sig;
    const size_t n = words.size() < size_t(kShingleWords) ? 1 : words.size() - kShingleWords + 1;
    for (size_t i = 0; i < n; ++i) {
        uint64_t s = 0x5368696e676c65ull;  // "Shingle"
        for (size_t k = i; k < std::min(words.size(), i + kShingleWords); ++k) s = splitmix64(s ^ words[k]);
        add(s);
    }
    // Rotation densification: an empty bin takes the next non-empty bin's value, offset by the distance
    // so that two documents agree on a filled-in bin only when they agree on its source bin.
    for (int b = 0; b < kMinHashBins; ++b) {
        if (filled[size_t(b)]) continue;
        for (int d = 1; d < kMinHashBins; ++d) {
            const size_t src = size_t((b + d) % kMinHashBins);
            if (filled[src]) {
                sig[size_t(b)] = uint32_t(splitmix64(uint64_t(sig[src]) + uint64_t(d)));
                break;
            }
        }
    }
    return sig;
}

double signature_similarity(const MinHashSignature& a, const MinHashSignature& b) {
    int eq = 0;
    for (int i = 0; i < kMinHashBins; ++i) eq += a[size_t(i)] == b[size_t(i)];
    return double(eq) / kMinHashBins;
}

TextHash128 exact_text_hash(std::string_view text) {
    const std::string k = dedup_key(text);
    return {hash_bytes(k, 0x1234), hash_bytes(k, 0xabcdef)};
}

DuplicateFilter::DuplicateFilter(double near_threshold) : threshold_(near_threshold) {
    HYDRA_CHECK(near_threshold > 0 && near_threshold <= 1,
                "near-duplicate threshold must be in (0, 1] (got {})", near_threshold);
}

DuplicateFilter::Verdict DuplicateFilter::add(const TextHash128& exact, const MinHashSignature& sig) {
    if (exact_.count(exact)) return Verdict::kExact;
    std::array<uint64_t, kLshBands> keys;
    for (int b = 0; b < kLshBands; ++b) {
        uint64_t k = uint64_t(b) * 0x9e3779b97f4a7c15ull;
        for (int r = 0; r < kLshRows; ++r) k = splitmix64(k ^ sig[size_t(b * kLshRows + r)]);
        keys[size_t(b)] = k;
        auto it = bands_[size_t(b)].find(k);
        if (it == bands_[size_t(b)].end()) continue;
        for (uint32_t cand : it->second)
            if (signature_similarity(sigs_[cand], sig) >= threshold_) return Verdict::kNear;
    }
    exact_.insert(exact);
    const uint32_t id = uint32_t(sigs_.size());
    sigs_.push_back(sig);
    for (int b = 0; b < kLshBands; ++b) bands_[size_t(b)][keys[size_t(b)]].push_back(id);
    return Verdict::kKept;
}

}  // namespace hydra
