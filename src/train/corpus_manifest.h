// manifest.json of a built corpus directory: what each source is (packages, versions, licenses, .deb
// sha256), what the build kept and removed (documents, bytes, duplicates), and where each source's
// tokens lie in the train and held-out token streams (`spans`, token index ranges [begin, end) of the
// shard set in the same directory; sources are contiguous, one after another). The data loader reads
// the spans to sample windows by source (mix_config.h).
//
// Directory layout (flat, written under a temporary name and renamed into place):
//   index.json, train_NNNNN.bin, heldout_NNNNN.bin   a token-shards set (train/token_shards.h): every
//                                                     reader of token shards reads a corpus as is
//   manifest.json                                     this file
//   mix.json                                          the default mix (mix_config.h)
//   documents.tsv                                     source, document, split, tokens (one line each)
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace hydra {

inline constexpr const char* kCorpusFormat = "hydra-corpus";

struct CorpusSourceEntry {
    std::string name;
    double weight = 0;  // the default mix weight
    int64_t train_begin = 0, train_end = 0, heldout_begin = 0, heldout_end = 0;
};

struct CorpusManifest {
    std::string tokenizer;
    int32_t vocab_size = 0, eos_id = -1;
    int64_t train_tokens = 0, heldout_tokens = 0;
    std::vector<CorpusSourceEntry> sources;
};

// Parses and checks manifest.json of `dir`: fields present and typed, spans in order, contiguous from 0
// and ending at the split totals. Throws hydra::Error naming the file and the field.
CorpusManifest read_corpus_manifest(const std::string& dir);
// The same from parsed JSON (`where` names it in messages).
CorpusManifest parse_corpus_manifest(const nlohmann::json& j, const std::string& where);

// True when `dir` holds a manifest.json whose format is hydra-corpus (a directory hydra may replace).
bool is_corpus_dir(const std::string& dir);

}  // namespace hydra
