// ByteTokenizer and the TextEncoder adapters (see byte_tokenizer.h).
#include "train/byte_tokenizer.h"

#include <fmt/format.h>

#include <array>

#include "core/error.h"
#include "core/hash_mix.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra {

namespace {

// Texts of the special ids 256.. in order.
constexpr std::array<std::string_view, 4> kSpecialText = {"<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                                          "<pad>"};
// How many of them encode(parse_special) matches: all but <pad>.
constexpr size_t kParsedSpecials = 3;

uint64_t fnv1a(uint64_t h, std::string_view bytes) {
    return fnv1a64(bytes, h);
}

// v's 8 bytes, least significant first (the same hash on any byte order).
uint64_t fnv1a_u64(uint64_t h, uint64_t v) {
    char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = char((v >> (8 * i)) & 0xff);
    return fnv1a64(std::string_view(bytes, 8), h);
}

}  // namespace

std::vector<int32_t> ByteTokenizer::encode(std::string_view text, bool parse_special) const {
    std::vector<int32_t> ids;
    ids.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        if (parse_special && text[i] == '<') {
            bool matched = false;
            for (size_t s = 0; s < kParsedSpecials; ++s) {
                if (text.substr(i, kSpecialText[s].size()) == kSpecialText[s]) {
                    ids.push_back(256 + int32_t(s));
                    i += kSpecialText[s].size();
                    matched = true;
                    break;
                }
            }
            if (matched) continue;
        }
        ids.push_back(int32_t(static_cast<unsigned char>(text[i])));
        ++i;
    }
    return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    std::string out;
    out.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        const int32_t id = ids[i];
        HYDRA_CHECK(id >= 0 && id < kVocabSize,
                    "byte tokenizer: token id {} at position {} is outside [0, {})", id, i, kVocabSize);
        if (id < 256) {
            out.push_back(char(static_cast<unsigned char>(id)));
        } else if (!skip_special) {
            out.append(kSpecialText[size_t(id - 256)]);
        }
    }
    return out;
}

std::string ByteTokenizer::token_bytes(int32_t id) const {
    const int32_t one[1] = {id};
    return decode(one);
}

std::optional<int32_t> ByteTokenizer::find_token(std::string_view piece) const {
    if (piece.size() == 1) return int32_t(static_cast<unsigned char>(piece[0]));
    for (size_t s = 0; s < kSpecialText.size(); ++s)
        if (piece == kSpecialText[s]) return 256 + int32_t(s);
    return std::nullopt;
}

BpeEncoder::BpeEncoder(const Tokenizer& tokenizer) : tok_(tokenizer) {
    const TokenizerVocab& v = tok_.vocab();
    HYDRA_CHECK(tok_.eos_id() >= 0 && tok_.eos_id() < tok_.vocab_size(),
                "BPE tokenizer has no eos token (eos_id {}): training shards need one to separate documents",
                tok_.eos_id());
    // Lengths are hashed with the bytes so ("ab","c") and ("a","bc") differ.
    uint64_t h = fnv1a64(v.pre);
    for (const std::string& t : v.tokens) h = fnv1a(fnv1a_u64(h, t.size()), t);
    for (int32_t type : v.token_types) h = fnv1a_u64(h, uint64_t(uint32_t(type)));
    for (const auto& [a, b] : v.merges) h = fnv1a(fnv1a_u64(fnv1a(fnv1a_u64(h, a.size()), a), b.size()), b);
    h = fnv1a_u64(h, uint64_t(uint32_t(tok_.eos_id())));
    name_ = fmt::format("bpe-{}-{}-{:016x}", v.pre.empty() ? "default" : v.pre, tok_.vocab_size(), h);
}

std::vector<int32_t> BpeEncoder::encode(std::string_view text) const {
    return tok_.encode(text, false);
}
std::string BpeEncoder::decode(std::span<const int32_t> ids) const {
    return tok_.decode(ids);
}
int32_t BpeEncoder::vocab_size() const {
    return tok_.vocab_size();
}
int32_t BpeEncoder::eos_id() const {
    return tok_.eos_id();
}

}  // namespace hydra
