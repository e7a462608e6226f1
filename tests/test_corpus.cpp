// Tests of the corpus builder (src/corpus): markup stripping, normalisation, exact and near-duplicate
// removal, the document-level train/held-out split (no document in both), the manifest, mix configs,
// mix-weighted sampling in the data loader, pack/unpack round trips, and clear errors for bad inputs
// (corrupt .deb, missing directories, foreign output directories, bad mix files, damaged packs). All on
// tiny generated data in temp directories with the byte tokenizer: no network, no model.
#include <gtest/gtest.h>
#include <unistd.h>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "corpus/corpus_build.h"
#include "corpus/corpus_pack.h"
#include "corpus/deb_fetch.h"
#include "corpus/dedup.h"
#include "corpus/markup.h"
#include "corpus/text_normalize.h"
#include "eval/heldout_sources.h"
#include "temp_dir.h"
#include "train/corpus_manifest.h"
#include "train/data_loader.h"
#include "train/mix_config.h"
#include "train/token_shards.h"

namespace hydra {
namespace {

namespace fs = std::filesystem;
using test::slurp;
using json = nlohmann::json;

void spit(const fs::path& path, const std::string& bytes) {
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
}

// A paragraph of `words` pseudo-random words drawn by `seed` (documents that share no 5-shingles).
std::string words_text(uint64_t seed, int words) {
    static const char* kWords[] = {"river",  "stone",  "lamp",    "quiet",  "north",  "paper",
                                   "glass",  "horse",  "winter",  "bread",  "cloud",  "metal",
                                   "garden", "letter", "silver",  "window", "forest", "candle",
                                   "harbor", "orange", "thunder", "pepper", "ladder", "velvet"};
    Rng rng(seed);
    std::string out;
    for (int i = 0; i < words; ++i) {
        out += kWords[rng.next_u64() % 24];
        out += (i % 12 == 11) ? ".\n" : " ";
    }
    return out + "\n";
}

// Two fake unpacked packages: "pkg-a" with plain-text documents (one exact and one near duplicate among
// them) and "pkg-b" with reST documents.
struct TinyCorpus {
    test::TempDir dir{"src"};
    std::vector<SourceSpec> sources;
    std::vector<FetchedPackage> fetched;
    std::vector<std::string> a_texts;  // the distinct documents of pkg-a, before normalisation
    TinyCorpus(int n_a = 40, int n_b = 20) {
        const fs::path a = dir.path / "extract/pkg-a/usr/share/doc/a";
        const fs::path b = dir.path / "extract/pkg-b/usr/share/doc/b";
        for (int i = 0; i < n_a; ++i) {
            a_texts.push_back(words_text(1000 + uint64_t(i), 200));
            spit(a / fmt::format("doc{:03}.txt", i), a_texts.back());
        }
        // An exact duplicate up to case and whitespace, and a near duplicate (two words of 200 changed).
        std::string upper = a_texts[3];
        for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
        spit(a / "zz_exact.txt", "  " + upper + "\n\n\n");
        std::string near = a_texts[5];
        near.replace(near.find("river") == std::string::npos ? 0 : near.find("river"), 5, "ocean");
        near.replace(near.rfind("stone") == std::string::npos ? 0 : near.rfind("stone"), 5, "brick");
        spit(a / "zz_near.txt", near);
        spit(a / "zz_binary.txt", std::string("abc\0def", 7) + std::string(100, 'x'));
        spit(a / "ignored.bin", "not listed");
        for (int i = 0; i < n_b; ++i)
            spit(b / fmt::format("page{:02}.rst", i),
                 "Title " + std::to_string(i) + "\n=======\n\n.. note:: careful\n\n" +
                     words_text(5000 + uint64_t(i), 150) + "Use :func:`open` and ``read``.\n");
        sources = {
            {"alpha",
             "prose",
             "public domain",
             TextFormat::kPlain,
             {{"pkg-a", "usr/share/doc/a", {".txt"}, {}}},
             {},
             3.0},
            {"beta", "docs", "MIT", TextFormat::kRst, {{"pkg-b", "usr/share/doc/b", {".rst"}, {}}}, {}, 1.0},
        };
        for (const char* p : {"pkg-a", "pkg-b"})
            fetched.push_back({p, "1.0-1", std::string(p) + "_1.0-1_all.deb", std::string(64, 'a'), 1234,
                               (dir.path / "extract" / p).string()});
    }
    CorpusBuildReport build(const std::string& out, uint64_t seed = 7, double heldout = 0.3) const {
        CorpusBuildOptions o;
        o.out_dir = out;
        o.seed = seed;
        o.heldout_fraction = heldout;
        o.shard_tokens = 4096;  // several shards
        o.verbose = false;
        return build_corpus(sources, fetched, ByteEncoder(), o);
    }
};

// The documents of a split's token stream (each ends with eos), decoded.
std::vector<std::string> split_documents(const TokenSplit& split, int64_t begin, int64_t end) {
    std::vector<int32_t> ids(size_t(end - begin));
    if (!ids.empty()) split.read(begin, end - begin, ids.data());
    std::vector<std::string> docs;
    std::vector<int32_t> cur;
    ByteEncoder enc;
    for (int32_t id : ids) {
        if (id == enc.eos_id()) {
            docs.push_back(enc.decode(cur));
            cur.clear();
        } else {
            cur.push_back(id);
        }
    }
    EXPECT_TRUE(cur.empty()) << "a span must end with a document's eos";
    return docs;
}

TEST(CorpusMarkup, StripsEachFormat) {
    const std::string rst = strip_rst(
        "Title\n=====\n\n.. _target:\n\nSee :func:`os.open` and ``x = 1``.\n\n.. code-block:: python\n\n   "
        "print(1)\n");
    EXPECT_EQ(rst.find("====="), std::string::npos);
    EXPECT_EQ(rst.find(":func:"), std::string::npos);
    EXPECT_EQ(rst.find("_target"), std::string::npos);
    EXPECT_NE(rst.find("See os.open and x = 1."), std::string::npos) << rst;
    EXPECT_NE(rst.find("print(1)"), std::string::npos);
    EXPECT_NE(rst.find("python"), std::string::npos);

    const std::string pod =
        strip_pod("=head1 NAME\n\nperlfoo - B<bold> and C<< $a->b >> L<perlsyn|perlsyn/x> E<gt>\n\n=cut\n");
    EXPECT_NE(pod.find("NAME"), std::string::npos);
    EXPECT_NE(pod.find("perlfoo - bold and $a->b perlsyn >"), std::string::npos) << pod;
    EXPECT_EQ(pod.find("=cut"), std::string::npos);

    const std::string html = strip_html(
        "<html><head><title>x</title><style>p{}</style></head><body><p>Fish &amp; chips&#33;</p>"
        "<script>var a=1;</script><!-- c --><p>caf&eacute; &mdash; ok</p></body></html>");
    EXPECT_NE(html.find("Fish & chips!"), std::string::npos) << html;
    EXPECT_EQ(html.find("var a"), std::string::npos);
    EXPECT_EQ(html.find('<'), std::string::npos);
    EXPECT_NE(html.find("\xE2\x80\x94 ok"), std::string::npos);

    const std::string roff = strip_roff(
        ".TH LS 1\n.SH NAME\nls \\- list directory contents\n.SH SYNOPSIS\n.B ls\n[\\fIOPTION\\fR]...\n.\\\" "
        "comment\n"
        ".BR dir (1)\n");
    EXPECT_NE(roff.find("NAME"), std::string::npos);
    EXPECT_NE(roff.find("ls - list directory contents"), std::string::npos) << roff;
    EXPECT_NE(roff.find("[OPTION]..."), std::string::npos);
    EXPECT_NE(roff.find("dir(1)"), std::string::npos);
    EXPECT_EQ(roff.find(".TH"), std::string::npos);
    EXPECT_EQ(roff.find("comment"), std::string::npos);

    const std::string info = strip_info(
        "\x1f\nFile: a.info,  Node: Top,  Next: Intro\n\nIntro\n*****\n\nText here.\n"
        "\x1f\nTag Table:\nNode: Top\x7f"
        "12\n\x1f\nEnd Tag Table\n");
    EXPECT_EQ(info.find("File:"), std::string::npos);
    EXPECT_EQ(info.find("*****"), std::string::npos);
    EXPECT_EQ(info.find("Tag Table"), std::string::npos);
    EXPECT_NE(info.find("Text here."), std::string::npos);
    EXPECT_EQ(strip_info(std::string("A\0\b[index\0\b]\nB\n", 15)), "A\nB\n");

    EXPECT_EQ(strip_fortune("one\n%\ntwo\n"), "one\n\n\ntwo\n");
    EXPECT_EQ(
        strip_wordnet(
            "  1 This software and database\n00001740 03 n 02 entity 0 thing 1 003 | that which exists\n"),
        "entity, thing: that which exists\n");
}

TEST(CorpusNormalize, TextIsCleanUtf8) {
    // Latin-1 byte, control characters, CRLF, trailing blanks, runs of blank lines.
    const std::string t = normalize_text("caf\xe9  au\x01 lait \r\n\r\n\r\n\n  second\tline  \n", false);
    EXPECT_EQ(t, "caf\xc3\xa9 au lait\n\nsecond line\n");
    EXPECT_EQ(normalize_text("int f() {\n\treturn 1;  \n}\n\n\n", true), "int f() {\n\treturn 1;\n}\n");
    EXPECT_TRUE(looks_like_garbage(std::string("a\0b", 3), "ab"));
    EXPECT_TRUE(looks_like_garbage("", "0x1f, 0x2e, 0x3d, 0x4c, 0x5b, 0x6a, 0x79, 0x88\n"));
    EXPECT_FALSE(looks_like_garbage("", "An ordinary sentence of prose.\n"));
    const std::vector<std::string> parts = split_document(words_text(1, 2000), 1000);
    ASSERT_GT(parts.size(), 5u);
    for (const std::string& p : parts) EXPECT_LE(p.size(), 1001u);
    EXPECT_EQ(dedup_key("  A  b\n\nC "), "a b c");
}

TEST(CorpusDedup, ExactAndNear) {
    const std::string a = words_text(11, 300), b = words_text(12, 300);
    std::string a_near = a;
    a_near.replace(a_near.find(' '), 1, " extra ");  // one word inserted: ~5 of ~300 shingles differ
    std::string a_ws = "\n" + a + "  \n";
    for (char& c : a_ws) c = char(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_GT(signature_similarity(minhash_signature(a), minhash_signature(a_near)), 0.85);
    EXPECT_LT(signature_similarity(minhash_signature(a), minhash_signature(b)), 0.2);
    DuplicateFilter f(0.8);
    EXPECT_EQ(f.add(exact_text_hash(a), minhash_signature(a)), DuplicateFilter::Verdict::kKept);
    EXPECT_EQ(f.add(exact_text_hash(a_ws), minhash_signature(a_ws)), DuplicateFilter::Verdict::kExact);
    EXPECT_EQ(f.add(exact_text_hash(a_near), minhash_signature(a_near)), DuplicateFilter::Verdict::kNear);
    EXPECT_EQ(f.add(exact_text_hash(b), minhash_signature(b)), DuplicateFilter::Verdict::kKept);
    EXPECT_EQ(f.kept(), 2u);
    EXPECT_THROW(DuplicateFilter(0.0), Error);
}

TEST(CorpusBuild, ManifestCountsAndDedup) {
    TinyCorpus c;
    test::TempDir out("out");
    const CorpusBuildReport r = c.build(out.str("corpus"));
    const json& m = r.manifest;
    ASSERT_EQ(m["sources"].size(), 2u);
    const json& a = m["sources"][0];
    EXPECT_EQ(a["name"], "alpha");
    EXPECT_EQ(a["files"], 43);  // 40 + exact + near + binary; ignored.bin is not listed
    EXPECT_EQ(a["documents"]["exact_duplicates"], 1);
    EXPECT_EQ(a["documents"]["near_duplicates"], 1);
    EXPECT_EQ(a["documents"]["files_garbage"], 1);
    EXPECT_EQ(a["documents"]["train"].get<int64_t>() + a["documents"]["heldout"].get<int64_t>(), 40);
    EXPECT_EQ(a["license"], "public domain");
    EXPECT_EQ(a["packages"][0]["package"], "pkg-a");
    EXPECT_EQ(a["packages"][0]["version"], "1.0-1");
    EXPECT_EQ(a["packages"][0]["sha256"], std::string(64, 'a'));
    const json& b = m["sources"][1];
    EXPECT_EQ(b["documents"]["train"].get<int64_t>() + b["documents"]["heldout"].get<int64_t>(), 20);
    EXPECT_EQ(b["documents"]["exact_duplicates"], 0);
    // Tokens: the manifest, the spans and the shards agree.
    const TokenShards ts = open_token_shards(out.str("corpus"));
    EXPECT_EQ(m["totals"]["train_tokens"].get<int64_t>(), ts.train.size());
    EXPECT_EQ(m["totals"]["heldout_tokens"].get<int64_t>(), ts.heldout.size());
    EXPECT_EQ(a["tokens"]["train"].get<int64_t>() + b["tokens"]["train"].get<int64_t>(), ts.train.size());
    EXPECT_GT(ts.train.num_shards(), 1u);
    for (const json& sh : m["shards"])
        EXPECT_EQ(sh["sha256"].get<std::string>(),
                  sha256_hex(slurp(out.path / "corpus" / sh["file"].get<std::string>())));
    const CorpusManifest cm = read_corpus_manifest(out.str("corpus"));
    EXPECT_EQ(cm.sources[1].train_begin, cm.sources[0].train_end);
    EXPECT_EQ(cm.sources[1].train_end, ts.train.size());
    // reST markup is gone from beta's documents.
    for (const std::string& d :
         split_documents(ts.train, cm.sources[1].train_begin, cm.sources[1].train_end)) {
        EXPECT_EQ(d.find(":func:"), std::string::npos);
        EXPECT_EQ(d.find("====="), std::string::npos);
    }
}

TEST(CorpusBuild, TrainAndHeldoutShareNoDocument) {
    TinyCorpus c;
    test::TempDir out("split");
    c.build(out.str("corpus"));
    const TokenShards ts = open_token_shards(out.str("corpus"));
    const std::vector<std::string> train = split_documents(ts.train, 0, ts.train.size());
    const std::vector<std::string> held = split_documents(ts.heldout, 0, ts.heldout.size());
    ASSERT_GE(held.size(), 5u);
    ASSERT_GE(train.size(), 20u);
    EXPECT_EQ(train.size() + held.size(), 60u);
    const std::set<std::string> train_set(train.begin(), train.end());
    for (const std::string& h : held) EXPECT_EQ(train_set.count(h), 0u) << "held-out document also in train";
    // Every held-out document is a whole source document (normalised), not a piece of one.
    std::set<std::string> originals;
    for (const std::string& t : c.a_texts) originals.insert(normalize_text(t, false));
    int whole_alpha = 0;
    for (const std::string& h : held) whole_alpha += originals.count(h) > 0;
    const CorpusManifest cm = read_corpus_manifest(out.str("corpus"));
    EXPECT_EQ(
        whole_alpha,
        int(split_documents(ts.heldout, cm.sources[0].heldout_begin, cm.sources[0].heldout_end).size()));
    // documents.tsv lists each document once with its split.
    std::istringstream tsv(slurp(out.path / "corpus" / "documents.tsv"));
    std::string line;
    std::getline(tsv, line);
    std::set<std::string> names;
    int n = 0;
    while (std::getline(tsv, line)) {
        ++n;
        EXPECT_TRUE(names.insert(line.substr(0, line.find('\t', line.find('\t') + 1))).second);
    }
    EXPECT_EQ(n, 60);
}

TEST(CorpusBuild, SplitIsSeededAndStable) {
    TinyCorpus c;
    test::TempDir out("stable");
    const json m1 = c.build(out.str("c1"), 7).manifest;
    const json m2 = c.build(out.str("c2"), 7).manifest;
    const json m3 = c.build(out.str("c3"), 8).manifest;
    EXPECT_EQ(m1["shards"], m2["shards"]);  // same seed: byte-identical shards
    EXPECT_NE(m1["shards"], m3["shards"]);
    // Rebuilding into an existing corpus replaces it.
    EXPECT_NO_THROW(c.build(out.str("c1"), 8));
    EXPECT_EQ(read_corpus_manifest(out.str("c1")).train_tokens, m3["totals"]["train_tokens"].get<int64_t>());
}

TEST(CorpusMix, ParsesJsonAndTomlAndRejectsBadFiles) {
    TinyCorpus c;
    test::TempDir out("mix");
    c.build(out.str("corpus"));
    const CorpusManifest m = read_corpus_manifest(out.str("corpus"));
    EXPECT_EQ(parse_mix_weights(R"({"weights": {"alpha": 2, "beta": 0.5}})", "j", m),
              (std::vector<double>{2, 0.5}));
    EXPECT_EQ(parse_mix_weights("[weights]\nbeta = 4\n", "t", m), (std::vector<double>{0, 4}));
    EXPECT_EQ(default_mix_weights(out.str("corpus"), m), (std::vector<double>{3, 1}));
    auto fails_with = [&](const std::string& text, const std::string& what) {
        try {
            parse_mix_weights(text, "mix.toml", m);
            ADD_FAILURE() << "no error for " << text;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    fails_with("[weights]\ngamma = 1\n", "no source of that name");
    fails_with("[weights]\nalpha = -1\n", ">= 0");
    fails_with("[weights]\nalpha = 0\n", "no source with training tokens");
    fails_with("[weights]\nalpha = \"x\"\n", "must be a number");
    fails_with("{\"weights\": [1]}", "\"weights\"");
    fails_with("[weights\n", "not valid TOML");
    fails_with("{", "not valid JSON");
    EXPECT_THROW(read_mix_weights(out.str("missing.toml"), m), Error);
}

TEST(CorpusMix, LoaderSamplesSourcesByWeight) {
    TinyCorpus c(60, 60);
    test::TempDir out("sample");
    c.build(out.str("corpus"), 7, 0.1);
    const CorpusManifest m = read_corpus_manifest(out.str("corpus"));
    const TokenShards ts = open_token_shards(out.str("corpus"));
    const std::vector<WeightedSpan> spans = {{m.sources[0].train_begin, m.sources[0].train_end, 3.0},
                                             {m.sources[1].train_begin, m.sources[1].train_end, 1.0}};
    DataLoader loader(ts.train, spans, 64, 5);
    std::vector<int32_t> rows;
    const int kRows = 8000;
    loader.next_rows(kRows, rows);
    const std::vector<int64_t>& per = loader.rows_per_source();
    EXPECT_EQ(per[0] + per[1], kRows);
    EXPECT_NEAR(double(per[0]) / kRows, 0.75, 0.03);
    // Rows come from inside the chosen spans: beta's text (reST-derived) vs alpha's plain words is hard to
    // tell apart by content, so check positions through a fresh loader with one source weighted 0.
    DataLoader only_b(ts.train, {{spans[0].begin, spans[0].end, 0.0}, {spans[1].begin, spans[1].end, 1.0}},
                      64, 5);
    only_b.next_rows(200, rows);
    EXPECT_EQ(only_b.rows_per_source()[0], 0);
    std::vector<int32_t> bspan(size_t(spans[1].end - spans[1].begin));
    ts.train.read(spans[1].begin, int64_t(bspan.size()), bspan.data());
    for (int r = 0; r < 200; ++r) {
        const auto row = rows.begin() + r * 65;
        EXPECT_NE(std::search(bspan.begin(), bspan.end(), row, row + 65), bspan.end());
    }
    // Resume: a cursor restored into a fresh loader continues with the same rows.
    DataLoader a(ts.train, spans, 64, 9), b2(ts.train, spans, 64, 9);
    std::vector<int32_t> ra, rb;
    a.next_rows(777, ra);
    const json saved = a.cursor().to_json();
    a.next_rows(50, ra);
    b2.restore(DataCursor::from_json(saved));
    b2.next_rows(50, rb);
    EXPECT_EQ(ra, rb);
    // Single-stream behaviour is unchanged by the mixed path: a cursor without sources.
    DataLoader single(ts.train, 64, 9);
    EXPECT_FALSE(single.cursor().to_json().contains("sources"));
    EXPECT_THROW(single.restore(DataCursor::from_json(saved)), Error);
    EXPECT_THROW(DataLoader(ts.train, {{0, 10, 1.0}}, 64, 1), Error);  // no window with weight
    EXPECT_THROW(DataLoader(ts.train, {{0, ts.train.size() + 1, 1.0}}, 64, 1), Error);
}

// The held-out sources of a corpus: spans in split order with the corpus's mix weights (or a mix file's).
TEST(CorpusMix, HeldoutSourcesCarryTheTrainingWeights) {
    TinyCorpus c(60, 60);
    test::TempDir out("heldout_sources");
    c.build(out.str("corpus"), 7, 0.2);
    const CorpusManifest m = read_corpus_manifest(out.str("corpus"));
    const std::vector<HeldoutSource> hs = heldout_sources(out.str("corpus"));
    ASSERT_EQ(hs.size(), 2u);
    EXPECT_EQ(hs[0].name, "alpha");
    EXPECT_EQ(hs[0].weight, 3.0);
    EXPECT_EQ(hs[1].begin, m.sources[1].heldout_begin);
    EXPECT_EQ(hs[1].end, m.heldout_tokens);
    spit(out.path / "mix.toml", "[weights]\nalpha = 1\nbeta = 2\n");
    const std::vector<HeldoutSource> mixed = heldout_sources(out.str("corpus"), out.str("mix.toml"));
    EXPECT_EQ(mixed[1].weight, 2.0);
    EXPECT_TRUE(heldout_sources(out.str("nothing")).empty());  // plain shards: no sources
}

TEST(CorpusPack, RoundTripAndDamage) {
    TinyCorpus c(80, 40);
    test::TempDir out("pack");
    c.build(out.str("corpus"), 7, 0.2);
    const CorpusManifest m = read_corpus_manifest(out.str("corpus"));
    const TokenShards full = open_token_shards(out.str("corpus"));
    spit(out.path / "mix.toml", "[weights]\nalpha = 1\nbeta = 1\n");
    const int64_t want = (m.sources[1].train_end - m.sources[1].train_begin) / 2;  // beta can fill its share
    const PackReport r = pack_corpus(out.str("corpus"), out.str("mix.toml"), 2 * want, out.str("c.pack"), 3);
    EXPECT_LE(r.train_tokens, 2 * want);
    EXPECT_GT(r.train_tokens, 2 * want - 4 * 1500);  // cut back at most a document per source
    EXPECT_EQ(r.heldout_tokens, full.heldout.size());
    const PackReport u = unpack_corpus(out.str("c.pack"), out.str("unpacked"), false);
    EXPECT_EQ(u.train_tokens, r.train_tokens);
    const TokenShards got = open_token_shards(out.str("unpacked"));
    const CorpusManifest gm = read_corpus_manifest(out.str("unpacked"));
    // Held-out: identical. Train: each source's packed span is a prefix of its full span, in equal shares.
    std::vector<int32_t> h1(size_t(full.heldout.size())), h2(size_t(got.heldout.size()));
    full.heldout.read(0, int64_t(h1.size()), h1.data());
    got.heldout.read(0, int64_t(h2.size()), h2.data());
    EXPECT_EQ(h1, h2);
    for (size_t s = 0; s < 2; ++s) {
        const int64_t n = gm.sources[s].train_end - gm.sources[s].train_begin;
        EXPECT_NEAR(double(n), double(want), 1500.0);
        std::vector<int32_t> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
        full.train.read(m.sources[s].train_begin, n, a.data());
        got.train.read(gm.sources[s].train_begin, n, b.data());
        EXPECT_EQ(a, b);
        EXPECT_EQ(b.back(), full.eos_id);  // cut at a document end
    }
    EXPECT_EQ(default_mix_weights(out.str("unpacked"), gm), (std::vector<double>{1, 1}));
    // Damage: a flipped byte in a blob, a truncated file, a foreign output directory.
    std::string bytes = slurp(out.path / "c.pack");
    std::string flipped = bytes;
    flipped[flipped.size() - 10] ^= 0x55;
    spit(out.path / "bad.pack", flipped);
    EXPECT_THROW(unpack_corpus(out.str("bad.pack"), out.str("u2"), false), Error);
    spit(out.path / "short.pack", bytes.substr(0, bytes.size() / 2));
    try {
        unpack_corpus(out.str("short.pack"), out.str("u3"), false);
        ADD_FAILURE() << "truncated pack accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out.path / "u3"));
    spit(out.path / "foreign/notes.txt", "mine");
    try {
        unpack_corpus(out.str("c.pack"), out.str("foreign"), false);
        ADD_FAILURE() << "foreign directory replaced";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not a hydra corpus"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::exists(out.path / "foreign/notes.txt"));
    // A header rewritten by hand (wrong types, missing members, a blob count that disagrees with the
    // manifest or would expand past any real compression ratio): each a hydra::Error naming the problem,
    // never a JSON library exception or an allocation of what the file merely claims.
    uint64_t hlen = 0;
    std::memcpy(&hlen, bytes.data() + 8, 8);
    const json header = json::parse(bytes.substr(16, size_t(hlen)));
    const std::string body = bytes.substr(16 + size_t(hlen));
    auto with_header = [&](const json& h) {
        const std::string text = h.dump();
        std::string packed = bytes.substr(0, 8);
        const uint64_t n = text.size();
        packed.append(reinterpret_cast<const char*>(&n), 8);
        return packed + text + body;
    };
    auto edited = [&](auto&& f) {
        json h = header;
        f(h);
        return h;
    };
    const std::vector<std::pair<json, std::string>> bad = {
        {edited([](json& h) { h["format"] = 7; }), "not a version-1"},
        {edited([](json& h) { h.erase("version"); }), "not a version-1"},
        {edited([](json& h) { h["token_bytes"] = "2"; }), "token_bytes must be 2 or 4"},
        {edited([](json& h) { h["blobs"][0].erase("sha256"); }), "needs tokens, bytes and sha256"},
        {edited([](json& h) { h["blobs"][1]["tokens"] = 1; }), "the manifest"},
        {edited([](json& h) { h.erase("mix"); }), "needs manifest, mix and two blobs"},
    };
    for (const auto& [h, want] : bad) {
        spit(out.path / "edited.pack", with_header(h));
        try {
            unpack_corpus(out.str("edited.pack"), out.str("u4"), false);
            ADD_FAILURE() << "accepted: " << want;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
        }
        EXPECT_FALSE(fs::exists(out.path / "u4"));
    }
    spit(out.path / "edited.pack", with_header(header));  // the same header re-serialised still unpacks
    EXPECT_EQ(unpack_corpus(out.str("edited.pack"), out.str("u5"), false).train_tokens, r.train_tokens);
}

TEST(CorpusErrors, BadInputsNameTheProblem) {
    TinyCorpus c;
    test::TempDir out("err");
    auto expect_error = [](const std::function<void()>& f, const std::string& what) {
        try {
            f();
            ADD_FAILURE() << "no error, expected: " << what;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    // A corrupt .deb in the cache (offline: nothing is downloaded).
    spit(out.path / "cache/debs/pkg-x_1.0_all.deb", "this is not an ar archive");
    expect_error(
        [&] {
            fetch_packages({{"pkg-x", ""}}, out.str("cache"), true);
        },
        "corrupt or truncated .deb");
    expect_error([&] { fetch_packages({{"pkg-y", ""}}, out.str("cache"), true); }, "no cached .deb of pkg-y");
    expect_error([&] { read_fetched_packages({{"pkg-x", ""}}, out.str("nocache")); }, "hydra corpus fetch");
    // A rule directory that is not there.
    TinyCorpus moved;
    moved.sources[1].rules[0].dir = "usr/share/doc/missing";
    expect_error([&] { moved.build(out.str("m")); }, "usr/share/doc/missing");
    EXPECT_FALSE(fs::exists(out.path / "m"));
    // An unreadable input file (a directory where a file is expected) names the file.
    TinyCorpus dirfile;
    fs::create_directories(dirfile.dir.path / "extract/pkg-b/usr/share/doc/b/zz.rst");
    EXPECT_NO_THROW(dirfile.build(out.str("d")));  // directories are not files: skipped by the listing
    // Bad options and a foreign output directory.
    expect_error([&] { c.build(out.str("o"), 7, 0.0); }, "--heldout-fraction");
    spit(out.path / "foreign/keep.txt", "x");
    expect_error([&] { c.build(out.str("foreign")); }, "not a hydra corpus");
    EXPECT_TRUE(fs::exists(out.path / "foreign/keep.txt"));
    // Bad catalogs.
    std::vector<SourceSpec> bad = c.sources;
    bad[1].name = "alpha";
    expect_error([&] { validate_sources(bad); }, "listed twice");
    bad = c.sources;
    bad[0].rules[0].dir = "../etc";
    expect_error([&] { validate_sources(bad); }, "without '..'");
    // A damaged manifest.
    c.build(out.str("corpus"));
    json mj = json::parse(slurp(out.path / "corpus/manifest.json"));
    mj["sources"][1]["spans"]["train"][0] = 1;
    spit(out.path / "corpus/manifest.json", mj.dump());
    expect_error([&] { read_corpus_manifest(out.str("corpus")); }, "spans must follow");
}

}  // namespace
}  // namespace hydra
