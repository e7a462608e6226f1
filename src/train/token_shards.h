// Token shards: a text corpus tokenized once into binary files that training memory-maps.
//
// build_token_shards() cuts each document into chunks (paragraphs grouped up to ~chunk_bytes),
// sends each chunk to the train or the held-out split by a seeded hash of its text (so the split is
// stable across builds and identical text always lands in the same split), tokenizes it, appends
// eos, and writes each split's token stream, in document order, into shards of at most
// shard_tokens tokens plus an index.json that records what was built from what.
//
// Shard file `<split>_<NNNNN>.bin` (split = train | heldout), little-endian:
//   offset  0  char[8]  magic "HYDRATOK"
//           8  u32      version (1)
//          12  u32      token_bytes: 2 (uint16 ids, used when vocab_size <= 65536) or 4 (int32 ids)
//          16  u64      n_tokens
//          24  i32      vocab_size
//          28  i32      eos_id
//          32  u32      split: 0 train, 1 heldout
//          36  u32      shard number (the NNNNN of the name)
//          40  char[88] tokenizer name (TextEncoder::name()), NUL-padded, at most 87 bytes
//         128  n_tokens ids of token_bytes each
// Files are written to `<name>.tmp` and renamed; index.json is removed first and written last, so
// an interrupted build never leaves an index that points at half-written shards.
//
// index.json: {"format": "hydra-token-shards", "version": 1,
//   "build": {tokenizer, vocab_size, eos_id, token_bytes, seed, heldout_fraction, shard_tokens,
//             chunk_bytes, sources: [{name, bytes, sha256}]},
//   "splits": {"train": {chunks, tokens, shards: [{file, tokens}]}, "heldout": {...}}}
// A later build whose "build" object is equal (same tokenizer, options and source bytes by sha256)
// reuses the shards instead of rebuilding.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "train/byte_tokenizer.h"

namespace hydra {

class MappedFile;

inline constexpr int64_t kDefaultChunkBytes = 4096;
inline constexpr size_t kShardHeaderBytes = 128;
inline constexpr size_t kShardNameBytes = 88;  // tokenizer name field, NUL included

struct ShardBuildReport {
    bool reused = false;  // index.json matched: nothing was rebuilt
    int64_t train_tokens = 0, heldout_tokens = 0;
    int64_t train_chunks = 0, heldout_chunks = 0;
    int64_t source_bytes = 0;
    double seconds = 0;
};

// Builds (or reuses) the shards in out_dir (created if missing). shard_tokens >= 1;
// heldout_fraction in [0, 1]; chunk_bytes >= 1. Throws hydra::Error naming the file for an unreadable
// source, text the encoder rejects (with the byte offset), or an unwritable out_dir.
ShardBuildReport build_token_shards(const std::vector<std::string>& text_files, const TextEncoder& encoder,
                                    const std::string& out_dir, int64_t shard_tokens, double heldout_fraction,
                                    uint64_t seed, int64_t chunk_bytes = kDefaultChunkBytes);

// Chunks of one document, as views into `doc`, in order. Paragraphs are runs of non-blank lines
// (a blank line holds only spaces, tabs or \r); a chunk is the text from the start of its first
// paragraph to the end of its last one (blank lines between them kept, the trailing newline and
// surrounding blank lines dropped), holding as many whole paragraphs as fit in chunk_bytes. A
// paragraph longer than chunk_bytes is cut at a newline where one lies in the second half of the
// window, else at a UTF-8 character boundary; its pieces are trimmed of line breaks at both ends.
// Only blank lines and line breaks at cuts are dropped. Whitespace-only documents give no chunks.
std::vector<std::string_view> split_text_chunks(std::string_view doc, int64_t chunk_bytes);

// One split's token stream written out as shards `<split>_<NNNNN>.bin` of at most shard_tokens tokens
// each (format above), every file through "<name>.tmp" and a rename. The caller writes index.json with
// shards() once every split is finished. split: 0 train, 1 heldout.
class TokenShardWriter {
  public:
    TokenShardWriter(std::string dir, int split, int64_t shard_tokens, int token_bytes, int32_t vocab_size,
                     int32_t eos_id, const std::string& tokenizer);
    ~TokenShardWriter();
    TokenShardWriter(TokenShardWriter&&) noexcept;

    void add(const std::vector<int32_t>& tokens);
    void finish();  // writes the last, partial shard
    int64_t total() const { return total_; }
    // [{"file", "tokens"}] of the shards written so far.
    const nlohmann::json& shards() const;

  private:
    void flush(size_t n);

    std::string dir_;
    int split_;
    int64_t shard_tokens_;
    int token_bytes_;
    int32_t vocab_size_, eos_id_;
    std::string tokenizer_;
    std::vector<int32_t> buffer_;
    int64_t total_ = 0;
    std::unique_ptr<nlohmann::json> shards_;
};

// "train_00003.bin" for (0, 3).
std::string token_shard_name(int split, size_t index);

// The split decision: a 64-bit hash of (seed, chunk bytes) compared with heldout_fraction * 2^64.
bool chunk_is_heldout(std::string_view chunk, double heldout_fraction, uint64_t seed);

// SHA-256 (FIPS 180-4) as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

// One split's token stream: its shards memory-mapped and read as one sequence.
class TokenSplit {
  public:
    TokenSplit();
    ~TokenSplit();
    TokenSplit(TokenSplit&&) noexcept;
    TokenSplit& operator=(TokenSplit&&) noexcept;

    int64_t size() const { return total_; }  // tokens over all shards
    int32_t vocab_size() const { return vocab_size_; }
    int32_t eos_id() const { return eos_id_; }
    int32_t at(int64_t i) const;
    // Copies tokens [start, start + count) into out, across shard boundaries. Asserts the range.
    void read(int64_t start, int64_t count, int32_t* out) const;
    size_t num_shards() const { return files_.size(); }
    const std::string& shard_path(size_t i) const;

  private:
    friend class TokenShardsOpener;
    std::vector<std::unique_ptr<MappedFile>> files_;
    std::vector<int64_t> starts_;  // first global token index of each shard, plus total at the end
    int64_t total_ = 0;
    int token_bytes_ = 4;
    int32_t vocab_size_ = 0, eos_id_ = -1;
};

struct ShardSource {
    std::string name;  // file name without directory
    int64_t bytes = 0;
    std::string sha256;
};

struct TokenShards {
    std::string dir;
    std::string tokenizer;  // TextEncoder::name() of the builder
    int32_t vocab_size = 0, eos_id = -1;
    int token_bytes = 4;
    uint64_t seed = 0;
    double heldout_fraction = 0;
    std::vector<ShardSource> sources;
    TokenSplit train, heldout;
};

// Opens dir/index.json and every shard it lists, checking each header field against the index and
// the file size against n_tokens (and every id against vocab_size), so readers may trust the data.
// With `expect`, also checks the shards were built by a tokenizer of the same name and vocab size.
// Throws hydra::Error naming the file and the field.
TokenShards open_token_shards(const std::string& dir, const TextEncoder* expect = nullptr);

}  // namespace hydra
