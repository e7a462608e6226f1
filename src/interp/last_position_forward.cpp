// Answer-position re-runs over a cached prefix (see last_position_forward.h). Each layer runs as the
// decoder layer's two halves so that copies joining at a layer take the base run's head outputs there
// instead of recomputing the same attention.
#include "interp/last_position_forward.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "interp/parallel_jobs.h"

namespace hydra {

template <typename T>
int64_t PatchedCopy<T>::first_layer(int64_t num_layers) const {
    int64_t l0 = num_layers;
    for (const auto& p : patches) l0 = std::min(l0, p.layer);
    return l0;
}

template <typename T>
std::vector<int64_t> copies_by_first_layer(std::span<const PatchedCopy<T>> copies, int64_t num_layers,
                                           int64_t num_heads, std::vector<int64_t>& start) {
    const int64_t N = int64_t(copies.size()), L = num_layers, H = num_heads;
    start.assign(static_cast<size_t>(N), 0);
    for (int64_t i = 0; i < N; ++i) {
        start[size_t(i)] = copies[size_t(i)].first_layer(L);
        for (const auto& p : copies[size_t(i)].patches)
            HYDRA_CHECK(p.layer >= 0 && p.layer < L && p.head >= 0 && p.head < H && p.value,
                        "head patch (layer {}, head {}) is outside the model ({} layers x {} heads)", p.layer,
                        p.head, L, H);
    }
    std::vector<int64_t> order(static_cast<size_t>(N));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return start[size_t(a)] < start[size_t(b)]; });
    return order;
}

template <typename T>
std::vector<T> last_position_sweep(const FaWeights<T>& w, const FaRun<T>& base,
                                   std::span<const PatchedCopy<T>> copies, int64_t max_batch) {
    const ModelConfig& c = w.config();
    const int64_t L = c.num_layers, C = c.hidden_size, H = c.num_heads, Dh = c.head_dim;
    HYDRA_CHECK(max_batch > 0, "patching batch size must be positive");
    const int64_t N = int64_t(copies.size());
    std::vector<int64_t> start;
    const std::vector<int64_t> order = copies_by_first_layer(copies, L, H, start);

    std::vector<T> out(static_cast<size_t>(N * C));
    // Chunks of at most max_batch copies, a multiple of the thread count, dealt round-robin from the
    // sorted order so every chunk holds copies of all start layers (equal work per chunk) and stays
    // sorted (the active copies of a layer are a prefix of the chunk).
    const int64_t threads = parallel_job_threads();
    int64_t chunks = (N + max_batch - 1) / max_batch;
    chunks = std::min(N, (chunks + threads - 1) / threads * threads);
    run_parallel_jobs(chunks, [&](int64_t chunk) {
        std::vector<int64_t> ids;
        for (int64_t i = chunk; i < N; i += chunks) ids.push_back(order[size_t(i)]);
        const int64_t B = int64_t(ids.size());
        LayerActs<T> acts;
        std::vector<T> X(static_cast<size_t>(B * C));
        int64_t active = 0;
        for (int64_t l = start[size_t(ids[0])]; l < L; ++l) {
            // Copies joining at layer l have the base input there, and (until the patch below) the base
            // run's head outputs: copy those instead of recomputing the same attention.
            const int64_t before = active;
            while (active < B && start[size_t(ids[size_t(active)])] == l) {
                std::memcpy(X.data() + active * C, base.x_in_last(l, C), size_t(C) * sizeof(T));
                ++active;
            }
            if (active == 0) continue;
            if (before > 0)
                decoder_layer_mixer(X.data(), c, w.plan(), w.layer(l), last_position_run(base, l, before),
                                    acts);
            layer_buffer(acts.heads, active * H * Dh);
            for (int64_t b = before; b < active; ++b)
                std::memcpy(acts.heads.data() + b * H * Dh, base.heads_last(l, H * Dh),
                            size_t(H * Dh) * sizeof(T));
            for (int64_t b = 0; b < active; ++b)
                for (const auto& p : copies[size_t(ids[size_t(b)])].patches)
                    if (p.layer == l)
                        std::memcpy(acts.heads.data() + (b * H + p.head) * Dh, p.value,
                                    size_t(Dh) * sizeof(T));
            decoder_layer_block(X.data(), X.data(), c, w.plan(), w.layer(l),
                                last_position_run(base, l, active), acts);
        }
        for (int64_t b = 0; b < B; ++b) {
            const T* src = start[size_t(ids[size_t(b)])] >= L ? base.x_final_last(C) : X.data() + b * C;
            std::memcpy(out.data() + ids[size_t(b)] * C, src, size_t(C) * sizeof(T));
        }
    });
    return out;
}

template <typename T>
void answer_position_mixer(const FaWeights<T>& w, const FaRun<T>& base, int64_t layer, const T* X, int64_t n,
                           T* heads, int64_t max_batch) {
    const ModelConfig& c = w.config();
    const int64_t C = c.hidden_size, HDh = c.num_heads * c.head_dim;
    HYDRA_CHECK(max_batch > 0, "patching batch size must be positive");
    LayerActs<T> acts;
    for (int64_t c0 = 0; c0 < n; c0 += max_batch) {
        const int64_t b = std::min(max_batch, n - c0);
        decoder_layer_mixer(X + c0 * C, c, w.plan(), w.layer(layer), last_position_run(base, layer, b), acts);
        std::memcpy(heads + c0 * HDh, acts.heads.data(), size_t(b * HDh) * sizeof(T));
    }
}

template struct PatchedCopy<float>;
template struct PatchedCopy<double>;
template std::vector<int64_t> copies_by_first_layer<float>(std::span<const PatchedCopy<float>>, int64_t,
                                                           int64_t, std::vector<int64_t>&);
template std::vector<int64_t> copies_by_first_layer<double>(std::span<const PatchedCopy<double>>, int64_t,
                                                            int64_t, std::vector<int64_t>&);
template std::vector<float> last_position_sweep<float>(const FaWeights<float>&, const FaRun<float>&,
                                                       std::span<const PatchedCopy<float>>, int64_t);
template std::vector<double> last_position_sweep<double>(const FaWeights<double>&, const FaRun<double>&,
                                                         std::span<const PatchedCopy<double>>, int64_t);

template void answer_position_mixer<float>(const FaWeights<float>&, const FaRun<float>&, int64_t,
                                           const float*, int64_t, float*, int64_t);
template void answer_position_mixer<double>(const FaWeights<double>&, const FaRun<double>&, int64_t,
                                            const double*, int64_t, double*, int64_t);

}  // namespace hydra
