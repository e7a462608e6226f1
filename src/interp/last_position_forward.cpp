// Answer-position re-runs over a cached prefix (see last_position_forward.h).
//
// Attention of n copies at position P, per KV group g (heads g*G .. g*G+G-1):
//   S = scale * Qg K_g[0:P]^T   (n*G, P)   one GEMM against the base run's cached keys
//   S[:, P] = scale * q . k_own           each copy's own key at position P
//   row softmax, then Og = S[:, 0:P] V_g[0:P] + S[:, P] v_own
// The prefix keys/values are read in place from the base run (row stride Hkv*Dh).
#include "interp/last_position_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "core/gemm.h"
#include "interp/parallel_jobs.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/rmsnorm.h"
#include "ops/cpu/rope.h"
#include "ops/cpu/swiglu.h"

namespace hydra {

template <typename T>
int64_t PatchedCopy<T>::first_layer(int64_t num_layers) const {
    int64_t l0 = num_layers;
    for (const auto& p : patches) l0 = std::min(l0, p.layer);
    return l0;
}

template <typename T>
void last_position_heads(const FaWeights<T>& w, const FaRun<T>& base, int64_t layer, const T* x, int64_t n,
                         LastPosActs<T>& a) {
    const ModelConfig& c = w.config();
    const FaLayerWeights<T>& p = w.layer(layer);
    const int64_t C = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, Dh = c.head_dim, G = H / Hkv;
    const int64_t P = base.answer_pos(), KVD = Hkv * Dh;
    const T scale = T(1.0 / std::sqrt(double(Dh)));
    a.rows = n;
    a.prefix = P;
    a.xn1.resize(size_t(n * C)), a.rstd1.resize(size_t(n)), a.q.resize(size_t(n * H * Dh));
    a.k.resize(size_t(n * KVD)), a.v.resize(size_t(n * KVD)), a.heads.resize(size_t(n * H * Dh));
    a.probs.resize(size_t(Hkv * n * G * (P + 1))), a.qg.resize(size_t(n * G * Dh)),
        a.og.resize(size_t(n * G * Dh));

    cpu::rmsnorm_forward(a.xn1.data(), a.rstd1.data(), x, p.attn_norm, n, C, c.rms_norm_eps);
    cpu::linear_forward(a.q.data(), a.xn1.data(), p.wq, p.bq, n, C, H * Dh);
    cpu::linear_forward(a.k.data(), a.xn1.data(), p.wk, p.bk, n, C, KVD);
    cpu::linear_forward(a.v.data(), a.xn1.data(), p.wv, p.bv, n, C, KVD);
    if (c.qk_norm) {
        a.q_pre = a.q;
        a.k_pre = a.k;
        a.rstd_q.resize(size_t(n * H)), a.rstd_k.resize(size_t(n * Hkv));
        cpu::rmsnorm_forward(a.q.data(), a.rstd_q.data(), a.q_pre.data(), p.q_norm, n * H, Dh,
                             c.rms_norm_eps);
        cpu::rmsnorm_forward(a.k.data(), a.rstd_k.data(), a.k_pre.data(), p.k_norm, n * Hkv, Dh,
                             c.rms_norm_eps);
    }
    // All copies sit at the same position P: rotate them as one token with n*H (n*Hkv) heads.
    cpu::rope_forward(a.q.data(), 1, n * H, Dh, c.rope_dim, P, c.rope_theta);
    cpu::rope_forward(a.k.data(), 1, n * Hkv, Dh, c.rope_dim, P, c.rope_theta);

    const T* Kc = base.k[size_t(layer)].data();
    const T* Vc = base.v[size_t(layer)].data();
    const int64_t R = n * G, W = P + 1;
    for (int64_t g = 0; g < Hkv; ++g) {
        T* qg = a.qg.data();
        for (int64_t b = 0; b < n; ++b)
            std::memcpy(qg + b * G * Dh, a.q.data() + (b * H + g * G) * Dh, size_t(G * Dh) * sizeof(T));
        T* S = a.probs.data() + g * R * W;
        if (P > 0) gemm(false, true, R, P, Dh, scale, qg, Dh, Kc + g * Dh, KVD, T(0), S, W);
#pragma omp parallel for schedule(static) if (R * W > 16384)
        for (int64_t r = 0; r < R; ++r) {
            const int64_t b = r / G;
            const T* kown = a.k.data() + b * KVD + g * Dh;
            const T* qr = qg + r * Dh;
            T* s = S + r * W;
            double dot = 0;
            for (int64_t d = 0; d < Dh; ++d) dot += double(qr[d]) * double(kown[d]);
            s[P] = T(dot) * scale;
            T mx = s[0];
            for (int64_t j = 1; j < W; ++j) mx = std::max(mx, s[j]);
            double sum = 0;
            for (int64_t j = 0; j < W; ++j) {
                s[j] = std::exp(s[j] - mx);
                sum += double(s[j]);
            }
            const T inv = T(1.0 / sum);
            for (int64_t j = 0; j < W; ++j) s[j] *= inv;
        }
        T* og = a.og.data();
        if (P > 0)
            gemm(false, false, R, Dh, P, T(1), S, W, Vc + g * Dh, KVD, T(0), og, Dh);
        else
            std::fill(og, og + R * Dh, T(0));
        for (int64_t r = 0; r < R; ++r) {
            const int64_t b = r / G, j = r % G;
            const T pown = S[r * W + P];
            const T* vown = a.v.data() + b * KVD + g * Dh;
            T* dst = a.heads.data() + (b * H + g * G + j) * Dh;
            for (int64_t d = 0; d < Dh; ++d) dst[d] = og[r * Dh + d] + pown * vown[d];
        }
    }
}

template <typename T>
void last_position_finish(const FaWeights<T>& w, int64_t layer, T* x, int64_t n, LastPosActs<T>& a) {
    const ModelConfig& c = w.config();
    const FaLayerWeights<T>& p = w.layer(layer);
    const int64_t C = c.hidden_size, F = c.intermediate_size, HDh = c.num_heads * c.head_dim;
    a.x_mid.resize(size_t(n * C)), a.xn2.resize(size_t(n * C)), a.rstd2.resize(size_t(n));
    a.gate.resize(size_t(n * F)), a.up.resize(size_t(n * F)), a.act.resize(size_t(n * F)),
        a.proj.resize(size_t(n * C));
    cpu::linear_forward(a.proj.data(), a.heads.data(), p.wo, (const T*)nullptr, n, HDh, C);
    for (int64_t i = 0; i < n * C; ++i) a.x_mid[size_t(i)] = x[i] + a.proj[size_t(i)];
    cpu::rmsnorm_forward(a.xn2.data(), a.rstd2.data(), a.x_mid.data(), p.ffn_norm, n, C, c.rms_norm_eps);
    cpu::linear_forward(a.gate.data(), a.xn2.data(), p.w_gate, (const T*)nullptr, n, C, F);
    cpu::linear_forward(a.up.data(), a.xn2.data(), p.w_up, (const T*)nullptr, n, C, F);
    cpu::swiglu_forward(a.act.data(), a.gate.data(), a.up.data(), n * F);
    cpu::linear_forward(a.proj.data(), a.act.data(), p.w_down, (const T*)nullptr, n, F, C);
    for (int64_t i = 0; i < n * C; ++i) x[i] = a.x_mid[size_t(i)] + a.proj[size_t(i)];
}

template <typename T>
std::vector<T> last_position_sweep(const FaWeights<T>& w, const FaRun<T>& base,
                                   std::span<const PatchedCopy<T>> copies, int64_t max_batch) {
    const ModelConfig& c = w.config();
    const int64_t L = c.num_layers, C = c.hidden_size, H = c.num_heads, Dh = c.head_dim;
    HYDRA_CHECK(max_batch > 0, "patching batch size must be positive");
    const int64_t N = int64_t(copies.size());
    std::vector<int64_t> start(static_cast<size_t>(N));
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
        LastPosActs<T> acts;
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
            if (before > 0) last_position_heads(w, base, l, X.data(), before, acts);
            acts.heads.resize(size_t(active * H * Dh));
            for (int64_t b = before; b < active; ++b)
                std::memcpy(acts.heads.data() + b * H * Dh, base.heads_last(l, H * Dh),
                            size_t(H * Dh) * sizeof(T));
            for (int64_t b = 0; b < active; ++b)
                for (const auto& p : copies[size_t(ids[size_t(b)])].patches)
                    if (p.layer == l)
                        std::memcpy(acts.heads.data() + (b * H + p.head) * Dh, p.value,
                                    size_t(Dh) * sizeof(T));
            last_position_finish(w, l, X.data(), active, acts);
        }
        for (int64_t b = 0; b < B; ++b) {
            const T* src = start[size_t(ids[size_t(b)])] >= L ? base.x_final_last(C) : X.data() + b * C;
            std::memcpy(out.data() + ids[size_t(b)] * C, src, size_t(C) * sizeof(T));
        }
    });
    return out;
}

template struct PatchedCopy<float>;
template struct PatchedCopy<double>;
template void last_position_heads<float>(const FaWeights<float>&, const FaRun<float>&, int64_t, const float*,
                                         int64_t, LastPosActs<float>&);
template void last_position_heads<double>(const FaWeights<double>&, const FaRun<double>&, int64_t,
                                          const double*, int64_t, LastPosActs<double>&);
template void last_position_finish<float>(const FaWeights<float>&, int64_t, float*, int64_t,
                                          LastPosActs<float>&);
template void last_position_finish<double>(const FaWeights<double>&, int64_t, double*, int64_t,
                                           LastPosActs<double>&);
template std::vector<float> last_position_sweep<float>(const FaWeights<float>&, const FaRun<float>&,
                                                       std::span<const PatchedCopy<float>>, int64_t);
template std::vector<double> last_position_sweep<double>(const FaWeights<double>&, const FaRun<double>&,
                                                         std::span<const PatchedCopy<double>>, int64_t);

}  // namespace hydra
