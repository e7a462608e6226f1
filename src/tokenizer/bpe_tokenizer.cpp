// Byte-level BPE encode/decode (see bpe_tokenizer.h).
#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_unicode.h"

namespace hydra {

Tokenizer::Tokenizer(TokenizerVocab vocab, const std::string& source)
    : vocab_(std::move(vocab)), pre_(pre_tokenizer_from_name(vocab_.pre, source)) {
    validate_vocab(vocab_, source);
    const int32_t n = vocab_size();
    token_to_id_.reserve(size_t(n) * 2);
    // Later ids win on duplicate spellings, as in HF's GGUF conversion (a dict built in id order).
    for (int32_t i = 0; i < n; ++i) token_to_id_[vocab_.tokens[i]] = i;
    for (int b = 0; b < 256; ++b) {
        auto it = token_to_id_.find(byte_to_token_string(uint8_t(b)));
        byte_id_[b] = it == token_to_id_.end() ? -1 : it->second;
    }
    merges_.reserve(vocab_.merges.size() * 2);
    std::string joined;
    for (size_t r = 0; r < vocab_.merges.size(); ++r) {
        const auto& [a, b] = vocab_.merges[r];
        joined.assign(a).append(b);
        const MergeInfo info{int32_t(r), token_to_id_.at(joined)};
        // A repeated pair keeps its last rank, as HF's merge map (collected into a hash map) does.
        merges_.insert_or_assign(pair_key(token_to_id_.at(a), token_to_id_.at(b)), info);
    }
    token_bytes_.resize(size_t(n));
    for (int32_t i = 0; i < n; ++i) {
        const int32_t t = type_of(i);
        const bool literal = t == kTokenControl || t == kTokenUserDefined;
        token_bytes_[i] = literal ? vocab_.tokens[i] : token_string_to_bytes(vocab_.tokens[i]);
        if (literal)
            added_[uint8_t(vocab_.tokens[i][0])].push_back({vocab_.tokens[i], i, t == kTokenControl});
    }
    for (auto& list : added_)
        std::stable_sort(list.begin(), list.end(),
                         [](const Added& x, const Added& y) { return x.text.size() > y.text.size(); });
}

void Tokenizer::check_id(int32_t id) const {
    HYDRA_CHECK(id >= 0 && id < vocab_size(), "token id {} is out of range (vocabulary has {} tokens)", id,
                vocab_size());
}

bool Tokenizer::is_special(int32_t id) const {
    return id >= 0 && id < vocab_size() && type_of(id) == kTokenControl;
}

std::optional<int32_t> Tokenizer::find_token(std::string_view piece) const {
    auto it = token_to_id_.find(std::string(piece));
    if (it == token_to_id_.end()) return std::nullopt;
    return it->second;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    check_id(id);
    return token_bytes_[id];
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
    // Symbols in a doubly linked list over an array; a merge joins a symbol with its right neighbour.
    struct Sym {
        int32_t id;
        int32_t prev, next;
        bool alive;
    };
    std::vector<Sym> syms;
    syms.reserve(piece.size());
    for (unsigned char c : piece) {
        const int32_t id = byte_id_[c];
        if (id < 0) continue;  // no token for this byte: dropped (HF without unk token)
        const int32_t k = int32_t(syms.size());
        syms.push_back({id, k - 1, k + 1, true});
    }
    if (syms.empty()) return;
    syms.back().next = -1;
    if (syms.size() == 1) {
        out.push_back(syms[0].id);
        return;
    }
    // Candidate merges ordered by (rank, position): the lowest rank first, leftmost among equals.
    // Entries go stale when a neighbour changes; they are re-checked when popped (as HF does).
    struct Cand {
        int32_t rank, pos, merged_id;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
    auto push = [&](int32_t pos) {
        const int32_t nx = syms[pos].next;
        if (nx < 0) return;
        auto it = merges_.find(pair_key(syms[pos].id, syms[nx].id));
        if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.merged_id});
    };
    for (int32_t i = 0; i + 1 < int32_t(syms.size()); ++i) push(i);
    while (!queue.empty()) {
        const Cand top = queue.top();
        queue.pop();
        Sym& left = syms[top.pos];
        if (!left.alive || left.next < 0) continue;
        Sym& right = syms[left.next];
        auto it = merges_.find(pair_key(left.id, right.id));
        if (it == merges_.end() || it->second.merged_id != top.merged_id) continue;
        left.id = top.merged_id;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) syms[right.next].prev = top.pos;
        if (left.prev >= 0) push(left.prev);
        push(top.pos);
    }
    for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void Tokenizer::encode_plain(std::string_view text, std::vector<int32_t>& out,
                             std::unordered_map<std::string_view, std::vector<int32_t>>& cache) const {
    std::vector<std::string_view> pieces;
    pre_.split(text, pieces);
    for (std::string_view piece : pieces) {
        if (piece.size() > 64) {  // long pieces rarely repeat: do not cache them
            encode_piece(piece, out);
            continue;
        }
        auto [it, inserted] = cache.try_emplace(piece);
        if (inserted) encode_piece(piece, it->second);
        out.insert(out.end(), it->second.begin(), it->second.end());
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
    const size_t bad = utf8_invalid_offset(text);
    HYDRA_CHECK(
        bad == std::string_view::npos,
        "tokenizer: input text is not valid UTF-8 (byte offset {} of {}, value 0x{:02x}); convert it first",
        bad, text.size(), bad < text.size() ? unsigned(static_cast<unsigned char>(text[bad])) : 0u);
    std::vector<int32_t> out;
    out.reserve(text.size() / 3 + 1);
    std::unordered_map<std::string_view, std::vector<int32_t>> cache;
    // Split out added tokens, leftmost-longest, then encode the stretches between them.
    size_t start = 0;  // start of the pending plain stretch
    size_t pos = 0;
    while (pos < text.size()) {
        const auto& list = added_[static_cast<unsigned char>(text[pos])];
        const Added* hit = nullptr;
        for (const Added& a : list) {
            if (a.special && !parse_special) continue;
            if (text.size() - pos >= a.text.size() &&
                std::memcmp(text.data() + pos, a.text.data(), a.text.size()) == 0) {
                hit = &a;
                break;
            }
        }
        if (!hit) {
            ++pos;
            continue;
        }
        if (pos > start) encode_plain(text.substr(start, pos - start), out, cache);
        out.push_back(hit->id);
        pos += hit->text.size();
        start = pos;
    }
    if (start < text.size()) encode_plain(text.substr(start), out, cache);
    return out;
}

std::vector<int32_t> Tokenizer::encode_with_bos(std::string_view text) const {
    std::vector<int32_t> ids = encode(text);
    if (vocab_.add_bos) ids.insert(ids.begin(), vocab_.bos_id);
    if (vocab_.add_eos) ids.push_back(vocab_.eos_id);
    return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
    std::string out;
    for (int32_t id : ids) {
        check_id(id);
        if (skip_special && type_of(id) == kTokenControl) continue;
        out += token_bytes_[id];
    }
    return out;
}

}  // namespace hydra
