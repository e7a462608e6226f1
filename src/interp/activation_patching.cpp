// Activation patching of all heads (see activation_patching.h).
#include "interp/activation_patching.h"

#include "core/error.h"
#include "interp/last_position_forward.h"

namespace hydra {

namespace {

// sweep(base, copies): the copies' final residuals (last_position_sweep semantics).
template <typename T, typename Sweep>
HeadPatchResult activation_patching_with(const ModelConfig& c, const FaRun<T>& clean,
                                         const FaRun<T>& corrupted, const LogitDiff<T>& ld, Sweep&& sweep) {
    const int64_t L = c.num_layers, H = c.num_heads, Dh = c.head_dim;
    HeadPatchResult r = unpatched_result(c, clean, corrupted, ld);
    // Direction: run `base`, set each head to its value in `source`.
    auto direction = [&](const FaRun<T>& base, const FaRun<T>& source) {
        std::vector<PatchedCopy<T>> copies(static_cast<size_t>(L * H));
        for (int64_t l = 0; l < L; ++l)
            for (int64_t h = 0; h < H; ++h)
                copies[size_t(l * H + h)].patches = {{l, h, source.heads_last(l, H * Dh) + h * Dh}};
        return ld.rows(sweep(base, std::span<const PatchedCopy<T>>(copies)));
    };
    r.ld_noised = direction(clean, corrupted);
    r.ld_denoised = direction(corrupted, clean);
    return r;
}

}  // namespace

template <typename T>
HeadPatchResult activation_patching(const FaWeights<T>& w, const FaRun<T>& clean, const FaRun<T>& corrupted,
                                    const LogitDiff<T>& ld, int64_t max_batch) {
    return activation_patching_with(w.config(), clean, corrupted, ld,
                                    [&](const FaRun<T>& base, std::span<const PatchedCopy<T>> copies) {
                                        return last_position_sweep<T>(w, base, copies, max_batch);
                                    });
}

HeadPatchResult activation_patching(ScoringBackend& backend, const FaRun<float>& clean,
                                    const FaRun<float>& corrupted, const LogitDiff<float>& ld,
                                    int64_t max_batch) {
    return activation_patching_with(
        backend.weights().config(), clean, corrupted, ld,
        [&](const FaRun<float>& base, std::span<const PatchedCopy<float>> copies) {
            return backend.sweep(base, copies, max_batch);
        });
}

template HeadPatchResult activation_patching<float>(const FaWeights<float>&, const FaRun<float>&,
                                                    const FaRun<float>&, const LogitDiff<float>&, int64_t);
template HeadPatchResult activation_patching<double>(const FaWeights<double>&, const FaRun<double>&,
                                                     const FaRun<double>&, const LogitDiff<double>&, int64_t);

}  // namespace hydra
