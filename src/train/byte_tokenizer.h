// Byte-level tokenizer for tiny CPU teachers (no 49K-row embedding), and TextEncoder: the small
// interface the shard builder and the data loader use, so either this tokenizer or the model's BPE
// Tokenizer can feed training.
//
// ByteTokenizer ids (vocab_size 260):
//   0..255  the byte with that value (any byte string round-trips exactly, UTF-8 or not)
//   256     <|endoftext|>  end of a document / chunk (eos)
//   257     <|im_start|>   ChatML turn start
//   258     <|im_end|>     ChatML turn end
//   259     <pad>          padding (never produced by encode)
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hydra {

class Tokenizer;

class ByteTokenizer {
  public:
    static constexpr int32_t kEndOfText = 256;
    static constexpr int32_t kImStart = 257;
    static constexpr int32_t kImEnd = 258;
    static constexpr int32_t kPad = 259;
    static constexpr int32_t kVocabSize = 260;

    // One id per byte. parse_special: the literal texts "<|endoftext|>", "<|im_start|>",
    // "<|im_end|>" in `text` become their ids (leftmost match); otherwise they stay bytes. "<pad>" is
    // never matched, so ordinary text containing it round-trips. Never throws.
    std::vector<int32_t> encode(std::string_view text, bool parse_special = false) const;
    // Bytes of the ids; special tokens as their text, or dropped when skip_special. Throws
    // hydra::Error for an id outside [0, kVocabSize).
    std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
    // Raw bytes of one token (special tokens as their text).
    std::string token_bytes(int32_t id) const;

    int32_t vocab_size() const { return kVocabSize; }
    int32_t eos_id() const { return kEndOfText; }
    int32_t bos_id() const { return -1; }  // no BOS: documents are separated by eos only
    int32_t pad_id() const { return kPad; }
    bool is_special(int32_t id) const { return id >= 256 && id < kVocabSize; }
    // Id of a special token given its text ("<|im_end|>"), or of a one-byte string.
    std::optional<int32_t> find_token(std::string_view piece) const;
};

// What the shard builder needs from a tokenizer. encode() of prose never parses special-token text
// (a novel that quotes "<|endoftext|>" must not end a document). name() identifies the vocabulary
// exactly, so shards built with one tokenizer are refused by a run that uses another.
struct TextEncoder {
    virtual ~TextEncoder() = default;
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;
    virtual std::string decode(std::span<const int32_t> ids) const = 0;
    virtual int32_t vocab_size() const = 0;
    virtual int32_t eos_id() const = 0;
    virtual std::string name() const = 0;
};

// TextEncoder over ByteTokenizer; name() is "byte-v1".
class ByteEncoder final : public TextEncoder {
  public:
    std::vector<int32_t> encode(std::string_view text) const override { return tok_.encode(text, false); }
    std::string decode(std::span<const int32_t> ids) const override { return tok_.decode(ids); }
    int32_t vocab_size() const override { return tok_.vocab_size(); }
    int32_t eos_id() const override { return tok_.eos_id(); }
    std::string name() const override { return "byte-v1"; }

  private:
    ByteTokenizer tok_;
};

// TextEncoder over a BPE Tokenizer (which must outlive the adapter). name() is
// "bpe-<pre>-<vocab size>-<16 hex digits>": the hex is a 64-bit FNV-1a fingerprint of the token
// strings, token types and merges, so two vocabularies of the same size are still told apart.
// encode() needs valid UTF-8 (Tokenizer::encode throws hydra::Error naming the byte offset otherwise).
// eos_id() is the vocabulary's eos; the constructor throws hydra::Error when it has none.
class BpeEncoder final : public TextEncoder {
  public:
    explicit BpeEncoder(const Tokenizer& tokenizer);
    std::vector<int32_t> encode(std::string_view text) const override;
    std::string decode(std::span<const int32_t> ids) const override;
    int32_t vocab_size() const override;
    int32_t eos_id() const override;
    std::string name() const override { return name_; }

  private:
    const Tokenizer& tok_;
    std::string name_;
};

}  // namespace hydra
