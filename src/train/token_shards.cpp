// Token shard building (chunk, split, tokenize, write) and opening (validate, mmap); see token_shards.h.
#include "train/token_shards.h"

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "core/error.h"
#include "core/hash_mix.h"
#include "io/bounded_parse.h"
#include "io/mapped_file.h"

namespace hydra {

static_assert(std::endian::native == std::endian::little, "token shards are read and written little-endian");

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr char kMagic[8] = {'H', 'Y', 'D', 'R', 'A', 'T', 'O', 'K'};
constexpr uint32_t kVersion = 1;
constexpr const char* kFormat = "hydra-token-shards";
constexpr const char* kSplitNames[2] = {"train", "heldout"};
constexpr size_t kMaxIndexBytes = size_t(64) << 20;

// ---- SHA-256 (FIPS 180-4 §6.2) ----

constexpr uint32_t kSha256K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

void sha256_block(std::array<uint32_t, 8>& h, const unsigned char* p) {
    uint32_t w[64];
    for (int t = 0; t < 16; ++t)
        w[t] = (uint32_t(p[4 * t]) << 24) | (uint32_t(p[4 * t + 1]) << 16) | (uint32_t(p[4 * t + 2]) << 8) |
               uint32_t(p[4 * t + 3]);
    for (int t = 16; t < 64; ++t) {
        const uint32_t s0 = std::rotr(w[t - 15], 7) ^ std::rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        const uint32_t s1 = std::rotr(w[t - 2], 17) ^ std::rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; ++t) {
        const uint32_t S1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
        const uint32_t ch = (e & f) ^ (~e & g);
        const uint32_t t1 = hh + S1 + ch + kSha256K[t] + w[t];
        const uint32_t S0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
        const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        const uint32_t t2 = S0 + maj;
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

// ---- hashing for the split ----

// ---- files ----

std::string read_whole_file(const std::string& path) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) fail("{}: not a readable regular file", path);
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open for reading", path);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) fail("{}: read error", path);
    return ss.str();
}

// Writes `bytes` to path.tmp and renames it over path, so readers see the old file or the new one.
void write_atomically(const std::string& path, const std::vector<std::string_view>& parts) {
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) fail("{}: cannot open for writing: {}", tmp, std::strerror(errno));
    bool ok = true;
    for (std::string_view part : parts)
        if (!part.empty() && std::fwrite(part.data(), 1, part.size(), f) != part.size()) ok = false;
    if (std::fclose(f) != 0) ok = false;
    if (!ok) {
        std::remove(tmp.c_str());
        fail("{}: write failed (disk full?)", tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const std::string why = std::strerror(errno);
        std::remove(tmp.c_str());
        fail("{}: cannot rename into place: {}", path, why);
    }
}

std::string shard_name(int split, size_t index) {
    return fmt::format("{}_{:05}.bin", kSplitNames[split], index);
}

// ---- index.json field access with messages that name the file and the field ----

const json& member(const json& obj, const std::string& key, const std::string& file,
                   const std::string& where) {
    HYDRA_CHECK(obj.is_object(), "{}: field {} must be an object", file, where);
    auto it = obj.find(key);
    HYDRA_CHECK(it != obj.end(), "{}: missing field {}{}{}", file, where, where.empty() ? "" : ".", key);
    return *it;
}

int64_t int_field(const json& obj, const std::string& key, int64_t lo, int64_t hi, const std::string& file,
                  const std::string& where) {
    const json& v = member(obj, key, file, where);
    const std::string name = where.empty() ? key : where + "." + key;
    HYDRA_CHECK(v.is_number_integer(), "{}: field {} must be an integer", file, name);
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        HYDRA_CHECK(u <= uint64_t(hi), "{}: field {} = {} is out of range [{}, {}]", file, name, u, lo, hi);
        return int64_t(u);
    }
    const int64_t x = v.get<int64_t>();
    HYDRA_CHECK(x >= lo && x <= hi, "{}: field {} = {} is out of range [{}, {}]", file, name, x, lo, hi);
    return x;
}

std::string string_field(const json& obj, const std::string& key, const std::string& file,
                         const std::string& where) {
    const json& v = member(obj, key, file, where);
    HYDRA_CHECK(v.is_string(), "{}: field {}{}{} must be a string", file, where, where.empty() ? "" : ".",
                key);
    return v.get<std::string>();
}

}  // namespace

// ---- public helpers ----

std::string sha256_hex(std::string_view bytes) {
    std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    size_t n = bytes.size();
    size_t full = n / 64;
    for (size_t i = 0; i < full; ++i) sha256_block(h, p + 64 * i);
    // Padding: 0x80, zeros, then the message length in bits as a big-endian u64.
    unsigned char tail[128] = {};
    const size_t rem = n - 64 * full;
    if (rem) std::memcpy(tail, p + 64 * full, rem);
    tail[rem] = 0x80;
    const size_t tail_len = rem + 1 + 8 <= 64 ? 64 : 128;
    const uint64_t bits = uint64_t(n) * 8;
    for (int i = 0; i < 8; ++i) tail[tail_len - 1 - size_t(i)] = uint8_t(bits >> (8 * i));
    sha256_block(h, tail);
    if (tail_len == 128) sha256_block(h, tail + 64);
    std::string out;
    for (uint32_t word : h) out += fmt::format("{:08x}", word);
    return out;
}

bool chunk_is_heldout(std::string_view chunk, double heldout_fraction, uint64_t seed) {
    if (heldout_fraction <= 0) return false;
    if (heldout_fraction >= 1) return true;
    const uint64_t x = splitmix64(fnv1a64(chunk) ^ splitmix64(seed));
    return double(x >> 11) * 0x1.0p-53 < heldout_fraction;
}

std::vector<std::string_view> split_text_chunks(std::string_view doc, int64_t chunk_bytes) {
    HYDRA_CHECK(chunk_bytes >= 1, "chunk_bytes must be >= 1 (got {})", chunk_bytes);
    const size_t limit = size_t(chunk_bytes);
    // 1. Paragraphs as [begin, end) byte ranges.
    std::vector<std::pair<size_t, size_t>> paragraphs;
    size_t para_begin = std::string_view::npos, para_end = 0;
    for (size_t ls = 0; ls < doc.size();) {
        size_t le = doc.find('\n', ls);
        if (le == std::string_view::npos) le = doc.size();
        const bool blank = doc.substr(ls, le - ls).find_first_not_of(" \t\r") == std::string_view::npos;
        if (blank) {
            if (para_begin != std::string_view::npos) paragraphs.emplace_back(para_begin, para_end);
            para_begin = std::string_view::npos;
        } else {
            if (para_begin == std::string_view::npos) para_begin = ls;
            para_end = le;
            while (para_end > ls && doc[para_end - 1] == '\r') --para_end;
        }
        ls = le + 1;
    }
    if (para_begin != std::string_view::npos) paragraphs.emplace_back(para_begin, para_end);

    // 2. Group whole paragraphs; cut oversize ones.
    std::vector<std::string_view> chunks;
    size_t cb = 0, ce = 0;
    bool open = false;
    auto emit = [&] {
        if (open) chunks.push_back(doc.substr(cb, ce - cb));
        open = false;
    };
    for (auto [pb, pe] : paragraphs) {
        if (open && pe - cb <= limit) {
            ce = pe;
            continue;
        }
        emit();
        if (pe - pb <= limit) {
            cb = pb, ce = pe, open = true;
            continue;
        }
        // Pieces never start or end with line breaks (they are separators, like blank lines).
        size_t pos = pb;
        auto push_trimmed = [&](size_t b, size_t e) {
            while (e > b && (doc[e - 1] == '\r' || doc[e - 1] == '\n')) --e;
            if (e > b) chunks.push_back(doc.substr(b, e - b));
        };
        const size_t piece_end = pe;  // a plain copy: clang cannot capture structured bindings
        auto skip_breaks = [&] {
            while (pos < piece_end && (doc[pos] == '\r' || doc[pos] == '\n')) ++pos;
        };
        while (pos < pe) {
            if (pe - pos <= limit) {
                push_trimmed(pos, pe);
                break;
            }
            const size_t window_end = pos + limit;  // < pe
            // A newline in the second half of the window (or just after it): cut there.
            const size_t nl = doc.substr(0, window_end + 1).rfind('\n');
            if (nl != std::string_view::npos && nl > pos + limit / 2) {
                push_trimmed(pos, nl);
                pos = nl + 1;
                skip_breaks();
                continue;
            }
            // Else the last UTF-8 character boundary at or before the window end.
            size_t cut = window_end;
            while (cut > pos && (static_cast<unsigned char>(doc[cut]) & 0xC0) == 0x80) --cut;
            if (cut == pos) {  // window smaller than one character: take the whole character
                cut = pos + 1;
                while (cut < pe && (static_cast<unsigned char>(doc[cut]) & 0xC0) == 0x80) ++cut;
            }
            push_trimmed(pos, cut);
            pos = cut;
            skip_breaks();
        }
    }
    emit();
    return chunks;
}

// ---- TokenShardWriter ----

TokenShardWriter::TokenShardWriter(std::string dir, int split, int64_t shard_tokens, int token_bytes,
                                   int32_t vocab_size, int32_t eos_id, const std::string& tokenizer)
    : dir_(std::move(dir)),
      split_(split),
      shard_tokens_(shard_tokens),
      token_bytes_(token_bytes),
      vocab_size_(vocab_size),
      eos_id_(eos_id),
      tokenizer_(tokenizer),
      shards_(std::make_unique<json>(json::array())) {}

TokenShardWriter::~TokenShardWriter() = default;
TokenShardWriter::TokenShardWriter(TokenShardWriter&&) noexcept = default;

void TokenShardWriter::add(const std::vector<int32_t>& tokens) {
    buffer_.insert(buffer_.end(), tokens.begin(), tokens.end());
    total_ += int64_t(tokens.size());
    while (int64_t(buffer_.size()) >= shard_tokens_) flush(size_t(shard_tokens_));
}

void TokenShardWriter::finish() {
    if (!buffer_.empty()) flush(buffer_.size());
}

const nlohmann::json& TokenShardWriter::shards() const {
    return *shards_;
}

void TokenShardWriter::flush(size_t n) {
    const size_t index = shards_->size();
    const std::string name = shard_name(split_, index);
    std::array<char, kShardHeaderBytes> header{};
    std::memcpy(header.data(), kMagic, 8);
    const uint32_t version = kVersion, tb = uint32_t(token_bytes_), split = uint32_t(split_),
                   number = uint32_t(index);
    const uint64_t count = n;
    std::memcpy(header.data() + 8, &version, 4);
    std::memcpy(header.data() + 12, &tb, 4);
    std::memcpy(header.data() + 16, &count, 8);
    std::memcpy(header.data() + 24, &vocab_size_, 4);
    std::memcpy(header.data() + 28, &eos_id_, 4);
    std::memcpy(header.data() + 32, &split, 4);
    std::memcpy(header.data() + 36, &number, 4);
    std::memcpy(header.data() + 40, tokenizer_.data(), tokenizer_.size());
    std::string body(n * size_t(token_bytes_), '\0');
    if (token_bytes_ == 2) {
        for (size_t i = 0; i < n; ++i) {
            const uint16_t v = uint16_t(buffer_[i]);
            std::memcpy(body.data() + 2 * i, &v, 2);
        }
    } else {
        std::memcpy(body.data(), buffer_.data(), n * 4);
    }
    write_atomically(dir_ + "/" + name, {std::string_view(header.data(), header.size()), body});
    shards_->push_back({{"file", name}, {"tokens", int64_t(n)}});
    buffer_.erase(buffer_.begin(), buffer_.begin() + long(n));
}

std::string token_shard_name(int split, size_t index) {
    return shard_name(split, index);
}

// ---- building ----

ShardBuildReport build_token_shards(const std::vector<std::string>& text_files, const TextEncoder& encoder,
                                    const std::string& out_dir, int64_t shard_tokens, double heldout_fraction,
                                    uint64_t seed, int64_t chunk_bytes) {
    const auto t0 = std::chrono::steady_clock::now();
    HYDRA_CHECK(shard_tokens >= 1, "build_token_shards: shard_tokens must be >= 1 (got {})", shard_tokens);
    HYDRA_CHECK(heldout_fraction >= 0 && heldout_fraction <= 1,
                "build_token_shards: heldout_fraction must be in [0, 1] (got {})", heldout_fraction);
    HYDRA_CHECK(chunk_bytes >= 1, "build_token_shards: chunk_bytes must be >= 1 (got {})", chunk_bytes);
    const std::string tokenizer = encoder.name();
    const int32_t vocab_size = encoder.vocab_size(), eos_id = encoder.eos_id();
    HYDRA_CHECK(
        tokenizer.size() < kShardNameBytes && !tokenizer.empty() && tokenizer.find('\0') == std::string::npos,
        "build_token_shards: tokenizer name '{}' must be 1..{} bytes without NUL", tokenizer,
        kShardNameBytes - 1);
    HYDRA_CHECK(vocab_size >= 1 && eos_id >= 0 && eos_id < vocab_size,
                "build_token_shards: tokenizer {} has vocab_size {} and eos_id {}: need 0 <= eos < vocab",
                tokenizer, vocab_size, eos_id);
    const int token_bytes = vocab_size <= 65536 ? 2 : 4;

    // The build key: everything the shards depend on.
    ShardBuildReport report;
    json sources = json::array();
    for (const std::string& path : text_files) {
        const std::string text = read_whole_file(path);
        report.source_bytes += int64_t(text.size());
        sources.push_back({{"name", fs::path(path).filename().string()},
                           {"bytes", int64_t(text.size())},
                           {"sha256", sha256_hex(text)}});
    }
    const json build = {{"tokenizer", tokenizer},
                        {"vocab_size", vocab_size},
                        {"eos_id", eos_id},
                        {"token_bytes", token_bytes},
                        {"seed", seed},
                        {"heldout_fraction", heldout_fraction},
                        {"shard_tokens", shard_tokens},
                        {"chunk_bytes", chunk_bytes},
                        {"sources", sources}};

    std::error_code ec;
    fs::create_directories(out_dir, ec);
    HYDRA_CHECK(fs::is_directory(out_dir), "{}: cannot create the shard directory: {}", out_dir,
                ec.message());
    const std::string index_path = out_dir + "/index.json";

    // Reuse when the index matches and every shard still validates.
    if (fs::exists(index_path)) {
        try {
            const json old = parse_json_bounded(read_whole_file(index_path), index_path);
            if (old.is_object() && old.contains("build") && old["build"] == build) {
                open_token_shards(out_dir);
                report.reused = true;
                report.train_tokens = old["splits"]["train"]["tokens"].get<int64_t>();
                report.heldout_tokens = old["splits"]["heldout"]["tokens"].get<int64_t>();
                report.train_chunks = old["splits"]["train"]["chunks"].get<int64_t>();
                report.heldout_chunks = old["splits"]["heldout"]["chunks"].get<int64_t>();
                report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                return report;
            }
        } catch (const std::exception&) {
            // Stale or damaged: rebuild below.
        }
    }

    // Rebuild: remove the index first (a crash from here on leaves no index, never a wrong one), then
    // shards of earlier builds, which might otherwise outnumber the new ones.
    fs::remove(index_path, ec);
    static const std::regex kShardFile(R"((train|heldout)_\d{5}\.bin(\.tmp)?)");
    for (const auto& entry : fs::directory_iterator(out_dir)) {
        if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), kShardFile))
            fs::remove(entry.path(), ec);
    }

    TokenShardWriter writers[2] = {
        TokenShardWriter(out_dir, 0, shard_tokens, token_bytes, vocab_size, eos_id, tokenizer),
        TokenShardWriter(out_dir, 1, shard_tokens, token_bytes, vocab_size, eos_id, tokenizer)};
    int64_t chunk_counts[2] = {0, 0};
    for (size_t f = 0; f < text_files.size(); ++f) {
        const std::string& path = text_files[f];
        const std::string text = read_whole_file(path);
        HYDRA_CHECK(sha256_hex(text) == sources[f]["sha256"].get<std::string>(),
                    "{}: the file changed while shards were being built; run again", path);
        const std::vector<std::string_view> chunks = split_text_chunks(text, chunk_bytes);
        std::vector<std::vector<int32_t>> tokens(chunks.size());
        std::string first_error;
        // Encoders are thread-safe (Tokenizer::encode is; ByteTokenizer has no state).
#pragma omp parallel for schedule(dynamic, 16)
        for (size_t c = 0; c < chunks.size(); ++c) {
            try {
                tokens[c] = encoder.encode(chunks[c]);
                for (int32_t id : tokens[c])
                    HYDRA_CHECK(id >= 0 && id < vocab_size, "tokenizer {} produced id {} outside [0, {})",
                                tokenizer, id, vocab_size);
            } catch (const std::exception& e) {
#pragma omp critical
                if (first_error.empty())
                    first_error = fmt::format("{}: chunk at byte offset {}: {}", path,
                                              size_t(chunks[c].data() - text.data()), e.what());
            }
        }
        if (!first_error.empty()) throw Error(first_error);
        for (size_t c = 0; c < chunks.size(); ++c) {
            const int split = chunk_is_heldout(chunks[c], heldout_fraction, seed) ? 1 : 0;
            tokens[c].push_back(eos_id);
            writers[split].add(tokens[c]);
            ++chunk_counts[split];
        }
    }
    json splits = json::object();
    for (int s = 0; s < 2; ++s) {
        writers[s].finish();
        splits[kSplitNames[s]] = {
            {"chunks", chunk_counts[s]}, {"tokens", writers[s].total()}, {"shards", writers[s].shards()}};
    }
    const json index = {{"format", kFormat}, {"version", kVersion}, {"build", build}, {"splits", splits}};
    const std::string index_text = index.dump(1);
    write_atomically(index_path, {index_text});

    report.train_tokens = writers[0].total();
    report.heldout_tokens = writers[1].total();
    report.train_chunks = chunk_counts[0];
    report.heldout_chunks = chunk_counts[1];
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return report;
}

// ---- reading ----

TokenSplit::TokenSplit() = default;
TokenSplit::~TokenSplit() = default;
TokenSplit::TokenSplit(TokenSplit&&) noexcept = default;
TokenSplit& TokenSplit::operator=(TokenSplit&&) noexcept = default;

const std::string& TokenSplit::shard_path(size_t i) const {
    HYDRA_ASSERT(i < files_.size(), "shard {} of {}", i, files_.size());
    return files_[i]->path();
}

int32_t TokenSplit::at(int64_t i) const {
    int32_t v;
    read(i, 1, &v);
    return v;
}

void TokenSplit::read(int64_t start, int64_t count, int32_t* out) const {
    HYDRA_ASSERT(start >= 0 && count >= 0 && count <= total_ && start <= total_ - count,
                 "token range [{}, {}+{}) outside [0, {})", start, start, count, total_);
    if (count == 0) return;
    size_t s = size_t(std::upper_bound(starts_.begin(), starts_.end(), start) - starts_.begin()) - 1;
    while (count > 0) {
        const int64_t local = start - starts_[s];
        const int64_t n = std::min(count, starts_[s + 1] - start);
        const uint8_t* base = files_[s]->data() + kShardHeaderBytes;
        if (token_bytes_ == 2) {
            for (int64_t i = 0; i < n; ++i) {
                uint16_t v;
                std::memcpy(&v, base + 2 * (local + i), 2);
                out[i] = int32_t(v);
            }
        } else {
            std::memcpy(out, base + 4 * local, size_t(n) * 4);
        }
        out += n;
        start += n;
        count -= n;
        ++s;
    }
}

class TokenShardsOpener {
  public:
    // Maps and checks one shard against what the index says it holds.
    static void add_shard(TokenSplit& split, const std::string& path, int split_id, size_t number,
                          int64_t expected_tokens, const TokenShards& ts) {
        auto file = std::make_unique<MappedFile>(path);
        const uint8_t* p = file->data();
        const size_t size = file->size();
        HYDRA_CHECK(size >= kShardHeaderBytes, "{}: truncated header: {} bytes, a shard header is {} bytes",
                    path, size, kShardHeaderBytes);
        HYDRA_CHECK(std::memcmp(p, kMagic, 8) == 0,
                    "{}: bad magic (expected \"HYDRATOK\"): not a token shard", path);
        uint32_t version, tb, split_field, number_field;
        uint64_t n_tokens;
        int32_t vocab, eos;
        std::memcpy(&version, p + 8, 4);
        std::memcpy(&tb, p + 12, 4);
        std::memcpy(&n_tokens, p + 16, 8);
        std::memcpy(&vocab, p + 24, 4);
        std::memcpy(&eos, p + 28, 4);
        std::memcpy(&split_field, p + 32, 4);
        std::memcpy(&number_field, p + 36, 4);
        HYDRA_CHECK(version == kVersion, "{}: header field version = {}, this build reads version {}", path,
                    version, kVersion);
        HYDRA_CHECK(tb == uint32_t(ts.token_bytes), "{}: header field token_bytes = {}, index.json says {}",
                    path, tb, ts.token_bytes);
        HYDRA_CHECK(vocab == ts.vocab_size, "{}: header field vocab_size = {}, index.json says {}", path,
                    vocab, ts.vocab_size);
        HYDRA_CHECK(eos == ts.eos_id, "{}: header field eos_id = {}, index.json says {}", path, eos,
                    ts.eos_id);
        HYDRA_CHECK(split_field == uint32_t(split_id), "{}: header field split = {}, expected {} ({})", path,
                    split_field, split_id, kSplitNames[split_id]);
        HYDRA_CHECK(number_field == number, "{}: header field shard number = {}, expected {}", path,
                    number_field, number);
        const char* name_field = reinterpret_cast<const char*>(p + 40);
        const std::string name(name_field, strnlen(name_field, kShardNameBytes));
        HYDRA_CHECK(name == ts.tokenizer, "{}: header field tokenizer = '{}', index.json says '{}'", path,
                    name, ts.tokenizer);
        HYDRA_CHECK(n_tokens == uint64_t(expected_tokens),
                    "{}: header field n_tokens = {}, index.json says {}", path, n_tokens, expected_tokens);
        const uint64_t body = size - kShardHeaderBytes;
        HYDRA_CHECK(
            n_tokens <= body / tb && body == n_tokens * tb,
            "{}: file is {} bytes but header n_tokens = {} needs {} + {} x {} bytes (truncated or padded); "
            "rebuild the shards",
            path, size, n_tokens, kShardHeaderBytes, n_tokens, tb);
        // Every id in range, so the loader (and the embedding lookup after it) may trust the data.
        const uint8_t* data = p + kShardHeaderBytes;
        for (uint64_t i = 0; i < n_tokens; ++i) {
            int64_t id;
            if (tb == 2) {
                uint16_t v;
                std::memcpy(&v, data + 2 * i, 2);
                id = v;
            } else {
                int32_t v;
                std::memcpy(&v, data + 4 * i, 4);
                id = v;
            }
            HYDRA_CHECK(id >= 0 && id < vocab, "{}: token {} has id {} outside [0, vocab_size {})", path, i,
                        id, vocab);
        }
        split.files_.push_back(std::move(file));
        split.total_ += int64_t(n_tokens);
        split.starts_.push_back(split.total_);
    }

    static TokenShards open(const std::string& dir, const TextEncoder* expect) {
        const std::string index_path = dir + "/index.json";
        std::error_code ec;
        HYDRA_CHECK(fs::is_regular_file(index_path, ec), "{}: missing; build the token shards first",
                    index_path);
        const auto index_size = fs::file_size(index_path, ec);
        HYDRA_CHECK(!ec && index_size <= kMaxIndexBytes, "{}: {} bytes, more than the {} an index may have",
                    index_path, index_size, kMaxIndexBytes);
        json index = parse_json_bounded(read_whole_file(index_path), index_path);
        const std::string& f = index_path;
        HYDRA_CHECK(index.is_object(), "{}: top level must be an object", f);
        HYDRA_CHECK(string_field(index, "format", f, "") == kFormat, "{}: field format must be \"{}\"", f,
                    kFormat);
        const int64_t version = int_field(index, "version", 0, INT32_MAX, f, "");
        HYDRA_CHECK(version == kVersion, "{}: field version = {}, this build reads version {}", f, version,
                    kVersion);
        const json& build = member(index, "build", f, "");
        TokenShards ts;
        ts.dir = dir;
        ts.tokenizer = string_field(build, "tokenizer", f, "build");
        ts.vocab_size = int32_t(int_field(build, "vocab_size", 1, INT32_MAX, f, "build"));
        ts.eos_id = int32_t(int_field(build, "eos_id", 0, ts.vocab_size - 1, f, "build"));
        ts.token_bytes = int(int_field(build, "token_bytes", 2, 4, f, "build"));
        HYDRA_CHECK(ts.token_bytes == (ts.vocab_size <= 65536 ? 2 : 4),
                    "{}: field build.token_bytes = {} does not fit vocab_size {}", f, ts.token_bytes,
                    ts.vocab_size);
        ts.seed = uint64_t(member(build, "seed", f, "build").is_number_unsigned()
                               ? member(build, "seed", f, "build").get<uint64_t>()
                               : uint64_t(int_field(build, "seed", 0, INT64_MAX, f, "build")));
        const json& frac = member(build, "heldout_fraction", f, "build");
        HYDRA_CHECK(frac.is_number(), "{}: field build.heldout_fraction must be a number", f);
        ts.heldout_fraction = frac.get<double>();
        const json& sources = member(build, "sources", f, "build");
        HYDRA_CHECK(sources.is_array(), "{}: field build.sources must be an array", f);
        for (size_t i = 0; i < sources.size(); ++i) {
            const std::string where = fmt::format("build.sources[{}]", i);
            ts.sources.push_back({string_field(sources[i], "name", f, where),
                                  int_field(sources[i], "bytes", 0, INT64_MAX, f, where),
                                  string_field(sources[i], "sha256", f, where)});
        }
        if (expect) {
            HYDRA_CHECK(
                expect->name() == ts.tokenizer && expect->vocab_size() == ts.vocab_size,
                "{}: shards were built with tokenizer '{}' (vocab {}), but this run uses '{}' (vocab {}); "
                "rebuild the shards",
                f, ts.tokenizer, ts.vocab_size, expect->name(), expect->vocab_size());
        }
        const json& splits = member(index, "splits", f, "");
        for (int s = 0; s < 2; ++s) {
            TokenSplit& split = s == 0 ? ts.train : ts.heldout;
            split.token_bytes_ = ts.token_bytes;
            split.vocab_size_ = ts.vocab_size;
            split.eos_id_ = ts.eos_id;
            split.starts_ = {0};
            const std::string where = fmt::format("splits.{}", kSplitNames[s]);
            const json& sj = member(splits, kSplitNames[s], f, "splits");
            const int64_t tokens = int_field(sj, "tokens", 0, INT64_MAX, f, where);
            const json& shards = member(sj, "shards", f, where);
            HYDRA_CHECK(shards.is_array(), "{}: field {}.shards must be an array", f, where);
            for (size_t i = 0; i < shards.size(); ++i) {
                const std::string sw = fmt::format("{}.shards[{}]", where, i);
                const std::string file = string_field(shards[i], "file", f, sw);
                // Names are fixed by position, so a hostile index cannot point outside the directory.
                HYDRA_CHECK(file == shard_name(s, i), "{}: field {}.file = '{}', expected '{}'", f, sw, file,
                            shard_name(s, i));
                const int64_t n = int_field(shards[i], "tokens", 0, INT64_MAX, f, sw);
                add_shard(split, dir + "/" + file, s, i, n, ts);
            }
            HYDRA_CHECK(split.total_ == tokens, "{}: field {}.tokens = {} but its shards hold {}", f, where,
                        tokens, split.total_);
        }
        return ts;
    }
};

TokenShards open_token_shards(const std::string& dir, const TextEncoder* expect) {
    return TokenShardsOpener::open(dir, expect);
}

}  // namespace hydra
