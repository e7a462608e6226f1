// `hydra corpus fetch|build|pack|unpack`: the training corpus from Debian packages (src/corpus).
#include <fmt/format.h>

#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "corpus/corpus_build.h"
#include "corpus/corpus_pack.h"
#include "corpus/corpus_sources.h"
#include "corpus/deb_fetch.h"
#include "eval/text_sources.h"
#include "model/model_loader.h"
#include "tokenizer/bpe_tokenizer.h"

namespace hydra::cli {

namespace fs = std::filesystem;

namespace {

// <cache>/corpus next to the prose cache ($HYDRA_CACHE, else the checkout's .cache).
std::string default_corpus_cache() {
    return (fs::path(default_prose_dir()).parent_path() / "corpus").string();
}

// The catalog, or the named subset of it (in catalog order).
std::vector<SourceSpec> selected_sources(const std::vector<std::string>& names) {
    const std::vector<SourceSpec>& all = default_corpus_sources();
    if (names.empty()) return all;
    std::vector<SourceSpec> out;
    for (const SourceSpec& s : all)
        if (std::find(names.begin(), names.end(), s.name) != names.end()) out.push_back(s);
    for (const std::string& n : names)
        HYDRA_CHECK(std::any_of(all.begin(), all.end(), [&](const SourceSpec& s) { return s.name == n; }),
                    "--sources: no source named '{}' in the catalog", n);
    return out;
}

struct CorpusOptions {
    std::string cache = default_corpus_cache();
    std::string out;
    std::string model = default_model_path();
    std::vector<std::string> sources;
    bool offline = false, force = false;
    int threads = 0;
    CorpusBuildOptions build;
    // pack / unpack
    std::string corpus;
    std::string mix;
    std::string file;
    int64_t tokens = 0;
    int level = 19;
};

}  // namespace

void register_corpus(CLI::App& app) {
    auto* o = new CorpusOptions;
    auto* cmd = app.add_subcommand("corpus", "Build the training corpus from Debian packages");
    cmd->require_subcommand(1);

    auto* fetch = cmd->add_subcommand("fetch", "apt-get download and unpack the corpus packages (cached)");
    fetch->add_option("--cache", o->cache, "corpus cache directory (default: .cache/corpus)");
    fetch->add_option("--sources", o->sources, "only these sources (default: all)")->delimiter(',');
    fetch->add_flag("--offline", o->offline, "use only cached .deb files; fail when one is missing");
    fetch->callback([o] {
        const std::vector<PackageSpec> pk = catalog_packages(selected_sources(o->sources));
        const std::vector<FetchedPackage> f = fetch_packages(pk, o->cache, o->offline);
        int64_t bytes = 0;
        for (const FetchedPackage& p : f) bytes += p.deb_bytes;
        fmt::print("{} packages ({:.1f} MB of .deb) in {}\n", f.size(), double(bytes) / 1e6, o->cache);
    });

    auto* build = cmd->add_subcommand("build", "Clean, deduplicate, split and tokenize the fetched packages");
    build->add_option("--cache", o->cache, "corpus cache directory (default: .cache/corpus)");
    build->add_option("--out", o->out, "output corpus directory (default: <cache>/build)");
    build->add_option("--model", o->model, "GGUF or model directory whose tokenizer to use");
    build->add_option("--sources", o->sources, "only these sources (default: all)")->delimiter(',');
    build->add_option("--seed", o->build.seed, "seed of the split and the document order");
    build->add_option("--heldout-fraction", o->build.heldout_fraction, "fraction of documents held out")
        ->check(CLI::Range(0.0, 1.0));
    build
        ->add_option("--max-doc-bytes", o->build.max_doc_bytes,
                     "documents longer than this are cut into parts")
        ->check(at_least(256));
    build->add_option("--near-jaccard", o->build.near_threshold, "near-duplicate threshold (MinHash Jaccard)")
        ->check(CLI::Range(0.01, 1.0));
    build->add_flag("--force", o->force, "replace --out even when it is not a corpus");
    add_threads_option(*build, o->threads);
    build->callback([o] {
        apply_threads(o->threads);
        const std::vector<SourceSpec> sources = selected_sources(o->sources);
        const std::vector<FetchedPackage> fetched =
            read_fetched_packages(catalog_packages(sources), o->cache);
        std::optional<TokenizerVocab> vocab = load_vocab(o->model);
        HYDRA_CHECK(vocab.has_value(), "--model {}: no tokenizer in it", o->model);
        Tokenizer tok(*vocab, o->model);
        BpeEncoder encoder(tok);
        CorpusBuildOptions b = o->build;
        b.out_dir = o->out.empty() ? (fs::path(o->cache) / "build").string() : o->out;
        b.prose_dir = default_prose_dir();
        b.force = o->force;
        const CorpusBuildReport r = build_corpus(sources, fetched, encoder, b);
        const auto& t = r.manifest["totals"];
        fmt::print(
            "corpus: {} train tokens ({} documents), {} held-out tokens ({} documents); removed {} exact and "
            "{} near duplicates; {:.0f} s -> {}\n",
            t["train_tokens"].get<int64_t>(), t["train_documents"].get<int64_t>(),
            t["heldout_tokens"].get<int64_t>(), t["heldout_documents"].get<int64_t>(),
            t["exact_duplicates"].get<int64_t>(), t["near_duplicates"].get<int64_t>(), r.seconds, b.out_dir);
    });

    auto* pack = cmd->add_subcommand(
        "pack", "Write a compressed subset of a corpus (train by the mix + all held-out)");
    pack->add_option("--corpus", o->corpus, "corpus directory (default: <cache>/build)");
    pack->add_option("--cache", o->cache, "corpus cache directory (default: .cache/corpus)");
    pack->add_option("--tokens", o->tokens, "train tokens to take")->required()->check(at_least(1));
    pack->add_option("--mix", o->mix, "mix config (JSON or TOML; default: the corpus's mix.json)");
    pack->add_option("--out", o->file, "output file")->required();
    pack->add_option("--level", o->level, "zstd level")->check(CLI::Range(1, 22));
    add_threads_option(*pack, o->threads);
    pack->callback([o] {
        apply_threads(o->threads);
        const std::string dir = o->corpus.empty() ? (fs::path(o->cache) / "build").string() : o->corpus;
        const PackReport r = pack_corpus(dir, o->mix, o->tokens, o->file, o->level);
        fmt::print("packed {} train + {} held-out tokens into {} ({:.1f} MiB) in {:.0f} s\n", r.train_tokens,
                   r.heldout_tokens, o->file, double(r.bytes) / (1 << 20), r.seconds);
    });

    auto* unpack = cmd->add_subcommand("unpack", "Unpack a `hydra corpus pack` file into a corpus directory");
    unpack->add_option("FILE", o->file, "the pack file")->required();
    unpack->add_option("--out", o->out, "output corpus directory")->required();
    unpack->add_flag("--force", o->force, "replace --out even when it is not a corpus");
    unpack->callback([o] {
        const PackReport r = unpack_corpus(o->file, o->out, o->force);
        fmt::print("unpacked {} train + {} held-out tokens into {}\n", r.train_tokens, r.heldout_tokens,
                   o->out);
    });
}

}  // namespace hydra::cli
