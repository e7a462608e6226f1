// Path patching (see path_patching.h).
#include "interp/path_patching.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "interp/last_position_forward.h"
#include "interp/parallel_jobs.h"

namespace hydra {

namespace {

// delta (C) = W_o[:, head] (a - b): a head's write into the residual stream changed from b to a.
template <typename T>
void head_write_delta(const FaWeights<T>& w, int64_t layer, int64_t head, const T* a, const T* b, T* delta) {
    const ModelConfig& c = w.config();
    const int64_t C = c.hidden_size, Dh = c.head_dim, HDh = c.num_heads * Dh;
    const T* wo = w.layer(layer).wo;
    for (int64_t i = 0; i < C; ++i) {
        const T* row = wo + i * HDh + head * Dh;
        double s = 0;
        for (int64_t d = 0; d < Dh; ++d) s += double(row[d]) * (double(a[d]) - double(b[d]));
        delta[i] = T(s);
    }
}

// sweep(base, copies): final residuals (last_position_sweep); mixer(base, layer, X, n, heads): the
// layer's head outputs at the answer position for n inputs (answer_position_mixer); concurrent: the two
// directions may run as parallel jobs.
template <typename T, typename Sweep, typename Mixer>
PathPatchResult path_patching_with(const FaWeights<T>& w, const FaRun<T>& clean, const FaRun<T>& corrupted,
                                   const LogitDiff<T>& ld,
                                   const std::vector<std::pair<int64_t, int64_t>>& receivers, Sweep&& sweep,
                                   Mixer&& mixer, bool concurrent) {
    const ModelConfig& c = w.config();
    const int64_t L = c.num_layers, H = c.num_heads, Dh = c.head_dim, C = c.hidden_size, HDh = H * Dh;
    HYDRA_CHECK(clean.num_tokens == corrupted.num_tokens,
                "patching pair: the clean prompt has {} tokens, the corrupted one {} (they must be equal)",
                clean.num_tokens, corrupted.num_tokens);
    for (const auto& [rl, rh] : receivers)
        HYDRA_CHECK(rl >= 0 && rl < L && rh >= 0 && rh < H,
                    "path patching: receiver (layer {}, head {}) is outside the model", rl, rh);
    const int64_t NR = int64_t(receivers.size());
    std::set<int64_t> receiver_layers;
    for (const auto& r : receivers) receiver_layers.insert(r.first);

    PathPatchResult out;
    out.receivers = receivers;
    for (HeadPatchResult* r : {&out.direct, &out.via_receivers}) {
        r->layers = L;
        r->heads = H;
        r->ld_clean = ld(clean.x_final_last(C));
        r->ld_corrupted = ld(corrupted.x_final_last(C));
    }

    auto direction = [&](const FaRun<T>& base, const FaRun<T>& source, std::vector<double>& direct,
                         std::vector<double>& via) {
        // Every sender's residual delta.
        std::vector<T> delta(static_cast<size_t>(L * H * C));
        for (int64_t l = 0; l < L; ++l)
            for (int64_t h = 0; h < H; ++h)
                head_write_delta(w, l, h, source.heads_last(l, HDh) + h * Dh,
                                 base.heads_last(l, HDh) + h * Dh, delta.data() + (l * H + h) * C);
        // (a) direct: final residual + delta.
        direct.assign(size_t(L * H), 0.0);
        std::vector<T> x(static_cast<size_t>(C));
        for (int64_t s = 0; s < L * H; ++s) {
            const T* xf = base.x_final_last(C);
            for (int64_t i = 0; i < C; ++i) x[size_t(i)] = xf[i] + delta[size_t(s * C + i)];
            direct[size_t(s)] = ld(x.data());
        }
        // (b) receivers' new outputs z'(s, r): (senders, NR, Dh), batched per receiver layer over the
        // senders below it.
        std::vector<T> zr(static_cast<size_t>(L * H * NR * Dh));
        for (int64_t R : receiver_layers) {
            const int64_t n = R * H;  // senders in layers 0..R-1
            if (n == 0) continue;
            std::vector<T> X(size_t(n * C)), heads(size_t(n * HDh));
            const T* xin = base.x_in_last(R, C);
            for (int64_t s = 0; s < n; ++s)
                for (int64_t i = 0; i < C; ++i) X[size_t(s * C + i)] = xin[i] + delta[size_t(s * C + i)];
            mixer(base, R, X.data(), n, heads.data());
            for (int64_t k = 0; k < NR; ++k) {
                if (receivers[size_t(k)].first != R) continue;
                const int64_t rh = receivers[size_t(k)].second;
                for (int64_t j = 0; j < n; ++j)
                    std::memcpy(zr.data() + (j * NR + k) * Dh, heads.data() + (j * H + rh) * Dh,
                                size_t(Dh) * sizeof(T));
            }
        }
        std::vector<PatchedCopy<T>> copies(static_cast<size_t>(L * H));
        for (int64_t s = 0; s < L * H; ++s)
            for (int64_t k = 0; k < NR; ++k)
                if (receivers[size_t(k)].first > s / H)
                    copies[size_t(s)].patches.push_back({receivers[size_t(k)].first,
                                                         receivers[size_t(k)].second,
                                                         zr.data() + (s * NR + k) * Dh});
        via = ld.rows(sweep(base, std::span<const PatchedCopy<T>>(copies)));
    };
    auto run = [&](int64_t d) {
        if (d == 0)
            direction(clean, corrupted, out.direct.ld_noised, out.via_receivers.ld_noised);
        else
            direction(corrupted, clean, out.direct.ld_denoised, out.via_receivers.ld_denoised);
    };
    // One direction per thread (each runs its batches single-threaded).
    if (concurrent)
        run_parallel_jobs(2, run);
    else
        run(0), run(1);
    return out;
}

}  // namespace

template <typename T>
PathPatchResult path_patching(const FaWeights<T>& w, const FaRun<T>& clean, const FaRun<T>& corrupted,
                              const LogitDiff<T>& ld,
                              const std::vector<std::pair<int64_t, int64_t>>& receivers, int64_t max_batch) {
    return path_patching_with(
        w, clean, corrupted, ld, receivers,
        [&](const FaRun<T>& base, std::span<const PatchedCopy<T>> copies) {
            return last_position_sweep<T>(w, base, copies, max_batch);
        },
        [&](const FaRun<T>& base, int64_t layer, const T* X, int64_t n, T* heads) {
            answer_position_mixer<T>(w, base, layer, X, n, heads, max_batch);
        },
        true);
}

PathPatchResult path_patching(ScoringBackend& backend, const FaRun<float>& clean,
                              const FaRun<float>& corrupted, const LogitDiff<float>& ld,
                              const std::vector<std::pair<int64_t, int64_t>>& receivers, int64_t max_batch) {
    return path_patching_with(
        backend.weights(), clean, corrupted, ld, receivers,
        [&](const FaRun<float>& base, std::span<const PatchedCopy<float>> copies) {
            return backend.sweep(base, copies, max_batch);
        },
        [&](const FaRun<float>& base, int64_t layer, const float* X, int64_t n, float* heads) {
            backend.answer_mixer(base, layer, X, n, heads, max_batch);
        },
        backend.concurrent());
}

template PathPatchResult path_patching<float>(const FaWeights<float>&, const FaRun<float>&,
                                              const FaRun<float>&, const LogitDiff<float>&,
                                              const std::vector<std::pair<int64_t, int64_t>>&, int64_t);
template PathPatchResult path_patching<double>(const FaWeights<double>&, const FaRun<double>&,
                                               const FaRun<double>&, const LogitDiff<double>&,
                                               const std::vector<std::pair<int64_t, int64_t>>&, int64_t);

}  // namespace hydra
