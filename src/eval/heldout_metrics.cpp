// Held-out teacher agreement (see heldout_metrics.h).
#include "eval/heldout_metrics.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"

namespace hydra {

LogitsFn cpu_logits_fn(const LlamaModel& model) {
    return [&model](std::span<const int32_t> tokens) {
        const int64_t n = int64_t(tokens.size());
        ForwardOptions fo;
        fo.quantized_decode = false;
        KVCache cache(model, n);
        const Tensor logits = compute_logits(model, forward_hidden(model, tokens, cache, fo));
        return std::vector<float>(logits.f32(), logits.f32() + n * model.config().vocab_size);
    };
}

namespace {

// Windows over any token source read(begin, count, out) of `size` tokens.
template <class Read>
std::vector<std::vector<int32_t>> cut_windows(int64_t size, const Read& read, int64_t window,
                                              int64_t max_tokens) {
    HYDRA_CHECK(window >= 1, "held-out window of {} tokens: must be at least 1", window);
    HYDRA_CHECK(max_tokens >= 1, "held-out tokens {}: must be at least 1", max_tokens);
    std::vector<std::vector<int32_t>> out;
    int64_t covered = 0;
    for (int64_t b = 0; b + 1 < size && covered < max_tokens; b += window) {
        const int64_t n = std::min({window, size - b - 1, max_tokens - covered});
        if (n < 2 && !out.empty()) break;
        std::vector<int32_t> w(size_t(n + 1));
        read(b, n + 1, w.data());
        out.push_back(std::move(w));
        covered += n;
    }
    return out;
}

}  // namespace

std::vector<std::vector<int32_t>> heldout_windows(const TokenSplit& split, int64_t window,
                                                  int64_t max_tokens) {
    return cut_windows(
        split.size(), [&](int64_t b, int64_t n, int32_t* out) { split.read(b, n, out); }, window, max_tokens);
}

std::vector<std::vector<int32_t>> heldout_windows(std::span<const int32_t> tokens, int64_t window,
                                                  int64_t max_tokens) {
    return cut_windows(
        int64_t(tokens.size()),
        [&](int64_t b, int64_t n, int32_t* out) { std::copy_n(tokens.data() + b, n, out); }, window,
        max_tokens);
}

WindowStats window_stats(std::span<const int32_t> tokens, std::span<const float> teacher_logits,
                         std::span<const float> student_logits, int64_t V) {
    const int64_t n = int64_t(tokens.size()) - 1;
    HYDRA_CHECK(n >= 1, "a held-out window needs at least 2 tokens");
    HYDRA_CHECK(
        int64_t(teacher_logits.size()) == n * V && int64_t(student_logits.size()) == n * V,
        "held-out window of {} positions: logits have {} (teacher) and {} (student) values, expected {}", n,
        teacher_logits.size(), student_logits.size(), n * V);
    for (int64_t t = 1; t <= n; ++t)  // checked here: nothing may throw inside the parallel loop
        HYDRA_CHECK(tokens[size_t(t)] >= 0 && tokens[size_t(t)] < V,
                    "held-out token {} outside the vocabulary of {}", tokens[size_t(t)], V);
    std::vector<WindowStats> rows(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < n; ++t) {
        const float* a = teacher_logits.data() + t * V;
        const float* s = student_logits.data() + t * V;
        double ma = -INFINITY, ms = -INFINITY;
        int64_t ia = 0, is = 0;
        for (int64_t v = 0; v < V; ++v) {
            if (a[v] > ma) ma = a[v], ia = v;
            if (s[v] > ms) ms = s[v], is = v;
        }
        double za = 0, zs = 0;
        for (int64_t v = 0; v < V; ++v) za += std::exp(a[v] - ma), zs += std::exp(s[v] - ms);
        const double lza = std::log(za) + ma, lzs = std::log(zs) + ms;
        double k = 0;
        for (int64_t v = 0; v < V; ++v) {
            const double la = a[v] - lza;
            k += std::exp(la) * (la - (s[v] - lzs));
        }
        const int32_t next = tokens[size_t(t + 1)];
        WindowStats& r = rows[size_t(t)];
        r.kl = std::max(0.0, k);  // rounding can leave -1e-12 for identical distributions
        r.agree = ia == is ? 1.0 : 0.0;
        r.nll_student = lzs - s[next];
        r.nll_teacher = lza - a[next];
    }
    WindowStats w;
    w.tokens = n;
    for (const WindowStats& r : rows) {
        w.kl += r.kl;
        w.agree += r.agree;
        w.nll_student += r.nll_student;
        w.nll_teacher += r.nll_teacher;
    }
    return w;
}

HeldoutMetrics summarize_windows(const std::vector<WindowStats>& ws, const BootstrapOptions& boot) {
    HYDRA_CHECK(!ws.empty(), "no held-out windows to summarize");
    std::vector<double> den, kl, agree, nll_s, nll_t, diff;
    HeldoutMetrics m;
    for (const WindowStats& w : ws) {
        den.push_back(double(w.tokens));
        kl.push_back(w.kl);
        agree.push_back(w.agree);
        nll_s.push_back(w.nll_student);
        nll_t.push_back(w.nll_teacher);
        diff.push_back(w.nll_student - w.nll_teacher);
        m.tokens += w.tokens;
    }
    m.windows = int64_t(ws.size());
    auto mean = [&](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return s / double(m.tokens);
    };
    auto exp_ci = [](Interval c) { return Interval{std::exp(c.lo), std::exp(c.hi)}; };
    m.kl = mean(kl);
    m.top1 = mean(agree);
    m.ppl = std::exp(mean(nll_s));
    m.teacher_ppl = std::exp(mean(nll_t));
    m.ppl_ratio = std::exp(mean(diff));
    // The same seed for every metric: each one resamples the same windows.
    m.kl_ci = bootstrap_ratio(kl, den, boot);
    m.top1_ci = bootstrap_ratio(agree, den, boot);
    m.ppl_ci = exp_ci(bootstrap_ratio(nll_s, den, boot));
    m.teacher_ppl_ci = exp_ci(bootstrap_ratio(nll_t, den, boot));
    m.ppl_ratio_ci = exp_ci(bootstrap_ratio(diff, den, boot));
    return m;
}

WindowStatsFn host_window_stats_fn(const LogitsFn& teacher, const LogitsFn& student, int64_t vocab) {
    const bool self = &teacher == &student;
    return [teacher, student, self, vocab](std::span<const int32_t> w) {
        const std::span<const int32_t> in = w.first(w.size() - 1);
        const std::vector<float> lt = teacher(in);
        if (self) return window_stats(w, lt, lt, vocab);  // the teacher against itself: one forward
        const std::vector<float> ls = student(in);
        return window_stats(w, lt, ls, vocab);
    };
}

std::vector<WindowStats> collect_window_stats(const WindowStatsFn& stats,
                                              const std::vector<std::vector<int32_t>>& windows,
                                              const std::function<void(int64_t, int64_t)>& progress) {
    std::vector<WindowStats> ws;
    for (const std::vector<int32_t>& w : windows) {
        HYDRA_CHECK(w.size() >= 2, "a held-out window needs at least 2 tokens");
        ws.push_back(stats(w));
        if (progress) progress(int64_t(ws.size()), int64_t(windows.size()));
    }
    return ws;
}

HeldoutMetrics heldout_metrics(const WindowStatsFn& stats, const std::vector<std::vector<int32_t>>& windows,
                               const BootstrapOptions& boot,
                               const std::function<void(int64_t, int64_t)>& progress) {
    return summarize_windows(collect_window_stats(stats, windows, progress), boot);
}

HeldoutMetrics heldout_metrics(const LogitsFn& teacher, const LogitsFn& student,
                               const std::vector<std::vector<int32_t>>& windows, int64_t vocab,
                               const BootstrapOptions& boot,
                               const std::function<void(int64_t, int64_t)>& progress) {
    return heldout_metrics(host_window_stats_fn(teacher, student, vocab), windows, boot, progress);
}

nlohmann::json heldout_metrics_json(const HeldoutMetrics& m) {
    const auto r = rounded_json;
    return {{"tokens", m.tokens},
            {"windows", m.windows},
            {"kl", r(m.kl, 5)},
            {"kl_ci", interval_json(m.kl_ci, 5)},
            {"top1_agreement", r(m.top1, 5)},
            {"top1_agreement_ci", interval_json(m.top1_ci, 5)},
            {"ppl", r(m.ppl, 4)},
            {"ppl_ci", interval_json(m.ppl_ci, 4)},
            {"teacher_ppl", r(m.teacher_ppl, 4)},
            {"teacher_ppl_ci", interval_json(m.teacher_ppl_ci, 4)},
            {"ppl_ratio", r(m.ppl_ratio, 5)},
            {"ppl_ratio_ci", interval_json(m.ppl_ratio_ci, 5)},
            {"bootstrap", "percentile, 95%, windows resampled"}};
}

}  // namespace hydra
