// Residual-stream layer similarity through the forward's resid_out taps (see layer_similarity.h).
#include "interp/layer_similarity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "interp/linear_cka.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/taps.h"

namespace hydra {

namespace {

int64_t stream_per_window(const LayerSimilarityOptions& o) {
    return o.window - (o.bos_id >= 0 ? 1 : 0);
}

void check_options(const LayerSimilarityOptions& o) {
    HYDRA_CHECK(o.window >= 2, "window of {} tokens: at least 2 are needed", o.window);
    HYDRA_CHECK(stream_per_window(o) >= 1, "window of {} tokens leaves no room after the BOS", o.window);
    HYDRA_CHECK(o.skip_first >= 0 && o.skip_first < o.window,
                "skip of {} positions per window: must be at least 0 and below the window of {}",
                o.skip_first, o.window);
}

double row_norm(const float* x, int64_t C) {
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += double(x[c]) * double(x[c]);
    return std::sqrt(s);
}

// Runs one window through `model`, copying the counted rows [skip, T) of every layer's output into
// out (L, T - skip, C). norms, when given: per layer += (norm at position 0, sum of counted rows' norms).
void layer_outputs(const LlamaModel& model, std::span<const int32_t> window, int64_t skip, KVCache& cache,
                   std::vector<float>& out, std::vector<std::pair<double, double>>* norms = nullptr,
                   std::vector<double>* max_norms = nullptr) {
    const ModelConfig& cfg = model.config();
    const int64_t T = int64_t(window.size()), C = cfg.hidden_size, rows = T - skip;
    out.resize(size_t(cfg.num_layers * rows * C));
    Taps taps;
    taps.on("blk.*.resid_out", [&](std::string_view, int layer, Tensor& v) {
        HYDRA_ASSERT(v.dim(0) == T && v.dim(1) == C, "resid_out tap of layer {}: shape", layer);
        std::memcpy(out.data() + int64_t(layer) * rows * C, v.f32() + skip * C,
                    size_t(rows * C) * sizeof(float));
        if (norms) {
            (*norms)[size_t(layer)].first += row_norm(v.f32(), C);
            for (int64_t t = skip; t < T; ++t) {
                const double n = row_norm(v.f32() + t * C, C);
                (*norms)[size_t(layer)].second += n;
                (*max_norms)[size_t(layer)] = std::max((*max_norms)[size_t(layer)], n);
            }
        }
    });
    ForwardOptions fo;
    fo.taps = &taps;
    fo.quantized_decode = false;  // a one-token last window runs the same f32 weights as the others
    cache.reset();
    forward_hidden(model, window, cache, fo);
}

}  // namespace

int64_t counted_rows(int64_t tokens, const LayerSimilarityOptions& o) {
    check_options(o);
    const int64_t per = stream_per_window(o), bos = o.bos_id >= 0 ? 1 : 0;
    int64_t rows = 0;
    for (int64_t start = 0; start < tokens; start += per)
        rows += std::max<int64_t>(0, std::min(per, tokens - start) + bos - o.skip_first);
    return rows;
}

LayerSimilarity layer_similarity(const LlamaModel& model, const LlamaModel* teacher,
                                 std::span<const int32_t> tokens, const LayerSimilarityOptions& options,
                                 const std::function<void(int64_t, int64_t)>& progress) {
    const auto t0 = std::chrono::steady_clock::now();
    check_options(options);
    const ModelConfig& cfg = model.config();
    const int64_t L = cfg.num_layers, C = cfg.hidden_size;
    if (teacher) {
        const ModelConfig& tc = teacher->config();
        HYDRA_CHECK(
            tc.num_layers == L && tc.hidden_size == C && tc.vocab_size == cfg.vocab_size,
            "the teacher ({} layers, hidden size {}, vocabulary {}) does not match the model ({} layers, "
            "hidden size {}, vocabulary {}): layer-by-layer comparison needs the same shape",
            tc.num_layers, tc.hidden_size, tc.vocab_size, L, C, cfg.vocab_size);
    }
    const int64_t max_pos = cfg.max_position_embeddings;
    HYDRA_CHECK(max_pos <= 0 || options.window <= max_pos,
                "window of {} tokens: above the model's context of {}", options.window, max_pos);
    const int64_t n_tokens = int64_t(tokens.size());
    const int64_t rows_total = counted_rows(n_tokens, options);
    HYDRA_CHECK(
        rows_total >= 4,
        "{} tokens in windows of {} with {} skipped per window leave {} counted positions; CKA needs at "
        "least 4",
        n_tokens, options.window, options.skip_first, rows_total);

    // Representations: the model's layers 0..L-1, then the teacher's L..2L-1.
    const int R = int(teacher ? 2 * L : L);
    std::vector<std::pair<int, int>> pairs;
    for (int i = 0; i < L; ++i)
        for (int j = i + 1; j < L; ++j) pairs.emplace_back(i, j);
    if (teacher)
        for (int l = 0; l < L; ++l) pairs.emplace_back(l, int(L) + l);
    CkaAccumulator acc(std::vector<int64_t>(size_t(R), C), pairs);

    LayerSimilarity out;
    out.layers = L;
    out.has_teacher = teacher != nullptr;
    std::vector<double> err(size_t(L), 0.0), ref(size_t(L), 0.0);
    std::vector<std::pair<double, double>> norms(size_t(L), {0.0, 0.0});
    std::vector<double> max_norms(size_t(L), 0.0);
    int64_t normed_windows = 0;
    const int64_t per = stream_per_window(options);
    const int64_t total_windows = (n_tokens + per - 1) / per;
    KVCache cache(model, options.window);
    std::optional<KVCache> teacher_cache;
    if (teacher) teacher_cache.emplace(*teacher, options.window);
    std::vector<float> hs, ht;
    std::vector<int32_t> window;
    for (int64_t start = 0; start < n_tokens; start += per) {
        const int64_t count = std::min(per, n_tokens - start);
        window.clear();
        if (options.bos_id >= 0) window.push_back(options.bos_id);
        window.insert(window.end(), tokens.begin() + start, tokens.begin() + start + count);
        const int64_t rows = int64_t(window.size()) - options.skip_first;
        out.tokens += count;
        ++out.windows;
        if (rows > 0) {
            layer_outputs(model, window, options.skip_first, cache, hs, &norms, &max_norms);
            ++normed_windows;
            std::vector<const float*> reps;
            for (int64_t l = 0; l < L; ++l) reps.push_back(hs.data() + l * rows * C);
            if (teacher) {
                layer_outputs(*teacher, window, options.skip_first, *teacher_cache, ht);
                for (int64_t l = 0; l < L; ++l) {
                    const float* a = hs.data() + l * rows * C;
                    const float* b = ht.data() + l * rows * C;
                    double e = 0, r = 0;
                    for (int64_t i = 0; i < rows * C; ++i) {
                        const double d = double(a[i]) - double(b[i]);
                        e += d * d;
                        r += double(b[i]) * double(b[i]);
                    }
                    err[size_t(l)] += e;
                    ref[size_t(l)] += r;
                    reps.push_back(b);
                }
            }
            acc.add(reps, rows);
            out.rows += rows;
        }
        if (progress) progress(out.windows, total_windows);
    }
    HYDRA_ASSERT(out.rows == rows_total, "counted {} rows, expected {}", out.rows, rows_total);

    out.cka.assign(size_t(L), std::vector<double>(size_t(L), 0.0));
    out.cka_biased = out.cka;
    for (int i = 0; i < L; ++i)
        for (int j = i; j < L; ++j) {
            out.cka[size_t(i)][size_t(j)] = out.cka[size_t(j)][size_t(i)] =
                acc.cka(i, j, CkaEstimator::Debiased);
            out.cka_biased[size_t(i)][size_t(j)] = out.cka_biased[size_t(j)][size_t(i)] =
                acc.cka(i, j, CkaEstimator::Biased);
        }
    if (teacher)
        for (int l = 0; l < L; ++l) {
            out.teacher.cka.push_back(acc.cka(l, int(L) + l, CkaEstimator::Debiased));
            out.teacher.cka_biased.push_back(acc.cka(l, int(L) + l, CkaEstimator::Biased));
            out.teacher.rel_mse.push_back(ref[size_t(l)] > 0 ? err[size_t(l)] / ref[size_t(l)] : NAN);
        }
    for (int64_t l = 0; l < L; ++l) {
        out.norm_first.push_back(norms[size_t(l)].first / double(normed_windows));
        out.norm_counted.push_back(norms[size_t(l)].second / double(out.rows));
        out.norm_counted_max.push_back(max_norms[size_t(l)]);
    }
    out.accumulator_bytes = acc.bytes();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

}  // namespace hydra
