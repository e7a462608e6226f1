// `hydra corpus pack` / `unpack`: a corpus carried to a machine without Debian packages (the GPU box,
// whose calls carry at most 64 MiB). The pack holds a subset of the train split, each source's share
// set by the mix (a prefix of its span, cut at a document end, so a random sample of its documents:
// corpus_build.h writes them in a seeded order), and the whole held-out split.
//
// File layout, little-endian:
//   char[8] "HYDRAPK1" | u64 header bytes | header JSON | train blob | held-out blob
// header: {"format": "hydra-corpus-pack", "version": 1, "token_bytes", "manifest": <the packed corpus's
// manifest.json>, "mix": {"weights"}, "blobs": [{"split", "tokens", "bytes", "sha256"}]}.
// A blob is one zstd frame of the split's token ids stored as byte planes (all low bytes, then the high
// bytes, ...): the high bytes of 49K-vocabulary ids repeat a lot, so planes compress about 15% better.
// sha256 is of the uncompressed planes.
#pragma once

#include <cstdint>
#include <string>

namespace hydra {

struct PackReport {
    int64_t train_tokens = 0, heldout_tokens = 0, bytes = 0;
    double seconds = 0;
};

// mix_path "" uses the corpus's mix.json. Throws hydra::Error for a bad corpus or mix, or an
// unwritable out_file (written to "<out_file>.part" and renamed).
PackReport pack_corpus(const std::string& corpus_dir, const std::string& mix_path, int64_t train_tokens,
                       const std::string& out_file, int level = 19);

// Writes the corpus directory (corpus_manifest.h layout) the pack holds; the result opens with
// open_token_shards and read_corpus_manifest. Validates everything read (sizes, checksums, JSON fields)
// and throws hydra::Error naming the file for a truncated or corrupt pack.
PackReport unpack_corpus(const std::string& pack_file, const std::string& out_dir, bool force);

}  // namespace hydra
