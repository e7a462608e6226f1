// Held-out agreement per corpus source, and mixed by the training weights. The held-out windows
// (eval/heldout_metrics.h) are cut in split order, so their sources are whatever the split holds first
// (in a `hydra corpus` build: dictionaries and code before the kernel sources), not the mix the students
// trained on. Each window is attributed to the source whose held-out span holds its first token; the
// per-source metrics and their mix-weighted combination (each source's KL and top-1 weighted by its share
// of the training mix, over the sources the windows reach) say where a student is far from its teacher
// and what the held-out numbers would be on the training distribution.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/bootstrap.h"
#include "eval/heldout_metrics.h"

namespace hydra {

struct HeldoutSource {
    std::string name;
    double weight = 0;           // training mix weight (unnormalized)
    int64_t begin = 0, end = 0;  // token range in the held-out split
};

// The sources of a corpus directory (manifest.json; weights from `mix_file`, else the corpus's own mix),
// in split order; a source without held-out tokens has an empty span (no window is its, but its weight
// counts in the share of the mix the windows reach). Empty when `dir` is plain token shards with no corpus
// manifest. Throws hydra::Error for a malformed manifest or mix file.
std::vector<HeldoutSource> heldout_sources(const std::string& dir, const std::string& mix_file = "");

// The source index of each of `count` windows of `window` tokens cut from the split's start
// (heldout_windows: window i begins at token i * window); -1 where no source span holds that token.
std::vector<int> window_sources(const std::vector<HeldoutSource>& sources, int64_t window, size_t count);

struct SourceHeldout {
    std::string name;
    double weight = 0;  // normalized over the sources with windows
    HeldoutMetrics metrics;
};

struct HeldoutBySource {
    std::vector<SourceHeldout> sources;  // those with at least one window, in split order
    double kl = 0, top1 = 0;             // mix-weighted
    Interval kl_ci, top1_ci;             // stratified bootstrap (windows redrawn within each source)
    double weight_covered = 0;           // the reached sources' share of the whole training mix
};

// Per-source summaries of per-window statistics (stats[i] of window i from source src[i]; -1 is left out).
// Throws hydra::Error when sizes differ or no window has a source.
HeldoutBySource summarize_by_source(const std::vector<WindowStats>& stats, const std::vector<int>& src,
                                    const std::vector<HeldoutSource>& sources,
                                    const BootstrapOptions& boot = {});

// {"kl", "kl_ci", "top1_agreement", "top1_agreement_ci", "weight_covered",
//  "sources": [{"name", "weight", "tokens", "windows", "kl", "kl_ci", "top1_agreement", "ppl_ratio", ...}]}
nlohmann::json heldout_by_source_json(const HeldoutBySource& h);

}  // namespace hydra
