// Byte-level BPE tokenizer (GPT-2 family: SmolLM2, Llama-3, Qwen2 vocabularies), matching Hugging Face
// `tokenizers` id for id: special tokens are split out first (leftmost-longest), the rest is
// pre-tokenised (pretokenizer.h), each piece is spelled in the byte alphabet and merged by rank.
// Bytes whose single-byte token is missing from the vocabulary are dropped, as HF does.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_vocab.h"

namespace hydra {

class Tokenizer {
  public:
    // Validates `vocab` (validate_vocab) and builds the lookup tables.
    explicit Tokenizer(TokenizerVocab vocab, const std::string& source = "tokenizer");

    // Token ids of `text` (valid UTF-8, else hydra::Error naming the byte offset). No BOS is added.
    // parse_special: control tokens written in the text ("<|im_start|>") become their ids; otherwise
    // they are encoded as plain text. User-defined added tokens are always matched. Thread-safe.
    std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
    // encode() with BOS in front iff the vocabulary says add_bos (and EOS at the end iff add_eos).
    std::vector<int32_t> encode_with_bos(std::string_view text) const;
    // Concatenated raw bytes of the tokens (special tokens as their text, or skipped). The result is
    // bytes, not necessarily valid UTF-8 (a multi-byte character may be split across tokens).
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
    // Raw bytes of one token (special tokens as their text). Throws for an id out of range.
    const std::string& token_bytes(int32_t id) const;

    int32_t vocab_size() const { return int32_t(vocab_.tokens.size()); }
    int32_t bos_id() const { return vocab_.bos_id; }
    int32_t eos_id() const { return vocab_.eos_id; }
    // Control tokens (type 3): the ones skip_special drops and parse_special matches.
    bool is_special(int32_t id) const;
    // Id of a token given its vocabulary spelling ("Ġthe", "<|im_end|>").
    std::optional<int32_t> find_token(std::string_view piece) const;
    const TokenizerVocab& vocab() const { return vocab_; }
    PreTokenizerKind pre_tokenizer() const { return pre_.kind(); }

  private:
    struct MergeInfo {
        int32_t rank;
        int32_t merged_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
    int32_t type_of(int32_t id) const {
        return vocab_.token_types.empty() ? kTokenNormal : vocab_.token_types[id];
    }
    void check_id(int32_t id) const;
    // BPE of one pre-token (raw bytes), appended to out.
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
    // Pre-tokenise + BPE a stretch without added tokens; `cache` memoises pieces within one call.
    void encode_plain(std::string_view text, std::vector<int32_t>& out,
                      std::unordered_map<std::string_view, std::vector<int32_t>>& cache) const;

    TokenizerVocab vocab_;
    PreTokenizer pre_;
    std::unordered_map<std::string, int32_t> token_to_id_;
    std::unordered_map<uint64_t, MergeInfo> merges_;  // (left id, right id) -> rank, merged id
    int32_t byte_id_[256];                            // id of each single-byte token, -1 if missing
    std::vector<std::string> token_bytes_;            // decoded bytes per id
    // Added tokens to split out of text, longest first per first byte.
    struct Added {
        std::string text;
        int32_t id;
        bool special;  // control: matched only when parse_special
    };
    std::vector<Added> added_[256];
};

}  // namespace hydra
