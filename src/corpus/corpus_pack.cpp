// Packing and unpacking corpora (see corpus_pack.h).
#include "corpus/corpus_pack.h"

#include <fmt/format.h>
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/threading.h"
#include "corpus/corpus_dir.h"
#include "io/atomic_dir.h"
#include "io/bounded_parse.h"
#include "io/json_member.h"
#include "train/corpus_manifest.h"
#include "train/mix_config.h"
#include "train/token_shards.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr char kPackMagic[8] = {'H', 'Y', 'D', 'R', 'A', 'P', 'K', '1'};
constexpr uint64_t kMaxHeaderBytes = uint64_t(64) << 20;
constexpr int kWindowLog = 27;

std::string to_planes(const std::vector<int32_t>& ids, int token_bytes) {
    std::string out(ids.size() * size_t(token_bytes), '\0');
    for (int p = 0; p < token_bytes; ++p)
        for (size_t i = 0; i < ids.size(); ++i)
            out[size_t(p) * ids.size() + i] = char((uint32_t(ids[i]) >> (8 * p)) & 0xFF);
    return out;
}

std::vector<int32_t> from_planes(std::string_view planes, int token_bytes) {
    const size_t n = planes.size() / size_t(token_bytes);
    std::vector<int32_t> ids(n, 0);
    for (int p = 0; p < token_bytes; ++p)
        for (size_t i = 0; i < n; ++i)
            ids[i] |= int32_t(uint32_t(static_cast<unsigned char>(planes[size_t(p) * n + i])) << (8 * p));
    return ids;
}

std::string compress(const std::string& data, int level) {
    ZSTD_CCtx* cc = ZSTD_createCCtx();
    HYDRA_CHECK(cc, "zstd: cannot create a compression context");
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_enableLongDistanceMatching, 1);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_windowLog, kWindowLog);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_nbWorkers, num_threads());  // ignored by a single-threaded libzstd
    std::string out(ZSTD_compressBound(data.size()), '\0');
    const size_t n = ZSTD_compress2(cc, out.data(), out.size(), data.data(), data.size());
    ZSTD_freeCCtx(cc);
    HYDRA_CHECK(!ZSTD_isError(n), "zstd: compression failed: {}", ZSTD_getErrorName(n));
    out.resize(n);
    return out;
}

// obj[key] when it is a number, else `fallback` (the record of a pack's build: informative only)
template <typename T>
json number_or(const json& obj, const char* key, T fallback) {
    const auto it = obj.find(key);
    return it != obj.end() && it->is_number() ? *it : json(fallback);
}

std::string decompress(std::string_view frame, uint64_t expected, const std::string& where) {
    const unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
    HYDRA_CHECK(size != ZSTD_CONTENTSIZE_ERROR && size != ZSTD_CONTENTSIZE_UNKNOWN && size == expected,
                "{}: corrupt blob (zstd frame says {} bytes, the header {})", where,
                size == ZSTD_CONTENTSIZE_ERROR ? -1LL : (long long)size, expected);
    ZSTD_DCtx* dc = ZSTD_createDCtx();
    HYDRA_CHECK(dc, "zstd: cannot create a decompression context");
    ZSTD_DCtx_setParameter(dc, ZSTD_d_windowLogMax, kWindowLog);
    std::string out(expected, '\0');
    const size_t n = ZSTD_decompressDCtx(dc, out.data(), out.size(), frame.data(), frame.size());
    ZSTD_freeDCtx(dc);
    HYDRA_CHECK(!ZSTD_isError(n) && n == expected, "{}: corrupt blob: {}", where,
                ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short");
    return out;
}

}  // namespace

PackReport pack_corpus(const std::string& corpus_dir, const std::string& mix_path, int64_t train_tokens,
                       const std::string& out_file, int level) {
    const auto t0 = std::chrono::steady_clock::now();
    HYDRA_CHECK(train_tokens >= 1, "--tokens must be >= 1 (got {})", train_tokens);
    const CorpusManifest m = read_corpus_manifest(corpus_dir);
    const TokenShards shards = open_token_shards(corpus_dir);
    HYDRA_CHECK(shards.train.size() == m.train_tokens && shards.heldout.size() == m.heldout_tokens,
                "{}: manifest.json says {} / {} tokens but the shards hold {} / {}", corpus_dir,
                m.train_tokens, m.heldout_tokens, shards.train.size(), shards.heldout.size());
    const std::vector<double> w =
        mix_path.empty() ? default_mix_weights(corpus_dir, m) : read_mix_weights(mix_path, m);
    // Each source's share of the budget by weight; a source smaller than its share gives the rest to the
    // others, until no share exceeds its source.
    const size_t S = m.sources.size();
    std::vector<int64_t> avail(S), take(S, 0);
    std::vector<bool> capped(S, false);
    for (size_t i = 0; i < S; ++i) {
        avail[i] = m.sources[i].train_end - m.sources[i].train_begin;
        if (w[i] <= 0 || avail[i] == 0) capped[i] = true;
    }
    int64_t budget = train_tokens;
    while (budget > 0) {
        double W = 0;
        for (size_t i = 0; i < S; ++i)
            if (!capped[i]) W += w[i];
        if (W <= 0) break;
        bool changed = false;
        for (size_t i = 0; i < S; ++i)
            if (!capped[i] && double(budget) * w[i] / W >= double(avail[i])) {
                take[i] = avail[i];
                budget -= avail[i];
                capped[i] = true;
                changed = true;
            }
        if (changed) continue;
        for (size_t i = 0; i < S; ++i)
            if (!capped[i]) take[i] = int64_t(double(budget) * w[i] / W);
        break;
    }
    // Prefixes cut back to a document end (eos) where one lies in the prefix.
    std::vector<int32_t> train;
    const fs::path manifest_path = fs::path(corpus_dir) / "manifest.json";
    json manifest = parse_json_bounded(read_text_file(manifest_path), manifest_path.string());
    int64_t heldout_at = 0;
    for (size_t i = 0; i < S; ++i) {
        const CorpusSourceEntry& s = m.sources[i];
        std::vector<int32_t> buf(static_cast<size_t>(take[i]));
        if (take[i] > 0) shards.train.read(s.train_begin, take[i], buf.data());
        if (take[i] < avail[i]) {
            size_t end = buf.size();
            while (end > 0 && buf[end - 1] != m.eos_id) --end;
            if (end > 0) buf.resize(end);
        }
        const int64_t b = int64_t(train.size());
        train.insert(train.end(), buf.begin(), buf.end());
        json& e = manifest["sources"][i];
        e["spans"]["train"] = {b, int64_t(train.size())};
        e["packed"] = {
            {"train_tokens", int64_t(buf.size())}, {"of_train_tokens", avail[i]}, {"weight", w[i]}};
        e["spans"]["heldout"] = {heldout_at, heldout_at + (s.heldout_end - s.heldout_begin)};
        heldout_at += s.heldout_end - s.heldout_begin;
    }
    std::vector<int32_t> heldout(size_t(shards.heldout.size()));
    if (!heldout.empty()) shards.heldout.read(0, int64_t(heldout.size()), heldout.data());
    manifest["totals"]["train_tokens"] = int64_t(train.size());
    manifest["totals"]["heldout_tokens"] = int64_t(heldout.size());
    manifest["packed_from"] = {{"train_tokens", m.train_tokens}, {"requested_train_tokens", train_tokens}};
    manifest.erase("shards");  // of the full build; unpack writes new ones
    parse_corpus_manifest(manifest, "packed manifest");
    json mix = {{"format", "hydra-corpus-mix"}, {"weights", json::object()}};
    for (size_t i = 0; i < S; ++i) mix["weights"][m.sources[i].name] = w[i];

    const int tb = shards.token_bytes;
    const std::string planes[2] = {to_planes(train, tb), to_planes(heldout, tb)};
    std::string blobs[2];
    for (int s = 0; s < 2; ++s) blobs[s] = compress(planes[s], level);
    json header = {{"format", "hydra-corpus-pack"}, {"version", 1}, {"token_bytes", tb},
                   {"manifest", manifest},          {"mix", mix},   {"blobs", json::array()}};
    const char* names[2] = {"train", "heldout"};
    for (int s = 0; s < 2; ++s)
        header["blobs"].push_back({{"split", names[s]},
                                   {"tokens", int64_t(s ? heldout.size() : train.size())},
                                   {"bytes", int64_t(blobs[s].size())},
                                   {"sha256", sha256_hex(planes[s])}});
    const std::string htext = header.dump();
    const uint64_t hlen = htext.size();
    const std::string part = out_file + ".part";
    {
        std::ofstream out(part, std::ios::binary | std::ios::trunc);
        HYDRA_CHECK(bool(out), "{}: cannot open for writing", part);
        out.write(kPackMagic, 8);
        out.write(reinterpret_cast<const char*>(&hlen), 8);
        out.write(htext.data(), std::streamsize(htext.size()));
        for (const std::string& b : blobs) out.write(b.data(), std::streamsize(b.size()));
        out.close();
        if (!out) {
            std::remove(part.c_str());
            fail("{}: write failed (disk full?)", part);
        }
    }
    std::error_code ec;
    fs::rename(part, out_file, ec);
    HYDRA_CHECK(!ec, "{}: cannot rename into place: {}", out_file, ec.message());
    PackReport r;
    r.train_tokens = int64_t(train.size());
    r.heldout_tokens = int64_t(heldout.size());
    r.bytes = int64_t(fs::file_size(out_file));
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

PackReport unpack_corpus(const std::string& pack_file, const std::string& out_dir, bool force) {
    const auto t0 = std::chrono::steady_clock::now();
    std::error_code ec;
    HYDRA_CHECK(fs::is_regular_file(pack_file, ec), "{}: missing or not a regular file", pack_file);
    const std::string data = read_text_file(pack_file);
    HYDRA_CHECK(data.size() >= 16 && std::memcmp(data.data(), kPackMagic, 8) == 0,
                "{}: not a hydra corpus pack (bad magic)", pack_file);
    uint64_t hlen;
    std::memcpy(&hlen, data.data() + 8, 8);
    HYDRA_CHECK(hlen <= kMaxHeaderBytes && hlen <= data.size() - 16, "{}: truncated (header of {} bytes)",
                pack_file, hlen);
    const json header = parse_json_bounded(std::string_view(data).substr(16, hlen), pack_file + ": header");
    const json *format = json_member(header, "format"), *version = json_member(header, "version");
    HYDRA_CHECK(format && *format == "hydra-corpus-pack" && version && *version == 1,
                "{}: header is not a version-1 hydra-corpus-pack", pack_file);
    const json* tbj = json_member(header, "token_bytes");
    HYDRA_CHECK(tbj && tbj->is_number_integer() && (*tbj == 2 || *tbj == 4),
                "{}: header token_bytes must be 2 or 4", pack_file);
    const int tb = tbj->get<int>();
    const json *manifest = json_member(header, "manifest"), *mix = json_member(header, "mix"),
               *blobs = json_member(header, "blobs");
    HYDRA_CHECK(manifest && mix && blobs && blobs->is_array() && blobs->size() == 2,
                "{}: header needs manifest, mix and two blobs", pack_file);
    const CorpusManifest m = parse_corpus_manifest(*manifest, pack_file + ": manifest");
    HYDRA_CHECK((m.vocab_size <= 65536 ? 2 : 4) == tb, "{}: token_bytes {} does not fit vocab_size {}",
                pack_file, tb, m.vocab_size);
    std::vector<int32_t> splits[2];
    uint64_t at = 16 + hlen;
    for (int s = 0; s < 2; ++s) {
        const json& b = (*blobs)[size_t(s)];
        const std::string where = fmt::format("{}: blob {}", pack_file, s);
        const json *tokens = json_member(b, "tokens"), *bytes_j = json_member(b, "bytes"),
                   *sha = json_member(b, "sha256");
        HYDRA_CHECK(tokens && tokens->is_number_unsigned() && bytes_j && bytes_j->is_number_unsigned() &&
                        sha && sha->is_string(),
                    "{}: needs tokens, bytes and sha256", where);
        const uint64_t n = tokens->get<uint64_t>(), bytes = bytes_j->get<uint64_t>();
        HYDRA_CHECK(bytes <= data.size() - at, "{}: truncated ({} bytes announced, {} left)", where, bytes,
                    data.size() - at);
        const int64_t manifest_tokens = s == 0 ? m.train_tokens : m.heldout_tokens;
        HYDRA_CHECK(n == uint64_t(manifest_tokens), "{}: {} tokens, the manifest {}", where, n,
                    manifest_tokens);
        // Token planes compress 2-4x; a frame claiming far more would only make us allocate what the file
        // says before zstd could refuse it.
        HYDRA_CHECK(n <= (256 * bytes + (uint64_t(1) << 16)) / uint64_t(tb),
                    "{}: {} tokens in {} compressed bytes is not plausible", where, n, bytes);
        const std::string planes =
            decompress(std::string_view(data).substr(at, bytes), n * uint64_t(tb), where);
        HYDRA_CHECK(sha256_hex(planes) == sha->get<std::string>(), "{}: checksum mismatch", where);
        splits[s] = from_planes(planes, tb);
        for (int32_t id : splits[s])
            HYDRA_CHECK(id >= 0 && id < m.vocab_size, "{}: token id {} outside [0, {})", where, id,
                        m.vocab_size);
        at += bytes;
    }
    HYDRA_CHECK(at == data.size(), "{}: {} bytes after the last blob", pack_file, data.size() - at);
    HYDRA_CHECK(int64_t(splits[0].size()) == m.train_tokens && int64_t(splits[1].size()) == m.heldout_tokens,
                "{}: blobs hold {} / {} tokens, the manifest {} / {}", pack_file, splits[0].size(),
                splits[1].size(), m.train_tokens, m.heldout_tokens);
    write_corpus_dir_atomically(out_dir, force, "--out", [&](const fs::path& tmp) {
        json index_splits = json::object();
        const char* names[2] = {"train", "heldout"};
        for (int s = 0; s < 2; ++s) {
            TokenShardWriter w(tmp.string(), s, int64_t(1) << 24, tb, m.vocab_size, m.eos_id, m.tokenizer);
            w.add(splits[s]);
            w.finish();
            int64_t docs = 0;
            for (int32_t id : splits[s]) docs += id == m.eos_id;
            index_splits[names[s]] = {{"chunks", docs}, {"tokens", w.total()}, {"shards", w.shards()}};
        }
        const json build = {{"tokenizer", m.tokenizer},
                            {"vocab_size", m.vocab_size},
                            {"eos_id", m.eos_id},
                            {"token_bytes", tb},
                            {"seed", number_or(*manifest, "seed", 0)},
                            {"heldout_fraction", number_or(*manifest, "heldout_fraction", 0.0)},
                            {"shard_tokens", int64_t(1) << 24},
                            {"chunk_bytes", 0},
                            {"split_by", "document"},
                            {"sources", json::array()}};
        write_text_file(
            tmp / "index.json",
            json{{"format", "hydra-token-shards"}, {"version", 1}, {"build", build}, {"splits", index_splits}}
                .dump(1));
        write_text_file(tmp / "manifest.json", manifest->dump(1));
        write_text_file(tmp / "mix.json", mix->dump(1));
        open_token_shards(tmp.string());
        const CorpusManifest check = read_corpus_manifest(tmp.string());
        read_mix_weights((tmp / "mix.json").string(), check);
    });
    PackReport r;
    r.train_tokens = int64_t(splits[0].size());
    r.heldout_tokens = int64_t(splits[1].size());
    r.bytes = int64_t(data.size());
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace hydra
