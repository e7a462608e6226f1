// Tests of the training data pipeline (src/train/byte_tokenizer, token_shards, data_loader): byte
// tokenizer round trips, SHA-256 against the FIPS 180-4 examples (and the prose manifest written by
// Python's hashlib), chunking, shards built from a synthetic corpus whose paragraphs the test knows
// (counts, split stability and disjointness), loader determinism / resume / epoch coverage / mixing,
// the held-out walk, and damaged shard files. The corpus is generated in a temp dir by each test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "temp_dir.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/vocab_from_tokenizer_json.h"
#include "train/byte_tokenizer.h"
#include "train/data_loader.h"
#include "train/token_shards.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using test::slurp;
using json = nlohmann::json;

void spit(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
}

// Runs fn, which must throw hydra::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "no hydra::Error thrown; expected one mentioning " << parts.front();
    } catch (const Error& e) {
        const std::string msg = e.what();
        for (const std::string& p : parts)
            EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
}

// A synthetic corpus: `files` documents of `paras` unique paragraphs, each 52..100 bytes of ASCII
// words on one or two lines, separated by one to three blank lines. With chunk_bytes = 100 every
// paragraph is exactly one chunk (two paragraphs plus a separator exceed 100 bytes).
struct Corpus {
    std::vector<std::string> files;
    std::vector<std::string> paragraphs;  // in document order
    int64_t bytes_of_paragraphs = 0;
};

Corpus make_corpus(const test::TempDir& dir, int files, int paras, uint64_t seed) {
    static const char* kWords[] = {"whale",   "ship",    "sea",   "Emma",  "letter", "ball",
                                   "morning", "captain", "dance", "rain",  "Bath",   "harpoon",
                                   "quiet",   "sister",  "wind",  "voyage"};
    Rng rng(seed);
    Corpus c;
    for (int f = 0; f < files; ++f) {
        std::string doc = "\n";  // leading blank line: not part of any paragraph
        for (int p = 0; p < paras; ++p) {
            const size_t target = 60 + rng.next_u64() % 41;  // words <= 7 bytes: >= 52 bytes
            std::string para = fmt::format("Doc {} para {}:", f, p);
            while (para.size() < target) {
                const char* w = kWords[rng.next_u64() % 16];
                if (para.size() + 1 + std::strlen(w) > target) break;
                para += (para.size() > 40 && para.size() < 46 && rng.next_u64() % 2) ? "\n" : " ";
                para += w;
            }
            c.paragraphs.push_back(para);
            c.bytes_of_paragraphs += int64_t(para.size());
            doc += para;
            doc += std::string(2 + rng.next_u64() % 3, '\n');
        }
        const std::string path = dir.str(fmt::format("doc{}.txt", f));
        spit(path, doc);
        c.files.push_back(path);
    }
    return c;
}

// All tokens of a split.
std::vector<int32_t> all_tokens(const TokenSplit& s) {
    std::vector<int32_t> out(size_t(s.size()));
    s.read(0, s.size(), out.data());
    return out;
}

// Texts between eos tokens, decoded with the byte tokenizer.
std::vector<std::string> chunks_of(const TokenSplit& s) {
    const std::vector<int32_t> t = all_tokens(s);
    std::vector<std::string> out;
    std::vector<int32_t> cur;
    for (int32_t id : t) {
        if (id == ByteTokenizer::kEndOfText) {
            out.push_back(ByteTokenizer().decode(cur));
            cur.clear();
        } else {
            cur.push_back(id);
        }
    }
    EXPECT_TRUE(cur.empty()) << "split does not end with eos";
    return out;
}

// ---------------------------------------------------------------- byte tokenizer

TEST(DataByteTokenizer, RoundTripsRandomBytes) {
    ByteTokenizer tok;
    Rng rng(11);
    for (int trial = 0; trial < 200; ++trial) {
        std::string s(rng.next_u64() % 300, '\0');
        for (char& c : s) c = char(rng.next_u64() & 0xff);
        const std::vector<int32_t> ids = tok.encode(s);
        ASSERT_EQ(ids.size(), s.size());
        for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(ids[i], int32_t(static_cast<unsigned char>(s[i])));
        ASSERT_EQ(tok.decode(ids), s);
        ASSERT_EQ(tok.decode(tok.encode(s, true)), s);  // specials parse back to their own text
    }
}

TEST(DataByteTokenizer, SpecialTokens) {
    ByteTokenizer tok;
    EXPECT_EQ(tok.vocab_size(), 260);
    EXPECT_EQ(tok.eos_id(), 256);
    const std::string text = "a<|im_start|>b<|endoftext|><pad><|im_end|>";
    const std::vector<int32_t> parsed = tok.encode(text, true);
    std::vector<int32_t> expect = {'a', 257, 'b', 256};
    for (char c : std::string("<pad>")) expect.push_back(c);  // <pad> is never parsed
    expect.push_back(258);
    EXPECT_EQ(parsed, expect);
    EXPECT_EQ(tok.encode(text, false).size(), text.size());
    EXPECT_EQ(tok.decode(parsed), text);
    EXPECT_EQ(tok.decode(parsed, /*skip_special=*/true), "ab<pad>");
    EXPECT_EQ(tok.token_bytes(259), "<pad>");
    EXPECT_EQ(tok.find_token("<|im_end|>"), 258);
    EXPECT_EQ(tok.find_token("x"), int32_t('x'));
    EXPECT_FALSE(tok.find_token("xy").has_value());
    const std::vector<int32_t> bad = {65, 260};
    expect_error([&] { tok.decode(bad); }, {"260", "position 1"});
    const std::vector<int32_t> neg = {-1};
    expect_error([&] { tok.decode(neg); }, {"-1"});

    ByteEncoder enc;
    EXPECT_EQ(enc.name(), "byte-v1");
    EXPECT_EQ(enc.vocab_size(), 260);
    EXPECT_EQ(enc.eos_id(), 256);
    EXPECT_EQ(enc.encode("<|endoftext|>").size(), 13u);  // prose never ends a document by accident
}

// ---------------------------------------------------------------- sha256 (FIPS 180-4 examples)

TEST(DataSha256, KnownVectors) {
    EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(
        sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),  // 56 bytes: two pad blocks
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// ---------------------------------------------------------------- chunking

TEST(DataChunks, ParagraphGrouping) {
    using V = std::vector<std::string_view>;
    const std::string doc = "\n\nA\n\nB\n\n\nC\n";
    EXPECT_EQ(split_text_chunks(doc, 1), (V{"A", "B", "C"}));
    EXPECT_EQ(split_text_chunks(doc, 100), (V{"A\n\nB\n\n\nC"}));
    EXPECT_EQ(split_text_chunks(doc, 4), (V{"A\n\nB", "C"}));
    EXPECT_EQ(split_text_chunks(" \n\t\n\r\n", 10), V{});
    EXPECT_EQ(split_text_chunks("ab\r\n  \r\ncd\r\nef\r\n", 2), (V{"ab", "cd", "ef"}));
    EXPECT_EQ(split_text_chunks("ab\r\n  \r\ncd\r\nef\r\n", 100), (V{"ab\r\n  \r\ncd\r\nef"}));
    // An oversize paragraph: cut at a newline in the second half of the window, else at a character.
    EXPECT_EQ(split_text_chunks("aaaa\nbbbb\ncc", 6), (V{"aaaa", "bbbb", "cc"}));
    EXPECT_EQ(split_text_chunks("aaaa\nbbbb\ncc", 4), (V{"aaaa", "bbbb", "cc"}));
    EXPECT_EQ(split_text_chunks("abcd\r\nef", 3), (V{"abc", "d", "ef"}));
    EXPECT_EQ(split_text_chunks("abcdefgh", 3), (V{"abc", "def", "gh"}));
    // UTF-8: "é" is two bytes and is never split.
    const std::string e5 = "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9";
    EXPECT_EQ(split_text_chunks(e5, 3), (V{"\xc3\xa9", "\xc3\xa9", "\xc3\xa9", "\xc3\xa9", "\xc3\xa9"}));
    EXPECT_EQ(split_text_chunks(e5, 1).size(), 5u);  // window smaller than a character: whole characters
    expect_error([] { split_text_chunks("x", 0); }, {"chunk_bytes"});
}

TEST(DataChunks, RandomDocumentsKeepAllText) {
    Rng rng(5);
    const char alphabet[] = "ab \n\n\n\t\r";
    for (int trial = 0; trial < 300; ++trial) {
        std::string doc(rng.next_u64() % 400, ' ');
        for (char& c : doc) c = alphabet[rng.next_u64() % 8];
        const int64_t chunk = 1 + int64_t(rng.next_u64() % 40);
        const auto chunks = split_text_chunks(doc, chunk);
        std::string kept, all;
        const char* prev_end = doc.data();
        for (std::string_view c : chunks) {
            ASSERT_LE(int64_t(c.size()), chunk);
            ASSERT_FALSE(c.empty());
            ASSERT_GE(c.data(), prev_end) << "chunks overlap or are out of order";
            prev_end = c.data() + c.size();
            for (char ch : c)
                if (ch == 'a' || ch == 'b') kept += ch;
        }
        for (char ch : doc)
            if (ch == 'a' || ch == 'b') all += ch;
        ASSERT_EQ(kept, all) << "non-space text lost (trial " << trial << ")";
    }
}

// ---------------------------------------------------------------- shards

TEST(DataShards, CountsSplitsAndReuse) {
    test::TempDir dir("shards");
    const Corpus corpus = make_corpus(dir, 4, 60, 1);
    const ByteEncoder enc;
    const std::string out = dir.str("out");
    const ShardBuildReport r = build_token_shards(corpus.files, enc, out, 1000, 0.2, 42, 100);
    EXPECT_FALSE(r.reused);
    // Every paragraph is one chunk of its bytes plus an eos.
    const int64_t n_para = int64_t(corpus.paragraphs.size());
    EXPECT_EQ(r.train_tokens + r.heldout_tokens, corpus.bytes_of_paragraphs + n_para);
    EXPECT_EQ(r.train_chunks + r.heldout_chunks, n_para);
    EXPECT_GT(r.heldout_chunks, n_para / 10);  // 0.2 of 240: 48 expected, 4 sigma ~ 25
    EXPECT_LT(r.heldout_chunks, n_para * 3 / 10);

    const TokenShards ts = open_token_shards(out, &enc);
    EXPECT_EQ(ts.tokenizer, "byte-v1");
    EXPECT_EQ(ts.token_bytes, 2);
    EXPECT_EQ(ts.train.size(), r.train_tokens);
    EXPECT_EQ(ts.heldout.size(), r.heldout_tokens);
    EXPECT_EQ(int64_t(ts.train.num_shards()), (r.train_tokens + 999) / 1000);
    EXPECT_EQ(fs::file_size(ts.train.shard_path(0)), 128u + 2 * 1000);
    ASSERT_EQ(ts.sources.size(), 4u);
    EXPECT_EQ(ts.sources[2].name, "doc2.txt");
    EXPECT_EQ(ts.sources[2].sha256, sha256_hex(slurp(corpus.files[2])));

    // The splits are disjoint, cover every paragraph, and keep document order.
    const auto train = chunks_of(ts.train), held = chunks_of(ts.heldout);
    std::set<std::string> seen;
    for (const auto& c : train) EXPECT_TRUE(seen.insert(c).second) << "duplicate chunk " << c;
    for (const auto& c : held) EXPECT_TRUE(seen.insert(c).second) << "chunk in both splits: " << c;
    EXPECT_EQ(seen, std::set<std::string>(corpus.paragraphs.begin(), corpus.paragraphs.end()));
    std::vector<std::string> train_expected, held_expected;
    for (const auto& p : corpus.paragraphs) {
        (std::find(held.begin(), held.end(), p) != held.end() ? held_expected : train_expected).push_back(p);
        EXPECT_EQ(chunk_is_heldout(p, 0.2, 42), std::find(held.begin(), held.end(), p) != held.end());
    }
    EXPECT_EQ(train, train_expected);
    EXPECT_EQ(held, held_expected);

    // Same inputs: reused. Same seed elsewhere: byte-identical. Another seed: another split.
    EXPECT_TRUE(build_token_shards(corpus.files, enc, out, 1000, 0.2, 42, 100).reused);
    const std::string out2 = dir.str("out2"), out3 = dir.str("out3");
    build_token_shards(corpus.files, enc, out2, 1000, 0.2, 42, 100);
    EXPECT_EQ(slurp(out + "/index.json"), slurp(out2 + "/index.json"));
    for (size_t i = 0; i < ts.heldout.num_shards(); ++i)
        EXPECT_EQ(slurp(ts.heldout.shard_path(i)), slurp(out2 + fmt::format("/heldout_{:05}.bin", i)));
    build_token_shards(corpus.files, enc, out3, 1000, 0.2, 43, 100);
    EXPECT_NE(chunks_of(open_token_shards(out3).heldout), held);

    // A changed source or option rebuilds; the rebuilt shards reflect the new text.
    spit(corpus.files[0], "\n\nA new first document.\n");
    const ShardBuildReport r2 = build_token_shards(corpus.files, enc, out, 1000, 0.2, 42, 100);
    EXPECT_FALSE(r2.reused);
    EXPECT_LT(r2.train_tokens + r2.heldout_tokens, r.train_tokens + r.heldout_tokens);
    EXPECT_FALSE(build_token_shards(corpus.files, enc, out, 500, 0.2, 42, 100).reused);
    EXPECT_EQ(open_token_shards(out).train.num_shards(), size_t((r2.train_tokens + 499) / 500));

    // Opening with another tokenizer is refused.
    struct Other : TextEncoder {
        std::vector<int32_t> encode(std::string_view) const override { return {}; }
        std::string decode(std::span<const int32_t>) const override { return ""; }
        int32_t vocab_size() const override { return 300; }
        int32_t eos_id() const override { return 0; }
        std::string name() const override { return "other"; }
    } other;
    expect_error([&] { open_token_shards(out, &other); }, {"index.json", "byte-v1", "other", "rebuild"});
    expect_error([&] { build_token_shards({dir.str("missing.txt")}, enc, out, 10, 0.1, 1); },
                 {"missing.txt"});
}

TEST(DataShards, BpeEncoder) {
    const std::string path = HYDRA_SOURCE_DIR "/tests/data/smollm2_tokenizer/tokenizer.json";
    const Tokenizer tok(vocab_from_tokenizer_json(path), path);
    const BpeEncoder enc(tok);
    EXPECT_EQ(enc.vocab_size(), tok.vocab_size());
    EXPECT_EQ(enc.eos_id(), tok.eos_id());
    EXPECT_EQ(enc.name().rfind(fmt::format("bpe-smollm-{}-", tok.vocab_size()), 0), 0u) << enc.name();
    EXPECT_EQ(enc.name(), BpeEncoder(tok).name());
    const std::string text = "Call me Ishmael. <|im_start|>user";
    EXPECT_EQ(enc.encode(text), tok.encode(text, false));
    EXPECT_GT(enc.encode("<|im_start|>").size(), 1u);  // special text in prose stays text

    test::TempDir dir("bpe");
    const Corpus corpus = make_corpus(dir, 2, 30, 2);
    build_token_shards(corpus.files, enc, dir.str("out"), 4096, 0.25, 3, 100);
    const TokenShards ts = open_token_shards(dir.str("out"), &enc);
    EXPECT_EQ(ts.token_bytes, 2);  // 49152 ids fit in uint16
    std::set<std::string> seen;
    for (const TokenSplit* s : {&ts.train, &ts.heldout}) {
        const std::vector<int32_t> t = all_tokens(*s);
        std::vector<int32_t> cur;
        for (int32_t id : t) {
            if (id != enc.eos_id()) {
                cur.push_back(id);
                continue;
            }
            EXPECT_TRUE(seen.insert(enc.decode(cur)).second);
            cur.clear();
        }
    }
    EXPECT_EQ(seen, std::set<std::string>(corpus.paragraphs.begin(), corpus.paragraphs.end()));
    // Byte-level shards of the same corpus do not satisfy the BPE run.
    build_token_shards(corpus.files, ByteEncoder(), dir.str("bytes"), 4096, 0.25, 3, 100);
    expect_error([&] { open_token_shards(dir.str("bytes"), &enc); }, {"byte-v1", enc.name()});
}

TEST(DataShards, DamagedFilesNameFileAndField) {
    test::TempDir dir("damaged");
    const Corpus corpus = make_corpus(dir, 2, 20, 3);
    const std::string out = dir.str("out");
    build_token_shards(corpus.files, ByteEncoder(), out, 300, 0.2, 7, 100);
    const std::string shard = out + "/train_00001.bin";
    const std::string good = slurp(shard), good_index = slurp(out + "/index.json");
    auto with = [&](size_t offset, const std::string& bytes) {
        std::string s = good;
        s.replace(offset, bytes.size(), bytes);
        spit(shard, s);
    };
    auto open = [&] { open_token_shards(out); };

    with(0, "HYDRATOX");
    expect_error(open, {shard, "magic"});
    with(8, std::string("\x02\0\0\0", 4));
    expect_error(open, {shard, "version"});
    with(12, std::string("\x04\0\0\0", 4));
    expect_error(open, {shard, "token_bytes"});
    with(16, std::string("\x2d\x01\0\0\0\0\0\0", 8));  // 301 tokens
    expect_error(open, {shard, "n_tokens"});
    with(24, std::string("\x05\x01\0\0", 4));
    expect_error(open, {shard, "vocab_size"});
    with(36, std::string("\x00\0\0\0", 4));
    expect_error(open, {shard, "shard number"});
    with(40, "byte-v2");
    expect_error(open, {shard, "tokenizer"});
    with(128 + 2 * 17, std::string("\x04\x01", 2));  // id 260
    expect_error(open, {shard, "token 17", "260"});
    spit(shard, good.substr(0, good.size() - 3));
    expect_error(open, {shard, "truncated"});
    spit(shard, good.substr(0, 100));
    expect_error(open, {shard, "truncated header"});
    spit(shard, "");
    expect_error(open, {shard, "truncated header"});
    fs::remove(shard);
    expect_error(open, {shard});
    spit(shard, good);
    EXPECT_NO_THROW(open());

    // index.json: bad JSON, wrong fields, a file name that leaves the directory.
    const std::string index = out + "/index.json";
    spit(index, "{");
    expect_error(open, {index, "JSON"});
    json j = json::parse(good_index);
    j["splits"]["train"]["shards"][0]["file"] = "../train_00000.bin";
    spit(index, j.dump());
    expect_error(open, {index, "splits.train.shards[0].file"});
    j = json::parse(good_index);
    j["splits"]["heldout"]["tokens"] = 5;
    spit(index, j.dump());
    expect_error(open, {index, "splits.heldout.tokens"});
    j = json::parse(good_index);
    j["build"]["vocab_size"] = -3;
    spit(index, j.dump());
    expect_error(open, {index, "build.vocab_size"});
    j = json::parse(good_index);
    j["build"].erase("tokenizer");
    spit(index, j.dump());
    expect_error(open, {index, "build.tokenizer"});
    fs::remove(index);
    expect_error(open, {index, "missing"});
    // A damaged directory is rebuilt rather than reused.
    EXPECT_FALSE(build_token_shards(corpus.files, ByteEncoder(), out, 300, 0.2, 7, 100).reused);
    EXPECT_EQ(slurp(index), good_index);
}

// ---------------------------------------------------------------- loader

// Shards of a small corpus for loader tests (all train unless heldout > 0).
struct LoaderFixture {
    test::TempDir dir;
    TokenShards ts;
    std::vector<int32_t> stream;
    explicit LoaderFixture(const std::string& tag, int paras = 40, double heldout = 0.0) : dir(tag) {
        const Corpus c = make_corpus(dir, 2, paras, 9);
        build_token_shards(c.files, ByteEncoder(), dir.str("out"), 777, heldout, 5, 100);
        ts = open_token_shards(dir.str("out"));
        stream = all_tokens(ts.train);
    }
};

std::vector<std::vector<int32_t>> take(DataLoader& dl, int batches, int64_t B) {
    std::vector<std::vector<int32_t>> out;
    std::vector<int32_t> rows;
    for (int i = 0; i < batches; ++i) {
        dl.next_rows(B, rows);
        out.push_back(rows);
    }
    return out;
}

TEST(DataLoader, RowsAreWindowsAndDeterministic) {
    LoaderFixture fx("loader_det");
    const int64_t T = 32, B = 4;
    DataLoader a(fx.ts.train, T, 1), b(fx.ts.train, T, 1), c(fx.ts.train, T, 2);
    EXPECT_EQ(a.windows_per_epoch(), uint64_t((fx.stream.size() - 1) / T));
    const auto xa = take(a, 10, B), xb = take(b, 10, B), xc = take(c, 10, B);
    EXPECT_EQ(xa, xb);
    EXPECT_NE(xa, xc);
    // Row k is window window_at(0, k) of the token stream.
    for (int i = 0; i < 10; ++i)
        for (int64_t r = 0; r < B; ++r) {
            const uint64_t w = a.window_at(0, uint64_t(i * B + r));
            const std::vector<int32_t> expect(fx.stream.begin() + long(w * T),
                                              fx.stream.begin() + long(w * T + T + 1));
            ASSERT_EQ(std::vector<int32_t>(xa[i].begin() + r * (T + 1), xa[i].begin() + (r + 1) * (T + 1)),
                      expect);
        }
    // inputs / targets are the row shifted by one.
    DataLoader d(fx.ts.train, T, 1);
    std::vector<int32_t> in, tg;
    d.next_batch(B, in, tg);
    ASSERT_EQ(in.size(), size_t(B * T));
    for (int64_t r = 0; r < B; ++r)
        for (int64_t t = 0; t < T; ++t) {
            EXPECT_EQ(in[r * T + t], xa[0][r * (T + 1) + t]);
            EXPECT_EQ(tg[r * T + t], xa[0][r * (T + 1) + t + 1]);
        }
    expect_error([&] { DataLoader(fx.ts.train, int64_t(fx.stream.size()), 1); }, {"seq_len"});
    expect_error([&] { DataLoader(fx.ts.train, 0, 1); }, {"seq_len"});
}

TEST(DataLoader, EpochsCoverEveryWindowOnce) {
    LoaderFixture fx("loader_epoch");
    const int64_t T = 64, B = 7;  // B does not divide the window count, so batches straddle epochs
    DataLoader dl(fx.ts.train, T, 3);
    const uint64_t W = dl.windows_per_epoch();
    ASSERT_GT(W, 20u);
    std::map<std::vector<int32_t>, uint64_t> window_of;
    for (uint64_t w = 0; w < W; ++w)
        window_of[std::vector<int32_t>(fx.stream.begin() + long(w * T),
                                       fx.stream.begin() + long(w * T + T + 1))] = w;
    ASSERT_EQ(window_of.size(), W) << "windows of the test corpus should be distinct";
    std::vector<uint64_t> served;
    std::vector<int32_t> rows;
    while (served.size() < 3 * W) {
        dl.next_rows(B, rows);
        for (int64_t r = 0; r < B; ++r) {
            auto it = window_of.find(
                std::vector<int32_t>(rows.begin() + r * (T + 1), rows.begin() + (r + 1) * (T + 1)));
            ASSERT_NE(it, window_of.end());
            served.push_back(it->second);
        }
    }
    std::vector<std::vector<uint64_t>> epochs;
    for (int e = 0; e < 3; ++e) {
        std::vector<uint64_t> ep(served.begin() + long(e * W), served.begin() + long((e + 1) * W));
        epochs.push_back(ep);
        std::sort(ep.begin(), ep.end());
        for (uint64_t w = 0; w < W; ++w) ASSERT_EQ(ep[w], w) << "epoch " << e;
    }
    EXPECT_NE(epochs[0], epochs[1]);
    EXPECT_NE(epochs[1], epochs[2]);
    EXPECT_EQ(dl.epoch(), 3u);
}

TEST(DataLoader, ResumeIsExact) {
    LoaderFixture fx("loader_resume", 15);  // ~2400 tokens: ~50 windows, so 12 batches cross an epoch
    const int64_t T = 48, B = 8;
    auto generator = [T](Rng& rng, std::vector<int32_t>& s) {
        s.assign(size_t(T + 1), ByteTokenizer::kPad);
        s[0] = int32_t(rng.next_u64() % 256);
        return true;
    };
    DataLoader a(fx.ts.train, T, 99);
    a.set_mixer(generator, 0.25);
    take(a, 7, B);
    const std::string saved = a.cursor().to_json().dump();
    const auto rest_a = take(a, 5, B);

    DataLoader b(fx.ts.train, T, 12345);  // another seed: the cursor must carry everything
    b.set_mixer(generator, 0.25);
    b.restore(DataCursor::from_json(json::parse(saved), "state.json"));
    EXPECT_EQ(take(b, 5, B), rest_a);
    EXPECT_EQ(a.cursor().to_json(), b.cursor().to_json());
    EXPECT_GE(a.epoch(), 1u);

    // Cursor errors name the source and field, and a cursor for another shape is refused.
    json j = json::parse(saved);
    j.erase("position");
    expect_error([&] { DataCursor::from_json(j, "state.json"); }, {"state.json", "position"});
    j = json::parse(saved);
    j["rng"] = {1, 2, 3};
    expect_error([&] { DataCursor::from_json(j, "state.json"); }, {"state.json", "rng"});
    DataLoader other(fx.ts.train, T + 1, 99);
    expect_error([&] { other.restore(DataCursor::from_json(json::parse(saved))); }, {"seq_len"});
    DataCursor far = DataCursor::from_json(json::parse(saved));
    far.position = a.windows_per_epoch() + 1;
    expect_error([&] { b.restore(far); }, {"position"});
}

TEST(DataLoader, MixerFractionAndDeterminism) {
    LoaderFixture fx("loader_mix");
    const int64_t T = 16, B = 50;
    int calls = 0;
    auto generator = [&](Rng& rng, std::vector<int32_t>& s) {
        ++calls;
        s.assign(size_t(T + 1), ByteTokenizer::kPad);
        s[1] = int32_t(rng.next_u64() % 256);
        return true;
    };
    DataLoader a(fx.ts.train, T, 4), b(fx.ts.train, T, 4), plain(fx.ts.train, T, 4);
    a.set_mixer(generator, 0.3);
    b.set_mixer(generator, 0.3);
    const auto xa = take(a, 80, B), xb = take(b, 80, B);  // 4000 rows
    EXPECT_EQ(xa, xb);
    int64_t mixed = 0;
    std::vector<std::vector<int32_t>> prose_rows;
    for (const auto& batch : xa)
        for (int64_t r = 0; r < B; ++r) {
            const bool synthetic = batch[size_t(r * (T + 1))] == ByteTokenizer::kPad;  // prose has no <pad>
            mixed += synthetic;
            if (!synthetic)
                prose_rows.emplace_back(batch.begin() + r * (T + 1), batch.begin() + (r + 1) * (T + 1));
        }
    EXPECT_EQ(mixed, a.rows_from_mixer());
    EXPECT_EQ(calls, 2 * mixed);
    // 0.3 of 4000 = 1200, sigma = 29: allow 4 sigma.
    EXPECT_NEAR(double(mixed), 1200.0, 116.0);
    // The prose rows are the plain loader's rows, in order: mixing does not disturb the prose stream.
    std::vector<int32_t> rows;
    for (const auto& row : prose_rows) {
        plain.next_rows(1, rows);
        ASSERT_EQ(rows, row);
    }
    // A generator that declines gives prose rows (and the same prose sequence).
    DataLoader d(fx.ts.train, T, 4), p2(fx.ts.train, T, 4);
    d.set_mixer([](Rng&, std::vector<int32_t>&) { return false; }, 0.5);
    EXPECT_EQ(take(d, 3, B), take(p2, 3, B));
    EXPECT_EQ(d.rows_from_mixer(), 0);
    // A wrong-sized or out-of-vocabulary sample is an error.
    DataLoader e(fx.ts.train, T, 4);
    e.set_mixer(
        [](Rng&, std::vector<int32_t>& s) {
            s.assign(3, 1);
            return true;
        },
        1.0);
    expect_error([&] { take(e, 1, 1); }, {"3 tokens", "T+1"});
    e.set_mixer(
        [T](Rng&, std::vector<int32_t>& s) {
            s.assign(size_t(T + 1), 999);
            return true;
        },
        1.0);
    expect_error([&] { take(e, 1, 1); }, {"999"});
    expect_error([&] { e.set_mixer(generator, 1.5); }, {"fraction"});
}

TEST(DataLoader, HeldoutWalksInOrder) {
    LoaderFixture fx("loader_held", 80, 0.3);
    const TokenSplit& held = fx.ts.heldout;
    const std::vector<int32_t> stream = all_tokens(held);
    const int64_t T = 20, B = 6;
    HeldoutIterator it(held, T);
    EXPECT_EQ(it.windows(), int64_t((stream.size() - 1) / T));
    std::vector<int32_t> in, tg, joined_in, joined_tg;
    int64_t total = 0, n;
    while ((n = it.next_batch(B, in, tg)) > 0) {
        EXPECT_EQ(in.size(), size_t(n * T));
        joined_in.insert(joined_in.end(), in.begin(), in.end());
        joined_tg.insert(joined_tg.end(), tg.begin(), tg.end());
        total += n;
    }
    EXPECT_EQ(total, it.windows());
    ASSERT_EQ(joined_in.size(), size_t(total * T));
    EXPECT_TRUE(std::equal(joined_in.begin(), joined_in.end(), stream.begin()));
    EXPECT_TRUE(std::equal(joined_tg.begin(), joined_tg.end(), stream.begin() + 1));
    it.reset();
    EXPECT_EQ(it.next_batch(B, in, tg), B);
    EXPECT_EQ(std::vector<int32_t>(in.begin(), in.begin() + T),
              std::vector<int32_t>(stream.begin(), stream.begin() + T));
    HeldoutIterator too_long(held, held.size(), -1);  // fewer than T+1 tokens: no windows, no error
    EXPECT_EQ(too_long.windows(), 0);
    EXPECT_EQ(too_long.next_batch(B, in, tg), 0);
    EXPECT_TRUE(in.empty());
    expect_error([&] { HeldoutIterator(held, 0); }, {"seq_len"});
    HeldoutIterator capped(held, T, 5);
    EXPECT_EQ(capped.next_batch(B, in, tg), 5);
    EXPECT_EQ(capped.next_batch(B, in, tg), 0);
}

// ---------------------------------------------------------------- the real prose cache

TEST(DataProse, ByteShardsOfProseCache) {
    const std::string cache = HYDRA_SOURCE_DIR "/.cache/prose";
    if (!fs::exists(cache + "/manifest.json")) GTEST_SKIP() << cache << " absent: run tools/fetch_prose.py";
    const json manifest = json::parse(slurp(cache + "/manifest.json"));
    std::vector<std::string> files;
    int64_t bytes = 0;
    for (const auto& [name, info] : manifest.items()) {
        files.push_back(cache + "/" + name);
        bytes += info["bytes"].get<int64_t>();
    }
    test::TempDir dir("prose");
    const ByteEncoder enc;
    const ShardBuildReport r = build_token_shards(files, enc, dir.str(), int64_t(1) << 22, 0.02, 1234);
    const TokenShards ts = open_token_shards(dir.str(), &enc);
    // The sources' sha256 agree with the manifest written by Python's hashlib.
    ASSERT_EQ(ts.sources.size(), files.size());
    for (const ShardSource& s : ts.sources)
        EXPECT_EQ(s.sha256, manifest[s.name]["sha256"].get<std::string>()) << s.name;
    EXPECT_EQ(r.source_bytes, bytes);
    const int64_t total = r.train_tokens + r.heldout_tokens;
    EXPECT_LE(total, bytes + r.train_chunks + r.heldout_chunks);
    EXPECT_GT(total, bytes * 9 / 10);  // only blank lines between paragraphs are dropped
    EXPECT_NEAR(double(r.heldout_tokens) / double(total), 0.02, 0.01);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(build_token_shards(files, enc, dir.str(), int64_t(1) << 22, 0.02, 1234).reused);
    const double reuse_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << fmt::format(
        "[ prose    ] {} files, {} bytes -> train {} tokens ({} chunks, {} shards), heldout {} "
        "tokens ({} chunks); build {:.2f}s, reuse check {:.2f}s\n",
        files.size(), bytes, r.train_tokens, r.train_chunks, ts.train.num_shards(), r.heldout_tokens,
        r.heldout_chunks, r.seconds, reuse_s);
    DataLoader dl(ts.train, 256, 0);
    std::vector<int32_t> in, tg;
    dl.next_batch(8, in, tg);
    EXPECT_EQ(in.size(), 8u * 256);
}

// Data parallel: rank r's rows are rows r, r + W, ... of the one-process batch; the ranks' rows together
// are the global batch (no row twice, none missing), every rank's cursor equals the one-process cursor,
// also with uneven shares (B = 7 over W = 3) and with the synthetic mixer drawing from the cursor's RNG.
TEST(DataLoader, RankShardsPartitionTheGlobalBatch) {
    LoaderFixture fx("loader_shard");
    const int64_t T = 16;
    auto generator = [T](Rng& rng, std::vector<int32_t>& s) {
        s.assign(size_t(T + 1), int32_t(rng.next_u64() % 200));
        return true;
    };
    for (const auto& [B, W] : std::vector<std::pair<int64_t, int>>{{8, 2}, {7, 3}, {4, 4}, {2, 3}}) {
        DataLoader one(fx.ts.train, T, 5);
        one.set_mixer(generator, 0.25);
        std::vector<DataLoader> ranks;
        for (int r = 0; r < W; ++r) {
            ranks.emplace_back(fx.ts.train, T, 5);
            ranks.back().set_mixer(generator, 0.25);
        }
        int64_t total_rows = 0;
        for (int step = 0; step < 12; ++step) {
            std::vector<int32_t> gin, gtg;
            one.next_batch(B, gin, gtg);
            for (int r = 0; r < W; ++r) {
                std::vector<int32_t> in, tg;
                ranks[size_t(r)].next_batch_shard(B, r, W, in, tg);
                const int64_t n = DataLoader::rows_of_rank(B, r, W);
                ASSERT_EQ(in.size(), size_t(n * T));
                ASSERT_EQ(tg.size(), size_t(n * T));
                total_rows += n;
                for (int64_t i = 0; i < n; ++i) {
                    const int64_t b = r + i * W;
                    ASSERT_TRUE(std::equal(in.begin() + i * T, in.begin() + (i + 1) * T, gin.begin() + b * T))
                        << "B " << B << " W " << W << " rank " << r << " row " << i;
                    ASSERT_TRUE(
                        std::equal(tg.begin() + i * T, tg.begin() + (i + 1) * T, gtg.begin() + b * T));
                }
                EXPECT_EQ(ranks[size_t(r)].cursor().to_json(), one.cursor().to_json());
            }
        }
        EXPECT_EQ(total_rows, 12 * B);
    }
    expect_error(
        [&] {
            DataLoader d(fx.ts.train, T, 5);
            std::vector<int32_t> in, tg;
            d.next_batch_shard(4, 2, 2, in, tg);
        },
        {"rank 2 of a world of 2"});
}

}  // namespace
}  // namespace hydra
