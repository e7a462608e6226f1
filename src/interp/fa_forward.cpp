// Whole-prompt teacher forward for head scoring (see fa_forward.h). The layer is the engine's own, so
// the float run matches model/llama_forward.cpp to rounding.
#include "interp/fa_forward.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hydra {

template <typename T>
FaRun<T> fa_forward(const FaWeights<T>& w, std::span<const int32_t> tokens, bool save_all_positions,
                    const HeadHook<T>& hook, const FaRun<T>* share, std::span<const int32_t> share_tokens) {
    const ModelConfig& c = w.config();
    const int64_t N = int64_t(tokens.size()), C = c.hidden_size, HDh = c.num_heads * c.head_dim;
    const int64_t KVD = c.num_kv_heads * c.head_dim;
    HYDRA_CHECK(N > 0, "head scoring: empty prompt");
    for (int64_t t = 0; t < N; ++t)
        HYDRA_CHECK(tokens[size_t(t)] >= 0 && tokens[size_t(t)] < c.vocab_size,
                    "token id {} at position {} is outside the vocabulary (0..{})", tokens[size_t(t)], t,
                    c.vocab_size - 1);
    FaRun<T> run;
    run.num_tokens = N;
    run.saved_from = save_all_positions ? 0 : N - 1;
    // Positions [0, p) come from `share`; at least the answer position is always computed.
    int64_t p = 0;
    if (share) {
        HYDRA_ASSERT(!hook, "a shared prefix cannot be combined with a head hook");
        HYDRA_ASSERT(int64_t(share_tokens.size()) == share->num_tokens,
                     "shared run of {} tokens, {} ids given", share->num_tokens, share_tokens.size());
        while (p < N - 1 && p < int64_t(share_tokens.size()) && tokens[size_t(p)] == share_tokens[size_t(p)])
            ++p;
        if (p > run.saved_from && share->saved_from > run.saved_from) p = 0;  // rows we need were not kept
    }
    run.shared_prefix = p;
    const int64_t n = N - p, R = run.saved_rows(), from = run.saved_from;
    const int64_t old_from = share ? share->saved_from : 0;

    std::vector<T> x(static_cast<size_t>(n * C));
    for (int64_t t = 0; t < n; ++t)
        std::memcpy(x.data() + t * C, w.embedding() + int64_t(tokens[size_t(p + t)]) * C,
                    size_t(C) * sizeof(T));
    // Rows [from, N) of an (N, width) quantity whose rows [p, N) are `fresh` and earlier ones in `old`.
    auto saved_rows = [&](const std::vector<T>* old, const T* fresh, int64_t width) {
        std::vector<T> out(static_cast<size_t>(R * width));
        for (int64_t t = from; t < N; ++t) {
            const T* src = t >= p ? fresh + (t - p) * width : old->data() + (t - old_from) * width;
            std::memcpy(out.data() + (t - from) * width, src, size_t(width) * sizeof(T));
        }
        return out;
    };
    LayerActs<T> acts;
    LayerRun<T> lr;
    lr.seq_len = n;
    lr.pos0 = p;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        run.x_in.push_back(saved_rows(share ? &share->x_in[size_t(l)] : nullptr, x.data(), C));
        run.k.emplace_back(static_cast<size_t>(N * KVD));
        run.v.emplace_back(static_cast<size_t>(N * KVD));
        if (p > 0) {
            std::memcpy(run.k.back().data(), share->k[size_t(l)].data(), size_t(p * KVD) * sizeof(T));
            std::memcpy(run.v.back().data(), share->v[size_t(l)].data(), size_t(p * KVD) * sizeof(T));
        }
        const LayerCache<T> cache{run.k.back().data(), run.v.back().data(), {}};
        const HeadHookTap<T> tap(hook, l);
        lr.cache = &cache;
        lr.taps = hook ? &tap : nullptr;
        decoder_layer_forward(x.data(), x.data(), c, w.plan(), w.layer(l), lr, acts);
        run.heads.push_back(saved_rows(share ? &share->heads[size_t(l)] : nullptr, acts.heads.data(), HDh));
    }
    run.x_final = saved_rows(share ? &share->x_final : nullptr, x.data(), C);
    return run;
}

template FaRun<float> fa_forward<float>(const FaWeights<float>&, std::span<const int32_t>, bool,
                                        const HeadHook<float>&, const FaRun<float>*,
                                        std::span<const int32_t>);
template FaRun<double> fa_forward<double>(const FaWeights<double>&, std::span<const int32_t>, bool,
                                          const HeadHook<double>&, const FaRun<double>*,
                                          std::span<const int32_t>);

}  // namespace hydra
