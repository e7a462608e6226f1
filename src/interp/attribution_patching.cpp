// Attribution patching: backward passes of the teacher with respect to head outputs (see
// attribution_patching.h), through the decoder layer's own backward (model/decoder_layer.h) with no
// parameter gradients: the answer position in the layer's shared-prefix mode (one row over the run's
// cached keys/values), every position in its training mode (each layer's forward recomputed from the
// run's saved input, attention weights recomputed in the backward as well).
#include "interp/attribution_patching.h"

#include <cstring>

#include "core/error.h"
#include "interp/last_position_forward.h"
#include "interp/parallel_jobs.h"
#include "model/decoder_layer.h"

namespace hydra {

template <typename T>
std::vector<T> answer_position_head_grad(const FaWeights<T>& w, const FaRun<T>& run, const LogitDiff<T>& ld) {
    const ModelConfig& c = w.config();
    const int64_t L = c.num_layers, C = c.hidden_size, HDh = c.num_heads * c.head_dim;
    // Each layer's answer-position intermediates, recomputed from the run's saved layer input.
    std::vector<LayerActs<T>> acts(static_cast<size_t>(L));
    std::vector<T> x(static_cast<size_t>(C));
    for (int64_t l = 0; l < L; ++l) {
        LayerRun<T> lr = last_position_run(run, l, 1);
        lr.save = true;
        decoder_layer_forward(x.data(), run.x_in_last(l, C), c, w.plan(), w.layer(l), lr, acts[size_t(l)]);
    }
    std::vector<T> grad(static_cast<size_t>(L * HDh));
    std::vector<T> dx(static_cast<size_t>(C));
    ld.backward(run.x_final_last(C), dx.data());
    const LayerParams<T> none;  // no parameter gradients
    for (int64_t l = L - 1; l >= 0; --l) {
        LayerRun<T> lr = last_position_run(run, l, 1);
        lr.save = true;
        decoder_layer_backward(dx.data(), c, w.plan(), w.layer(l), none, lr, acts[size_t(l)],
                               grad.data() + l * HDh);
    }
    return grad;
}

template <typename T>
std::vector<std::vector<T>> all_positions_head_grad(const FaWeights<T>& w, const FaRun<T>& run,
                                                    const LogitDiff<T>& ld) {
    const ModelConfig& c = w.config();
    const int64_t L = c.num_layers, C = c.hidden_size, HDh = c.num_heads * c.head_dim;
    const int64_t N = run.num_tokens;
    HYDRA_CHECK(run.saved_from == 0, "attribution over all positions needs a run that kept every position");
    std::vector<std::vector<T>> grads(static_cast<size_t>(L));
    std::vector<T> dx(size_t(N * C), T(0)), x(static_cast<size_t>(N * C));
    ld.backward(run.x_final_last(C), dx.data() + (N - 1) * C);
    LayerRun<T> lr;
    lr.seq_len = N;
    lr.save = true;
    lr.recompute_attention = true;  // never (N, H, N) weights per layer
    LayerActs<T> a;
    const LayerParams<T> none;
    for (int64_t l = L - 1; l >= 0; --l) {
        decoder_layer_forward(x.data(), run.x_in[size_t(l)].data(), c, w.plan(), w.layer(l), lr, a);
        grads[size_t(l)].resize(size_t(N * HDh));
        decoder_layer_backward(dx.data(), c, w.plan(), w.layer(l), none, lr, a, grads[size_t(l)].data());
    }
    return grads;
}

namespace {

// answer_grad(run) / all_grad(run): answer_position_head_grad / all_positions_head_grad of the run's LD;
// concurrent: the two directions may run as parallel jobs.
template <typename T, typename AnswerGrad, typename AllGrad>
HeadPatchResult attribution_patching_with(const ModelConfig& c, const FaRun<T>& clean,
                                          const FaRun<T>& corrupted, const LogitDiff<T>& ld,
                                          AttributionPositions positions, AnswerGrad&& answer_grad,
                                          AllGrad&& all_grad, bool concurrent) {
    const int64_t L = c.num_layers, H = c.num_heads, Dh = c.head_dim, HDh = H * Dh;
    HeadPatchResult r = unpatched_result(c, clean, corrupted, ld);
    // estimate[l*H+h] = base LD + sum over positions of g . (source - base) at that head.
    auto direction = [&](const FaRun<T>& base, const FaRun<T>& source, double ld_base) {
        std::vector<double> est(size_t(L * H), ld_base);
        if (positions == AttributionPositions::Answer) {
            const std::vector<T> g = answer_grad(base);
            for (int64_t l = 0; l < L; ++l)
                for (int64_t h = 0; h < H; ++h) {
                    const T* zs = source.heads_last(l, HDh) + h * Dh;
                    const T* zb = base.heads_last(l, HDh) + h * Dh;
                    const T* gl = g.data() + l * HDh + h * Dh;
                    double s = 0;
                    for (int64_t d = 0; d < Dh; ++d) s += double(gl[d]) * (double(zs[d]) - double(zb[d]));
                    est[size_t(l * H + h)] += s;
                }
        } else {
            HYDRA_CHECK(source.saved_from == 0,
                        "attribution over all positions needs runs that kept every position");
            const auto g = all_grad(base);
            for (int64_t l = 0; l < L; ++l)
                for (int64_t h = 0; h < H; ++h) {
                    double s = 0;
                    for (int64_t t = 0; t < base.num_tokens; ++t) {
                        const int64_t o = t * HDh + h * Dh;
                        const T* zs = source.heads[size_t(l)].data() + o;
                        const T* zb = base.heads[size_t(l)].data() + o;
                        const T* gl = g[size_t(l)].data() + o;
                        for (int64_t d = 0; d < Dh; ++d) s += double(gl[d]) * (double(zs[d]) - double(zb[d]));
                    }
                    est[size_t(l * H + h)] += s;
                }
        }
        return est;
    };
    auto run = [&](int64_t d) {
        if (d == 0)
            r.ld_noised = direction(clean, corrupted, r.ld_clean);
        else
            r.ld_denoised = direction(corrupted, clean, r.ld_corrupted);
    };
    // The two directions are independent backward passes: one per thread.
    if (concurrent)
        run_parallel_jobs(2, run);
    else
        run(0), run(1);
    return r;
}

}  // namespace

template <typename T>
HeadPatchResult attribution_patching(const FaWeights<T>& w, const FaRun<T>& clean, const FaRun<T>& corrupted,
                                     const LogitDiff<T>& ld, AttributionPositions positions) {
    return attribution_patching_with(
        w.config(), clean, corrupted, ld, positions,
        [&](const FaRun<T>& run) { return answer_position_head_grad(w, run, ld); },
        [&](const FaRun<T>& run) { return all_positions_head_grad(w, run, ld); }, true);
}

HeadPatchResult attribution_patching(ScoringBackend& backend, const FaRun<float>& clean,
                                     const FaRun<float>& corrupted, const LogitDiff<float>& ld,
                                     AttributionPositions positions) {
    return attribution_patching_with(
        backend.weights().config(), clean, corrupted, ld, positions,
        [&](const FaRun<float>& run) { return backend.answer_head_grad(run, ld); },
        [&](const FaRun<float>& run) { return backend.all_head_grad(run, ld); }, backend.concurrent());
}

template std::vector<float> answer_position_head_grad<float>(const FaWeights<float>&, const FaRun<float>&,
                                                             const LogitDiff<float>&);
template std::vector<double> answer_position_head_grad<double>(const FaWeights<double>&, const FaRun<double>&,
                                                               const LogitDiff<double>&);
template std::vector<std::vector<float>> all_positions_head_grad<float>(const FaWeights<float>&,
                                                                        const FaRun<float>&,
                                                                        const LogitDiff<float>&);
template std::vector<std::vector<double>> all_positions_head_grad<double>(const FaWeights<double>&,
                                                                          const FaRun<double>&,
                                                                          const LogitDiff<double>&);
template HeadPatchResult attribution_patching<float>(const FaWeights<float>&, const FaRun<float>&,
                                                     const FaRun<float>&, const LogitDiff<float>&,
                                                     AttributionPositions);
template HeadPatchResult attribution_patching<double>(const FaWeights<double>&, const FaRun<double>&,
                                                      const FaRun<double>&, const LogitDiff<double>&,
                                                      AttributionPositions);

}  // namespace hydra
