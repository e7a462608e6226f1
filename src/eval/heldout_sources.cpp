// Held-out agreement per corpus source (see heldout_sources.h).
#include "eval/heldout_sources.h"

#include <filesystem>

#include "core/error.h"
#include "train/corpus_manifest.h"
#include "train/mix_config.h"

namespace hydra {

std::vector<HeldoutSource> heldout_sources(const std::string& dir, const std::string& mix_file) {
    if (!is_corpus_dir(dir)) return {};
    const CorpusManifest m = read_corpus_manifest(dir);
    const std::vector<double> w =
        mix_file.empty() ? default_mix_weights(dir, m) : read_mix_weights(mix_file, m);
    std::vector<HeldoutSource> out;
    for (size_t i = 0; i < m.sources.size(); ++i) {
        const CorpusSourceEntry& s = m.sources[i];
        out.push_back({s.name, w[i], s.heldout_begin, s.heldout_end});  // empty spans too: the mix's whole
    }
    return out;
}

std::vector<int> window_sources(const std::vector<HeldoutSource>& sources, int64_t window, size_t count) {
    HYDRA_CHECK(window >= 1, "held-out window of {} tokens: must be at least 1", window);
    std::vector<int> out(count, -1);
    for (size_t i = 0; i < count; ++i) {
        const int64_t at = int64_t(i) * window;
        for (size_t s = 0; s < sources.size(); ++s)
            if (at >= sources[s].begin && at < sources[s].end) out[i] = int(s);
    }
    return out;
}

HeldoutBySource summarize_by_source(const std::vector<WindowStats>& stats, const std::vector<int>& src,
                                    const std::vector<HeldoutSource>& sources, const BootstrapOptions& boot) {
    HYDRA_CHECK(stats.size() == src.size(), "held-out by source: {} windows but {} source labels",
                stats.size(), src.size());
    std::vector<std::vector<WindowStats>> per(sources.size());
    for (size_t i = 0; i < stats.size(); ++i) {
        HYDRA_CHECK(src[i] >= -1 && src[i] < int(sources.size()), "held-out window {}: source {} of {}", i,
                    src[i], sources.size());
        if (src[i] >= 0) per[size_t(src[i])].push_back(stats[i]);
    }
    double total_weight = 0, reached_weight = 0;
    for (size_t s = 0; s < sources.size(); ++s) {
        total_weight += sources[s].weight;
        if (!per[s].empty()) reached_weight += sources[s].weight;
    }
    HYDRA_CHECK(reached_weight > 0,
                "held-out by source: no window lies in a source with a training weight > 0");
    HeldoutBySource h;
    h.weight_covered = total_weight > 0 ? reached_weight / total_weight : 0;
    std::vector<std::vector<double>> kl, agree, den;
    std::vector<double> w;
    for (size_t s = 0; s < sources.size(); ++s) {
        if (per[s].empty()) continue;
        SourceHeldout r;
        r.name = sources[s].name;
        r.weight = sources[s].weight / reached_weight;
        r.metrics = summarize_windows(per[s], boot);
        h.kl += r.weight * r.metrics.kl;
        h.top1 += r.weight * r.metrics.top1;
        kl.emplace_back();
        agree.emplace_back();
        den.emplace_back();
        for (const WindowStats& x : per[s]) {
            kl.back().push_back(x.kl);
            agree.back().push_back(x.agree);
            den.back().push_back(double(x.tokens));
        }
        w.push_back(r.weight);
        h.sources.push_back(std::move(r));
    }
    h.kl_ci = bootstrap_weighted_ratios(kl, den, w, boot);
    h.top1_ci = bootstrap_weighted_ratios(agree, den, w, boot);
    return h;
}

nlohmann::json heldout_by_source_json(const HeldoutBySource& h) {
    const auto r = rounded_json;
    nlohmann::json j = {{"kl", r(h.kl, 5)},
                        {"kl_ci", interval_json(h.kl_ci, 5)},
                        {"top1_agreement", r(h.top1, 5)},
                        {"top1_agreement_ci", interval_json(h.top1_ci, 5)},
                        {"weight_covered", r(h.weight_covered, 4)},
                        {"sources", nlohmann::json::array()}};
    for (const SourceHeldout& s : h.sources) {
        nlohmann::json e = heldout_metrics_json(s.metrics);
        e.erase("bootstrap");
        e["name"] = s.name;
        e["weight"] = r(s.weight, 5);
        j["sources"].push_back(std::move(e));
    }
    return j;
}

}  // namespace hydra
