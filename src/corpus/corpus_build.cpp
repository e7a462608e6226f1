// The corpus build (see corpus_build.h).
#include "corpus/corpus_build.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "core/hash_mix.h"
#include "corpus/corpus_dir.h"
#include "corpus/dedup.h"
#include "corpus/markup.h"
#include "corpus/source_files.h"
#include "corpus/text_normalize.h"
#include "io/atomic_dir.h"
#include "io/mapped_file.h"
#include "train/corpus_manifest.h"
#include "train/token_shards.h"

namespace hydra {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

uint64_t name_hash(std::string_view s, uint64_t seed) {
    return splitmix64(fnv1a64(s) ^ splitmix64(seed));
}

struct Doc {
    std::string name;
    std::string text;
    TextHash128 exact;
    MinHashSignature sig;
    int split = 0;  // 0 train, 1 heldout
    int64_t tokens = 0;
};

struct SourceCounts {
    int64_t files = 0, unreadable = 0, garbage = 0, empty = 0, parts = 0;
    int64_t exact = 0, near = 0, over_cap = 0;
    int64_t raw_bytes = 0, clean_bytes = 0;
    int64_t docs[2] = {0, 0}, bytes[2] = {0, 0}, tokens[2] = {0, 0};
};

std::string file_sha256(const std::string& path) {
    MappedFile f(path);
    return sha256_hex(std::string_view(reinterpret_cast<const char*>(f.data()), f.size()));
}

}  // namespace

CorpusBuildReport build_corpus(const std::vector<SourceSpec>& sources,
                               const std::vector<FetchedPackage>& fetched, const TextEncoder& encoder,
                               const CorpusBuildOptions& opt) {
    const auto t0 = std::chrono::steady_clock::now();
    validate_sources(sources);
    const std::vector<PackageSpec> packages = catalog_packages(sources);
    HYDRA_CHECK(fetched.size() == packages.size(), "build_corpus: {} fetched packages for {} in the catalog",
                fetched.size(), packages.size());
    for (size_t i = 0; i < packages.size(); ++i)
        HYDRA_CHECK(fetched[i].name == packages[i].name,
                    "build_corpus: fetched package {} is {} in the catalog", fetched[i].name,
                    packages[i].name);
    HYDRA_CHECK(opt.heldout_fraction > 0 && opt.heldout_fraction < 1,
                "corpus build: --heldout-fraction must be in (0, 1) (got {})", opt.heldout_fraction);
    HYDRA_CHECK(opt.max_doc_bytes >= 256, "corpus build: --max-doc-bytes must be >= 256 (got {})",
                opt.max_doc_bytes);
    HYDRA_CHECK(opt.shard_tokens >= 1, "corpus build: shard_tokens must be >= 1");
    const std::string tokenizer = encoder.name();
    const int32_t vocab_size = encoder.vocab_size(), eos_id = encoder.eos_id();
    HYDRA_CHECK(!tokenizer.empty() && tokenizer.size() < kShardNameBytes,
                "corpus build: tokenizer name '{}' too long", tokenizer);
    const int token_bytes = vocab_size <= 65536 ? 2 : 4;
    std::vector<std::string> extract_dirs;
    for (const FetchedPackage& f : fetched) extract_dirs.push_back(f.extract_dir);

    CorpusBuildReport report;
    write_corpus_dir_atomically(opt.out_dir, opt.force, "--out", [&](const fs::path& tmp) {
        TokenShardWriter writers[2] = {
            TokenShardWriter(tmp.string(), 0, opt.shard_tokens, token_bytes, vocab_size, eos_id, tokenizer),
            TokenShardWriter(tmp.string(), 1, opt.shard_tokens, token_bytes, vocab_size, eos_id, tokenizer)};
        DuplicateFilter filter(opt.near_threshold);
        std::ofstream doc_list(tmp / "documents.tsv");
        HYDRA_CHECK(bool(doc_list), "{}: cannot write", (tmp / "documents.tsv").string());
        doc_list << "source\tdocument\tsplit\ttokens\n";
        json source_entries = json::array();
        SourceCounts total;
        for (const SourceSpec& src : sources) {
            const auto ts = std::chrono::steady_clock::now();
            const std::vector<SourceFile> files =
                list_source_files(src, packages, extract_dirs, opt.prose_dir);
            SourceCounts c;
            c.files = int64_t(files.size());
            // 1. Read, clean, cut, hash: in parallel over files.
            std::vector<std::vector<Doc>> per_file(files.size());
            std::vector<int> file_state(files.size(), 0);  // 0 ok, 1 garbage, 2 empty
            std::vector<int64_t> raw_bytes(files.size(), 0);
            std::string first_error;
            const bool code = src.format == TextFormat::kCode;
#pragma omp parallel for schedule(dynamic, 4)
            for (size_t i = 0; i < files.size(); ++i) {
                try {
                    const std::string raw = read_source_file(files[i].path);
                    raw_bytes[i] = int64_t(raw.size());
                    const std::string text = normalize_text(strip_markup(raw, src.format), code);
                    if (text.size() < 64) {
                        file_state[i] = 2;
                        continue;
                    }
                    // Info files hold NUL bytes in makeinfo's index markers (stripped above).
                    if (looks_like_garbage(src.format == TextFormat::kInfo ? std::string_view() : raw,
                                           text)) {
                        file_state[i] = 1;
                        continue;
                    }
                    std::vector<std::string> parts = split_document(text, size_t(opt.max_doc_bytes));
                    for (size_t k = 0; k < parts.size(); ++k) {
                        Doc d;
                        d.name =
                            parts.size() == 1 ? files[i].name : fmt::format("{}#{}", files[i].name, k + 1);
                        d.text = std::move(parts[k]);
                        d.exact = exact_text_hash(d.text);
                        d.sig = minhash_signature(d.text);
                        per_file[i].push_back(std::move(d));
                    }
                } catch (const std::exception& e) {
#pragma omp critical
                    if (first_error.empty()) first_error = e.what();
                }
            }
            if (!first_error.empty()) throw Error(fmt::format("corpus source {}: {}", src.name, first_error));
            // 2. Dedup, first-come in name order.
            std::vector<Doc> docs;
            for (size_t i = 0; i < files.size(); ++i) {
                c.raw_bytes += raw_bytes[i];
                c.garbage += file_state[i] == 1;
                c.empty += file_state[i] == 2;
                for (Doc& d : per_file[i]) {
                    ++c.parts;
                    switch (filter.add(d.exact, d.sig)) {
                        case DuplicateFilter::Verdict::kExact:
                            ++c.exact;
                            break;
                        case DuplicateFilter::Verdict::kNear:
                            ++c.near;
                            break;
                        case DuplicateFilter::Verdict::kKept:
                            docs.push_back(std::move(d));
                            break;
                    }
                }
                per_file[i].clear();
                per_file[i].shrink_to_fit();
            }
            // 3./4. Seeded order, cap, split.
            std::vector<uint64_t> keys(docs.size());
            for (size_t i = 0; i < docs.size(); ++i)
                keys[i] = name_hash(src.name + "/" + docs[i].name, opt.seed);
            std::vector<size_t> order(docs.size());
            std::iota(order.begin(), order.end(), size_t(0));
            std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
                return keys[a] != keys[b] ? keys[a] < keys[b] : docs[a].name < docs[b].name;
            });
            std::vector<size_t> taken;
            for (size_t i : order) {
                if (src.max_bytes > 0 && c.clean_bytes + int64_t(docs[i].text.size()) > src.max_bytes) {
                    ++c.over_cap;
                    continue;
                }
                c.clean_bytes += int64_t(docs[i].text.size());
                docs[i].split = chunk_is_heldout(docs[i].text, opt.heldout_fraction, opt.seed) ? 1 : 0;
                taken.push_back(i);
            }
            HYDRA_CHECK(!taken.empty(),
                        "corpus source {}: no documents left ({} files, {} empty, {} garbage, {} "
                        "duplicates)",
                        src.name, c.files, c.empty, c.garbage, c.exact + c.near);
            // 5. Tokenize in parallel batches, write in order.
            const int64_t span_begin[2] = {writers[0].total(), writers[1].total()};
            constexpr size_t kBatch = 2048;
            for (size_t b = 0; b < taken.size(); b += kBatch) {
                const size_t n = std::min(kBatch, taken.size() - b);
                std::vector<std::vector<int32_t>> toks(n);
#pragma omp parallel for schedule(dynamic, 1)
                for (size_t k = 0; k < n; ++k) {
                    try {
                        toks[k] = encoder.encode(docs[taken[b + k]].text);
                        for (int32_t id : toks[k])
                            HYDRA_CHECK(id >= 0 && id < vocab_size,
                                        "tokenizer produced id {} outside [0, {})", id, vocab_size);
                    } catch (const std::exception& e) {
#pragma omp critical
                        if (first_error.empty())
                            first_error = fmt::format("{}: {}", docs[taken[b + k]].name, e.what());
                    }
                }
                if (!first_error.empty())
                    throw Error(fmt::format("corpus source {}: {}", src.name, first_error));
                for (size_t k = 0; k < n; ++k) {
                    Doc& d = docs[taken[b + k]];
                    toks[k].push_back(eos_id);
                    d.tokens = int64_t(toks[k].size());
                    writers[d.split].add(toks[k]);
                    ++c.docs[d.split];
                    c.bytes[d.split] += int64_t(d.text.size());
                    c.tokens[d.split] += d.tokens;
                    doc_list << src.name << '\t' << d.name << '\t' << (d.split ? "heldout" : "train") << '\t'
                             << d.tokens << '\n';
                    std::string().swap(d.text);
                }
            }
            json pk = json::array();
            std::vector<std::string> seen;
            for (const FileRule& r : src.rules) {
                if (std::find(seen.begin(), seen.end(), r.package) != seen.end()) continue;
                seen.push_back(r.package);
                for (const FetchedPackage& f : fetched)
                    if (f.name == r.package)
                        pk.push_back({{"package", f.name},
                                      {"version", f.version},
                                      {"deb", f.deb_file},
                                      {"sha256", f.deb_sha256},
                                      {"bytes", f.deb_bytes}});
            }
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
            source_entries.push_back({{"name", src.name},
                                      {"kind", src.kind},
                                      {"format", format_name(src.format)},
                                      {"license", src.license},
                                      {"weight", src.weight},
                                      {"packages", pk},
                                      {"files", c.files},
                                      {"documents",
                                       {{"train", c.docs[0]},
                                        {"heldout", c.docs[1]},
                                        {"parts_before_dedup", c.parts},
                                        {"files_empty", c.empty},
                                        {"files_garbage", c.garbage},
                                        {"exact_duplicates", c.exact},
                                        {"near_duplicates", c.near},
                                        {"over_cap", c.over_cap}}},
                                      {"bytes",
                                       {{"raw", c.raw_bytes},
                                        {"clean", c.clean_bytes},
                                        {"train", c.bytes[0]},
                                        {"heldout", c.bytes[1]}}},
                                      {"tokens", {{"train", c.tokens[0]}, {"heldout", c.tokens[1]}}},
                                      {"spans",
                                       {{"train", {span_begin[0], writers[0].total()}},
                                        {"heldout", {span_begin[1], writers[1].total()}}}},
                                      {"seconds", secs}});
            if (opt.verbose)
                fmt::print(
                    stderr,
                    "[corpus] {:<22} {:>7} files {:>8} docs {:>6} exact {:>6} near dup {:>11} train tok "
                    "{:>9} held-out tok  {:.0f} s\n",
                    src.name, c.files, c.docs[0] + c.docs[1], c.exact, c.near, c.tokens[0], c.tokens[1],
                    secs);
            for (int s = 0; s < 2; ++s) {
                total.docs[s] += c.docs[s];
                total.bytes[s] += c.bytes[s];
                total.tokens[s] += c.tokens[s];
            }
            total.files += c.files;
            total.exact += c.exact;
            total.near += c.near;
            total.garbage += c.garbage;
            total.empty += c.empty;
            total.over_cap += c.over_cap;
            total.raw_bytes += c.raw_bytes;
            total.clean_bytes += c.clean_bytes;
        }
        doc_list.close();
        HYDRA_CHECK(bool(doc_list), "{}: write failed (disk full?)", (tmp / "documents.tsv").string());
        json splits = json::object();
        json shard_list = json::array();
        const char* names[2] = {"train", "heldout"};
        for (int s = 0; s < 2; ++s) {
            writers[s].finish();
            splits[names[s]] = {
                {"chunks", total.docs[s]}, {"tokens", writers[s].total()}, {"shards", writers[s].shards()}};
            for (const json& sh : writers[s].shards())
                shard_list.push_back(
                    {{"file", sh["file"]},
                     {"tokens", sh["tokens"]},
                     {"sha256", file_sha256((tmp / sh["file"].get<std::string>()).string())}});
        }
        // index.json: a token-shards set whose "sources" are the .deb files it was built from.
        json deb_sources = json::array();
        for (const FetchedPackage& f : fetched)
            deb_sources.push_back({{"name", f.deb_file}, {"bytes", f.deb_bytes}, {"sha256", f.deb_sha256}});
        const json build = {{"tokenizer", tokenizer},
                            {"vocab_size", vocab_size},
                            {"eos_id", eos_id},
                            {"token_bytes", token_bytes},
                            {"seed", opt.seed},
                            {"heldout_fraction", opt.heldout_fraction},
                            {"shard_tokens", opt.shard_tokens},
                            {"chunk_bytes", 0},
                            {"split_by", "document"},
                            {"sources", deb_sources}};
        write_text_file(
            tmp / "index.json",
            json{{"format", "hydra-token-shards"}, {"version", 1}, {"build", build}, {"splits", splits}}.dump(
                1));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        report.manifest = {
            {"format", kCorpusFormat},
            {"version", 1},
            {"tokenizer", tokenizer},
            {"vocab_size", vocab_size},
            {"eos_id", eos_id},
            {"seed", opt.seed},
            {"heldout_fraction", opt.heldout_fraction},
            {"split_by", "document"},
            {"max_doc_bytes", opt.max_doc_bytes},
            {"near_duplicate_jaccard", opt.near_threshold},
            {"minhash", {{"bins", kMinHashBins}, {"bands", kLshBands}, {"shingle_words", kShingleWords}}},
            {"build_seconds", seconds},
            {"sources", source_entries},
            {"totals",
             {{"files", total.files},
              {"raw_bytes", total.raw_bytes},
              {"clean_bytes", total.clean_bytes},
              {"train_documents", total.docs[0]},
              {"heldout_documents", total.docs[1]},
              {"train_tokens", total.tokens[0]},
              {"heldout_tokens", total.tokens[1]},
              {"exact_duplicates", total.exact},
              {"near_duplicates", total.near},
              {"files_garbage", total.garbage},
              {"files_empty", total.empty},
              {"over_cap", total.over_cap}}},
            {"shards", shard_list}};
        json mix = {{"format", "hydra-corpus-mix"}, {"weights", json::object()}};
        for (const SourceSpec& s : sources) mix["weights"][s.name] = s.weight;
        write_text_file(tmp / "mix.json", mix.dump(1));
        write_text_file(tmp / "manifest.json", report.manifest.dump(1));
        report.seconds = seconds;
        // The directory must read back as a token-shards set and a corpus.
        open_token_shards(tmp.string(), &encoder);
        read_corpus_manifest(tmp.string());
    });
    return report;
}

}  // namespace hydra
