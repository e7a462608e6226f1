// `hydra corpus build`: the catalog's sources (corpus_sources.h), read from the fetched packages
// (deb_fetch.h), cleaned (markup.h, text_normalize.h), deduplicated (dedup.h), split into train and
// held-out BY DOCUMENT, tokenized in parallel over documents and written as one token-shards set with a
// span per source, a manifest and the default mix (corpus_manifest.h, mix_config.h).
//
// Order of work, and why:
//   1. per source, files in name order, each cleaned and cut into documents of at most max_doc_bytes;
//   2. duplicates removed first-come in catalog then name order, across all sources (the same README in
//      two packages is kept once, counted against the later source);
//   3. each remaining document goes to held-out when a seeded hash of its text falls under
//      heldout_fraction (stable across builds; identical text cannot reach both splits, since exact
//      duplicates are gone);
//   4. documents are written in a seeded order (a hash of seed and name), so any prefix of a source's
//      span is a random sample of its documents (`hydra corpus pack` takes prefixes), and a source
//      whose text exceeds its cap keeps a random subset;
//   5. each document's tokens are followed by eos.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "corpus/corpus_sources.h"
#include "corpus/deb_fetch.h"
#include "train/byte_tokenizer.h"

namespace hydra {

struct CorpusBuildOptions {
    std::string out_dir;
    std::string prose_dir;  // for sources read from the prose cache
    uint64_t seed = 20260101;
    double heldout_fraction = 0.01;
    int64_t max_doc_bytes = 256 << 10;
    double near_threshold = 0.8;
    int64_t shard_tokens = int64_t(1) << 24;
    bool force = false;
    bool verbose = true;  // one progress line per source on stderr
};

struct CorpusBuildReport {
    nlohmann::json manifest;
    double seconds = 0;
};

// `fetched[i]` is the package catalog_packages(sources)[i]. Throws hydra::Error for bad options, an
// unreadable file (naming it), a source left with no documents, or an unwritable out_dir.
CorpusBuildReport build_corpus(const std::vector<SourceSpec>& sources,
                               const std::vector<FetchedPackage>& fetched, const TextEncoder& encoder,
                               const CorpusBuildOptions& options);

}  // namespace hydra
