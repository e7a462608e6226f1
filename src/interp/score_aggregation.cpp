// Score aggregation (see score_aggregation.h).
#include "interp/score_aggregation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace hydra {

PairHeadScores pair_head_scores(const HeadPatchResult& r, const ScoreConfig& config) {
    const std::vector<double> pe = r.denoising_effect(), ne = r.noising_effect();
    HYDRA_ASSERT(pe.size() == ne.size(), "PE has {} heads, NE {}", pe.size(), ne.size());
    PairHeadScores s;
    for (size_t i = 0; i < pe.size(); ++i) {
        const double p = std::clamp(pe[i], config.clip_lo, config.clip_hi);
        const double n = std::clamp(ne[i], config.clip_lo, config.clip_hi);
        s.denoising.push_back(p);
        s.noising.push_back(n);
        s.score.push_back(0.5 * (std::max(p, 0.0) + std::max(n, 0.0)));
    }
    return s;
}

bool TaskScoreAccumulator::add_pair(const HeadPatchResult& r, const ScoreConfig& config) {
    if (!(r.gap() >= config.min_gap)) {
        ++skipped_;
        return false;
    }
    const PairHeadScores s = pair_head_scores(r, config);
    if (n_ == 0) n_ = int64_t(s.score.size());
    HYDRA_ASSERT(int64_t(s.score.size()) == n_, "pair has {} heads, expected {}", s.score.size(), n_);
    score_.resize(size_t(n_)), pe_.resize(size_t(n_)), ne_.resize(size_t(n_));
    for (int64_t i = 0; i < n_; ++i) {
        score_[size_t(i)] += s.score[size_t(i)];
        pe_[size_t(i)] += s.denoising[size_t(i)];
        ne_[size_t(i)] += s.noising[size_t(i)];
    }
    ++count_;
    return true;
}

void TaskScoreAccumulator::add_trial(const std::vector<double>& scores, bool correct) {
    if (!correct) {
        ++skipped_;
        return;
    }
    if (n_ == 0) n_ = int64_t(scores.size());
    HYDRA_ASSERT(int64_t(scores.size()) == n_, "trial has {} heads, expected {}", scores.size(), n_);
    score_.resize(size_t(n_));
    for (int64_t i = 0; i < n_; ++i) score_[size_t(i)] += scores[size_t(i)];
    ++count_;
}

TaskHeadScores TaskScoreAccumulator::mean() const {
    TaskHeadScores t;
    t.count = count_;
    t.skipped = skipped_;
    const double inv = count_ > 0 ? 1.0 / double(count_) : 0.0;
    t.score.assign(size_t(n_), 0.0);
    for (size_t i = 0; i < score_.size(); ++i) t.score[i] = score_[i] * inv;
    if (!pe_.empty()) {
        t.denoising.resize(pe_.size()), t.noising.resize(ne_.size());
        for (size_t i = 0; i < pe_.size(); ++i) t.denoising[i] = pe_[i] * inv, t.noising[i] = ne_[i] * inv;
    }
    return t;
}

std::vector<double> max_aware_mean(const std::vector<std::vector<double>>& per_task, double lambda) {
    HYDRA_ASSERT(!per_task.empty(), "no task");
    const size_t n = per_task[0].size();
    std::vector<double> mx(n, -INFINITY), sum(n, 0.0), out(n);
    for (const auto& t : per_task) {
        HYDRA_ASSERT(t.size() == n, "task vectors of {} and {} heads", t.size(), n);
        for (size_t i = 0; i < n; ++i) mx[i] = std::max(mx[i], t[i]), sum[i] += t[i];
    }
    for (size_t i = 0; i < n; ++i)
        out[i] = lambda * mx[i] + (1.0 - lambda) * sum[i] / double(per_task.size());
    return out;
}

double method_weight(const std::string& method, const std::map<std::string, MethodScores>& present) {
    if (method == "activation") return 1.0;
    if (method == "attribution") return present.count("activation") ? 0.0 : 1.0;
    if (method == "path") return 0.5;
    if (method == "retrieval") return 0.25;
    return 0.0;  // path_direct and anything informational
}

void aggregate_scores(ScoreSet& set) {
    const int64_t n = set.layers * set.heads;
    HYDRA_CHECK(!set.methods.empty(), "no scoring method produced scores");
    std::vector<double> combined(size_t(n), 0.0);
    double wsum = 0;
    for (auto& [name, m] : set.methods) {
        std::vector<std::vector<double>> per_task;
        for (const auto& [task, t] : m.tasks)
            if (t.count > 0) per_task.push_back(t.score);
        m.heads = per_task.empty() ? std::vector<double>(size_t(n), 0.0)
                                   : max_aware_mean(per_task, set.config.lambda);
        m.weight = method_weight(name, set.methods);
        if (m.weight <= 0) continue;
        const double mx = *std::max_element(m.heads.begin(), m.heads.end());
        const double inv = mx > 0 ? 1.0 / mx : 0.0;
        for (int64_t i = 0; i < n; ++i) combined[size_t(i)] += m.weight * m.heads[size_t(i)] * inv;
        wsum += m.weight;
    }
    if (wsum > 0)
        for (double& v : combined) v /= wsum;
    set.aggregate = combined;
    const int64_t G = set.heads / set.kv_heads;
    set.aggregate_kv.assign(size_t(set.layers * set.kv_heads), -INFINITY);
    for (int64_t l = 0; l < set.layers; ++l)
        for (int64_t h = 0; h < set.heads; ++h) {
            double& g = set.aggregate_kv[size_t(l * set.kv_heads + h / G)];
            g = std::max(g, combined[size_t(l * set.heads + h)]);
        }
}

namespace {

std::vector<double> ranks(const std::vector<double>& v) {
    std::vector<size_t> idx(v.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<double> r(v.size());
    for (size_t i = 0; i < idx.size();) {
        size_t j = i;
        while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
        const double avg = 0.5 * double(i + j) + 1.0;  // ties share their mean rank
        for (size_t k = i; k <= j; ++k) r[idx[k]] = avg;
        i = j + 1;
    }
    return r;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) {
    HYDRA_CHECK(a.size() == b.size() && a.size() >= 2,
                "spearman: need two equally long vectors of 2+ values");
    const std::vector<double> ra = ranks(a), rb = ranks(b);
    const double n = double(a.size());
    double ma = 0, mb = 0;
    for (size_t i = 0; i < ra.size(); ++i) ma += ra[i], mb += rb[i];
    ma /= n, mb /= n;
    double sab = 0, saa = 0, sbb = 0;
    for (size_t i = 0; i < ra.size(); ++i) {
        sab += (ra[i] - ma) * (rb[i] - mb);
        saa += (ra[i] - ma) * (ra[i] - ma);
        sbb += (rb[i] - mb) * (rb[i] - mb);
    }
    if (saa == 0 || sbb == 0) return NAN;
    return sab / std::sqrt(saa * sbb);
}

std::vector<std::pair<int64_t, int64_t>> top_heads(const std::vector<double>& scores, int64_t heads_per_layer,
                                                   int64_t k) {
    std::vector<int64_t> idx(scores.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int64_t a, int64_t b) { return scores[size_t(a)] > scores[size_t(b)]; });
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t i = 0; i < std::min<int64_t>(k, int64_t(idx.size())); ++i)
        out.emplace_back(idx[size_t(i)] / heads_per_layer, idx[size_t(i)] % heads_per_layer);
    return out;
}

}  // namespace hydra
