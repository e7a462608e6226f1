// A corpus mix: one weight per source, the relative probability that a training window is drawn from
// that source (train/data_loader.h). Written as JSON {"weights": {"python-docs": 4, ...}} or TOML
// [weights] python-docs = 4. A source the file does not name gets weight 0; naming a source the corpus
// lacks, a negative or non-finite weight, or weights that leave no source with training tokens is an
// error (a typo must not silently drop a source).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "train/corpus_manifest.h"

namespace hydra {

// Weights aligned with manifest.sources. The format is told by the content (JSON starts with '{').
std::vector<double> parse_mix_weights(std::string_view text, const std::string& where,
                                      const CorpusManifest& manifest);
std::vector<double> read_mix_weights(const std::string& path, const CorpusManifest& manifest);
// <dir>/mix.json when it exists, else the manifest's default weights.
std::vector<double> default_mix_weights(const std::string& dir, const CorpusManifest& manifest);

}  // namespace hydra
