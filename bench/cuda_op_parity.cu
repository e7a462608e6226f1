// Op parity of the CUDA kernels against the CPU reference (float): GDN chunked forward (saving and plain; the
// checked forward runs after another on the same workspace) and backward
// (with the in-kernel L2 norm of q/k, grouped value heads, initial and final states), the GDN decode
// step, and causal GQA attention forward and backward. Fresh random inputs every run (seed printed;
// --seed N repeats one), odd lengths (T not a multiple of 64), outputs poisoned with NaN before each
// call so unwritten elements fail. Metric: relative RMS error ||gpu - ref|| / ||ref|| per output,
// tolerance 1e-2 for the bf16 paths (DESIGN.md §3), 2e-2 for the GDN's dg and dbeta (kTolReduced below).
// Prints a table; exit status 1 on any failure.
//
// Usage: cuda_op_parity [--seed N] [--quick] [--only gdn|decode|attn] [--scan N]
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/cpu/attention.h"
#include "ops/cpu/gdn_recurrence.h"
#include "ops/cpu/l2norm.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gdn_scan_policy.h"

using hydra::cuda::bf16;

namespace {

constexpr double kTol = 1e-2;
// The GDN's dg and dbeta: each is a sum over the chunk of terms much larger than itself, formed from bf16
// operands (dg a suffix sum of per-position terms within the chunk, gdn.md §3.2), so a short draw whose
// terms cancel divides an ordinary absolute error by a small norm. Seen on the H200 at B1 T37 D128: dbeta
// 1.573e-2 (seed 1796144789136348116; the float reference agreed with double to 2.3e-7, the case's dbeta
// norm 2.5 times below the other T37 draw's: docs/BENCHMARKS.md) and dg 1.199e-2 (seed 1796198865985358165,
// the same in eight runs on three builds: docs/results/gdn_twelfth_pass/callBM), every other output of
// those cases under 5e-3. flash-linear-attention's test of the same op uses this metric
// with 0.02 for dg and dbeta (tests/ops/test_gdn.py), 0.008 for dq, dk, dv.
constexpr double kTolReduced = 2e-2;

struct Row {
    std::string op, shape, out;
    double err;
    bool nan;
    bool pass;
};
std::vector<Row> g_rows;

double rel_rms(const std::vector<float>& got, const std::vector<float>& ref, bool* nan) {
    double num = 0, den = 0;
    *nan = false;
    for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(got[i])) *nan = true;
        const double d = double(got[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void record(const std::string& op, const std::string& shape, const std::string& out, const std::vector<float>& got,
            const std::vector<float>& ref, double tol = kTol) {
    bool nan = false;
    const double e = rel_rms(got, ref, &nan);
    const bool pass = !nan && e <= tol;
    g_rows.push_back({op, shape, out, e, nan, pass});
    std::printf("  %-22s %-28s %-7s rel_rms %.3e %s", op.c_str(), shape.c_str(), out.c_str(), e,
                nan ? "NaN/unwritten" : (pass ? "ok" : "FAIL"));
    if (tol != kTol) std::printf(" (tolerance %.0e)", tol);
    std::printf("\n");
    std::fflush(stdout);
}

struct Rng {
    std::mt19937_64 gen;
    std::normal_distribution<float> nd{0.f, 1.f};
    explicit Rng(uint64_t s) : gen(s) {}
    float normal() { return nd(gen); }
};

// Random values rounded to bf16 (so the CPU sees exactly what the GPU reads).
std::vector<float> bf16_values(size_t n, Rng& r, float scale = 1.f) {
    std::vector<float> v(n);
    for (auto& x : v) x = __bfloat162float(__float2bfloat16(scale * r.normal()));
    return v;
}

template <typename T>
struct Dev {
    T* p = nullptr;
    size_t n = 0;
    explicit Dev(size_t n_) : n(n_) { CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); poison(); }
    ~Dev() {
        if (cudaFree(p) != cudaSuccess) std::printf("warning: cudaFree failed\n");
    }
    void poison() { CUDA_CHECK(cudaMemset(p, 0xFF, n * sizeof(T))); }  // NaN in bf16 and fp32
    Dev(const Dev&) = delete;
};

Dev<bf16>* up_bf16(const std::vector<float>& v) {
    std::vector<bf16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = __float2bfloat16(v[i]);
    auto* d = new Dev<bf16>(v.size());
    CUDA_CHECK(cudaMemcpy(d->p, h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    return d;
}
Dev<float>* up_f32(const std::vector<float>& v) {
    auto* d = new Dev<float>(v.size());
    CUDA_CHECK(cudaMemcpy(d->p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
std::vector<float> down(const Dev<bf16>& d) {
    std::vector<bf16> h(d.n);
    CUDA_CHECK(cudaMemcpy(h.data(), d.p, d.n * sizeof(bf16), cudaMemcpyDeviceToHost));
    std::vector<float> v(d.n);
    for (size_t i = 0; i < d.n; ++i) v[i] = __bfloat162float(h[i]);
    return v;
}
std::vector<float> down(const Dev<float>& d) {
    std::vector<float> v(d.n);
    CUDA_CHECK(cudaMemcpy(v.data(), d.p, d.n * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
}

// ---- GDN chunked forward + backward -----------------------------------------------------------------

// scan_variant >= 0 forces that state-scan variant (gdn_set_scan_variant) for this case. l2norm = false
// runs the kernels without the q/k L2 norm, on rows scaled by a power of two (exact in bf16) to norms
// near 1, where the delta rule stays stable.
void gdn_case(int B, int T, int H, int HV, int D, Rng& rng, int scan_variant = -1, bool l2norm = true) {
    const std::string shape =
        "B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + " HV" +
        std::to_string(HV) + " D" + std::to_string(D) +
        (scan_variant >= 0 ? hydra::cuda::gdn_scan_fits(scan_variant, D)
                                 ? " scan " + std::to_string(scan_variant)
                                 : " scan " + std::to_string(scan_variant) + " (too tall: auto)"
                           : "") +
        (l2norm ? "" : " no-norm");
    hydra::cuda::gdn_set_scan_variant(scan_variant);
    const size_t nq = size_t(B) * T * H * D, nv = size_t(B) * T * HV * D, ng = size_t(B) * T * HV,
                 ns = size_t(B) * HV * D * D;
    auto q = bf16_values(nq, rng), k = bf16_values(nq, rng), v = bf16_values(nv, rng), dout = bf16_values(nv, rng);
    if (!l2norm) {
        const float f = D >= 128 ? 1.f / 16 : 1.f / 8;
        for (auto& x : q) x *= f;
        for (auto& x : k) x *= f;
    }
    std::vector<float> g(ng), beta(ng), h0(ns), dht(ns);
    for (size_t i = 0; i < ng; ++i) {
        const int j = int(i % HV);
        const float s = j % 3 == 0 ? 1.0f : (j % 3 == 1 ? 0.3f : 0.05f);  // strong .. weak decay per head
        const float x = rng.normal();
        g[i] = -s * std::log1p(std::exp(-x));  // s * logsigmoid(x) <= 0
        beta[i] = 1.f / (1.f + std::exp(-rng.normal()));
    }
    for (auto& x : h0) x = 0.5f * rng.normal();
    for (auto& x : dht) x = 0.1f * rng.normal();
    const float scale = 1.f / std::sqrt(float(D));

    // CPU reference, one sequence at a time
    std::vector<float> o_ref(nv), ht_ref(ns), dq_ref(nq), dk_ref(nq), dv_ref(nv), dg_ref(ng), db_ref(ng), dh0_ref(ns);
    const auto t_cpu = std::chrono::steady_clock::now();
    for (int b = 0; b < B; ++b) {
        const size_t oq = size_t(b) * T * H * D, ov = size_t(b) * T * HV * D, og = size_t(b) * T * HV,
                     os = size_t(b) * HV * D * D;
        const int64_t rows = int64_t(T) * H;
        std::vector<float> qn(size_t(rows) * D), kn(qn.size()), rq(static_cast<size_t>(rows)), rk(static_cast<size_t>(rows));
        if (l2norm) {
            hydra::cpu::l2norm_forward<float>(qn.data(), rq.data(), q.data() + oq, rows, D);
            hydra::cpu::l2norm_forward<float>(kn.data(), rk.data(), k.data() + oq, rows, D);
        } else {
            std::copy(q.begin() + oq, q.begin() + oq + qn.size(), qn.begin());
            std::copy(k.begin() + oq, k.begin() + oq + kn.size(), kn.begin());
        }
        const hydra::cpu::GdnDims dims{T, H, HV, D, D};
        std::vector<float> states(size_t(hydra::cpu::gdn_chunk_states_numel(dims, 64)));
        hydra::cpu::gdn_chunked_forward<float>(o_ref.data() + ov, ht_ref.data() + os, states.data(), qn.data(),
                                               kn.data(), v.data() + ov, g.data() + og, beta.data() + og,
                                               h0.data() + os, dims, scale, 64);
        std::vector<float> dqn(qn.size()), dkn(qn.size());
        hydra::cpu::gdn_chunked_backward<float>(dqn.data(), dkn.data(), dv_ref.data() + ov, dg_ref.data() + og,
                                                db_ref.data() + og, dh0_ref.data() + os, dout.data() + ov,
                                                dht.data() + os, qn.data(), kn.data(), v.data() + ov, g.data() + og,
                                                beta.data() + og, h0.data() + os, states.data(), dims, scale, 64);
        if (l2norm) {
            hydra::cpu::l2norm_backward<float>(dq_ref.data() + oq, dqn.data(), qn.data(), rq.data(), rows, D);
            hydra::cpu::l2norm_backward<float>(dk_ref.data() + oq, dkn.data(), kn.data(), rk.data(), rows, D);
        } else {
            std::copy(dqn.begin(), dqn.end(), dq_ref.begin() + oq);
            std::copy(dkn.begin(), dkn.end(), dk_ref.begin() + oq);
        }
    }
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_cpu).count();

    std::unique_ptr<Dev<bf16>> dq_(up_bf16(q)), dk_(up_bf16(k)), dv_(up_bf16(v)), ddo(up_bf16(dout));
    std::unique_ptr<Dev<float>> dg_(up_f32(g)), db_(up_f32(beta)), dh0_(up_f32(h0)), ddht(up_f32(dht));
    Dev<bf16> o(nv), gq(nq), gk(nq), gv(nv);
    Dev<float> ht(ns), gg(ng), gb(ng), gh0(ns);
    const hydra::cuda::GdnShape s{B, T, H, HV, D};
    hydra::cuda::GdnWorkspace ws(s, true);
    // a first forward on the same workspace with q and k swapped (other W, U, P): the one checked below must
    // not read anything it left behind (at d 64 the streamed forward's scan clears its per-chunk flags)
    hydra::cuda::gdn_chunk_forward(s, dk_->p, dq_->p, dv_->p, dg_->p, db_->p, dh0_->p, o.p, ht.p, scale,
                                   l2norm, true, ws);
    o.poison();
    ht.poison();
    hydra::cuda::gdn_chunk_forward(s, dq_->p, dk_->p, dv_->p, dg_->p, db_->p, dh0_->p, o.p, ht.p, scale,
                                   l2norm, true, ws);
    hydra::cuda::gdn_chunk_backward(s, dq_->p, dk_->p, dv_->p, dg_->p, db_->p, ddo->p, ddht->p, gq.p, gk.p,
                                    gv.p, gg.p, gb.p, gh0.p, scale, l2norm, ws);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("gdn chunk %s (cpu reference %.1f s)\n", shape.c_str(), cpu_s);
    record("gdn_chunk fwd", shape, "o", down(o), o_ref);
    record("gdn_chunk fwd", shape, "ht", down(ht), ht_ref);
    record("gdn_chunk bwd", shape, "dq", down(gq), dq_ref);
    record("gdn_chunk bwd", shape, "dk", down(gk), dk_ref);
    record("gdn_chunk bwd", shape, "dv", down(gv), dv_ref);
    record("gdn_chunk bwd", shape, "dg", down(gg), dg_ref, kTolReduced);
    record("gdn_chunk bwd", shape, "dbeta", down(gb), db_ref, kTolReduced);
    record("gdn_chunk bwd", shape, "dh0", down(gh0), dh0_ref);
    // the plain forward (save = false: the scan instantiations inference and the benchmarks run, the
    // tile-copy scan among them), on the same workspace after the saving forward
    o.poison();
    ht.poison();
    hydra::cuda::gdn_chunk_forward(s, dq_->p, dk_->p, dv_->p, dg_->p, db_->p, dh0_->p, o.p, ht.p, scale,
                                   l2norm, false, ws);
    CUDA_CHECK(cudaDeviceSynchronize());
    record("gdn_chunk fwd plain", shape, "o", down(o), o_ref);
    record("gdn_chunk fwd plain", shape, "ht", down(ht), ht_ref);
}

// ---- GDN decode step ----------------------------------------------------------------------------------

void decode_case(int B, int H, int HV, int D, Rng& rng) {
    const std::string shape = "B" + std::to_string(B) + " H" + std::to_string(H) + " HV" + std::to_string(HV) + " D" +
                              std::to_string(D);
    const size_t nq = size_t(B) * H * D, nv = size_t(B) * HV * D, ng = size_t(B) * HV, ns = size_t(B) * HV * D * D;
    auto q = bf16_values(nq, rng), k = bf16_values(nq, rng), v = bf16_values(nv, rng);
    std::vector<float> g(ng), beta(ng), st(ns);
    for (size_t i = 0; i < ng; ++i) {
        g[i] = -0.5f * std::log1p(std::exp(-rng.normal()));
        beta[i] = 1.f / (1.f + std::exp(-rng.normal()));
    }
    for (auto& x : st) x = rng.normal();
    const float scale = 1.f / std::sqrt(float(D));
    std::vector<float> o_ref(nv), st_ref(ns);
    for (int b = 0; b < B; ++b) {
        std::vector<float> qn(size_t(H) * D), kn(qn.size()), r(static_cast<size_t>(H));
        hydra::cpu::l2norm_forward<float>(qn.data(), r.data(), q.data() + size_t(b) * H * D, H, D);
        hydra::cpu::l2norm_forward<float>(kn.data(), r.data(), k.data() + size_t(b) * H * D, H, D);
        const hydra::cpu::GdnDims dims{1, H, HV, D, D};
        hydra::cpu::gdn_recurrent_forward<float>(o_ref.data() + size_t(b) * HV * D, st_ref.data() + size_t(b) * HV * D * D,
                                                 qn.data(), kn.data(), v.data() + size_t(b) * HV * D,
                                                 g.data() + size_t(b) * HV, beta.data() + size_t(b) * HV,
                                                 st.data() + size_t(b) * HV * D * D, dims, scale);
    }
    std::unique_ptr<Dev<bf16>> dq(up_bf16(q)), dk(up_bf16(k)), dv(up_bf16(v));
    std::unique_ptr<Dev<float>> dg(up_f32(g)), db(up_f32(beta)), dst(up_f32(st));
    Dev<bf16> o(nv);
    Dev<float> out(ns);
    hydra::cuda::gdn_decode_step(B, H, HV, D, dq->p, dk->p, dv->p, dg->p, db->p, dst->p, out.p, o.p, scale, true);
    CUDA_CHECK(cudaDeviceSynchronize());
    record("gdn_decode", shape, "o", down(o), o_ref);
    record("gdn_decode", shape, "state", down(out), st_ref);
    // in place (state_out == state_in)
    hydra::cuda::gdn_decode_step(B, H, HV, D, dq->p, dk->p, dv->p, dg->p, db->p, dst->p, dst->p, o.p, scale, true);
    CUDA_CHECK(cudaDeviceSynchronize());
    record("gdn_decode in-place", shape, "state", down(*dst), st_ref);
}

// ---- attention -----------------------------------------------------------------------------------------

void attn_case(int B, int T, int H, int Hkv, int D, Rng& rng) {
    const std::string shape = "B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + " Hkv" +
                              std::to_string(Hkv) + " D" + std::to_string(D);
    const size_t nq = size_t(B) * T * H * D, nk = size_t(B) * T * Hkv * D;
    auto q = bf16_values(nq, rng), k = bf16_values(nk, rng), v = bf16_values(nk, rng), dout = bf16_values(nq, rng);
    const float scale = 1.f / std::sqrt(float(D));
    std::vector<float> o_ref(nq), dq_ref(nq), dk_ref(nk), dv_ref(nk);
    const auto t_cpu = std::chrono::steady_clock::now();
    for (int b = 0; b < B; ++b) {
        const size_t oq = size_t(b) * T * H * D, ok = size_t(b) * T * Hkv * D;
        hydra::cpu::causal_attention_forward<float>(o_ref.data() + oq, nullptr, q.data() + oq, k.data() + ok,
                                                    v.data() + ok, T, 0, H, Hkv, D, scale);
        hydra::cpu::causal_attention_backward<float>(dq_ref.data() + oq, dk_ref.data() + ok, dv_ref.data() + ok,
                                                     dout.data() + oq, q.data() + oq, k.data() + ok, v.data() + ok,
                                                     nullptr, T, H, Hkv, D, scale);
    }
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_cpu).count();
    std::unique_ptr<Dev<bf16>> dq(up_bf16(q)), dk(up_bf16(k)), dv(up_bf16(v)), ddo(up_bf16(dout));
    Dev<bf16> o(nq), gq(nq), gk(nk), gv(nk);
    Dev<float> lse(size_t(B) * H * T);
    const hydra::cuda::AttnShape s{B, T, H, Hkv, D};
    hydra::cuda::AttnWorkspace ws(s);
    hydra::cuda::attention_forward(s, dq->p, dk->p, dv->p, o.p, lse.p, scale);
    hydra::cuda::attention_backward(s, dq->p, dk->p, dv->p, o.p, lse.p, ddo->p, gq.p, gk.p, gv.p, scale, ws);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::printf("attention %s (cpu reference %.1f s)\n", shape.c_str(), cpu_s);
    record("attention fwd", shape, "o", down(o), o_ref);
    record("attention bwd", shape, "dq", down(gq), dq_ref);
    record("attention bwd", shape, "dk", down(gk), dk_ref);
    record("attention bwd", shape, "dv", down(gv), dv_ref);
    // the forward kernel built for the other register budget (1 or 2 resident blocks per SM)
    hydra::cuda::attention_set_fwd_blocks_per_sm(1);
    o.poison();
    hydra::cuda::attention_forward(s, dq->p, dk->p, dv->p, o.p, lse.p, scale);
    CUDA_CHECK(cudaDeviceSynchronize());
    hydra::cuda::attention_set_fwd_blocks_per_sm(0);
    record("attention fwd alt-regs", shape, "o", down(o), o_ref);

    // cuDNN's fused attention (the training step's default where it loads): same references; its stats are
    // the natural-log LSE, so stats * log2(e) must match our kernel's base-2 lse
    static hydra::cuda::CudnnAttention cudnn_attn;
    if (!cudnn_attn.supports(s)) {
        std::printf("attention cudnn %s: not run (%s)\n", shape.c_str(), cudnn_attn.reason().c_str());
        return;
    }
    const std::vector<float> lse_own = down(lse);
    o.poison();
    gq.poison();
    gk.poison();
    gv.poison();
    lse.poison();
    cudnn_attn.forward(s, dq->p, dk->p, dv->p, o.p, lse.p, scale, nullptr);
    cudnn_attn.backward(s, dq->p, dk->p, dv->p, o.p, lse.p, ddo->p, gq.p, gk.p, gv.p, scale, ws, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> stats2 = down(lse);
    for (float& x : stats2) x *= 1.4426950408889634f;
    record("attention cudnn fwd", shape, "o", down(o), o_ref);
    record("attention cudnn fwd", shape, "stats", stats2, lse_own);
    record("attention cudnn bwd", shape, "dq", down(gq), dq_ref);
    record("attention cudnn bwd", shape, "dk", down(gk), dk_ref);
    record("attention cudnn bwd", shape, "dv", down(gv), dv_ref);

    // the training step's fused layout: q|k|v as columns of one (B T, (H + 2 Hkv) D) row, read strided, and
    // dq|dk|dv written into the same layout (AttnShape::ld_qkv)
    hydra::cuda::AttnShape sf = s;
    sf.ld_qkv = (H + 2 * Hkv) * D;
    if (!cudnn_attn.supports(sf)) {
        std::printf("attention cudnn fused-qkv %s: not run (%s)\n", shape.c_str(),
                    cudnn_attn.reason().c_str());
        return;
    }
    const size_t ld = size_t(sf.ld_qkv), rows = size_t(B) * T;
    std::vector<float> qkv(rows * ld);
    for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < size_t(H) * D; ++c) qkv[r * ld + c] = q[r * H * D + c];
    for (size_t r = 0; r < rows; ++r)
        for (size_t c = 0; c < size_t(Hkv) * D; ++c) {
            qkv[r * ld + size_t(H) * D + c] = k[r * Hkv * D + c];
            qkv[r * ld + size_t(H + Hkv) * D + c] = v[r * Hkv * D + c];
        }
    std::unique_ptr<Dev<bf16>> dqkv(up_bf16(qkv));
    Dev<bf16> gqkv(rows * ld);
    o.poison();
    lse.poison();
    const bf16* fq = dqkv->p;
    cudnn_attn.forward(sf, fq, fq + H * D, fq + (H + Hkv) * D, o.p, lse.p, scale, nullptr);
    cudnn_attn.backward(sf, fq, fq + H * D, fq + (H + Hkv) * D, o.p, lse.p, ddo->p, gqkv.p, gqkv.p + H * D,
                        gqkv.p + (H + Hkv) * D, scale, ws, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> g = down(gqkv);
    std::vector<float> fdq(nq), fdk(nk), fdv(nk);
    for (size_t r = 0; r < rows; ++r) {
        for (size_t c = 0; c < size_t(H) * D; ++c) fdq[r * H * D + c] = g[r * ld + c];
        for (size_t c = 0; c < size_t(Hkv) * D; ++c) {
            fdk[r * Hkv * D + c] = g[r * ld + size_t(H) * D + c];
            fdv[r * Hkv * D + c] = g[r * ld + size_t(H + Hkv) * D + c];
        }
    }
    record("attention cudnn fused-qkv fwd", shape, "o", down(o), o_ref);
    record("attention cudnn fused-qkv bwd", shape, "dq", fdq, dq_ref);
    record("attention cudnn fused-qkv bwd", shape, "dk", fdk, dk_ref);
    record("attention cudnn fused-qkv bwd", shape, "dv", fdv, dv_ref);
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    // --scan N: the variant of the forced-scan GDN cases (0 to kGdnScanVariants - 1, gdn_scan_policy.h); 7,
    // the 64-row 16-warp scans that d 128 runs with many (sequence, head) pairs, which the small cases here
    // never reach on their own
    int forced_scan = 7;
    bool quick = false;
    std::string only;  // --only gdn|decode|attn: one op family
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
        if (!std::strcmp(argv[i], "--scan") && i + 1 < argc) {
            const char* v = argv[++i];
            if (std::strlen(v) != 1 || v[0] < '0' || v[0] - '0' >= hydra::cuda::kGdnScanVariants) {
                std::printf("--scan: expected a scan variant 0 to %d, got '%s'\n",
                            hydra::cuda::kGdnScanVariants - 1, v);
                return 2;
            }
            forced_scan = v[0] - '0';
        } else if (!std::strcmp(argv[i], "--quick"))
            quick = true;
        else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    }
    auto want = [&](const char* family) { return only.empty() || only == family; };
    std::printf(
        "cuda_op_parity: seed %llu, tolerance %.0e (GDN dg, dbeta %.0e; relative RMS vs the CPU float "
        "reference)\n",
        (unsigned long long)seed, kTol, kTolReduced);
    {
        const auto& cudnn = hydra::cuda::cudnn_library();
        std::printf("cuDNN: %s\n", cudnn.loaded ? ("version " + std::to_string(cudnn.version)).c_str()
                                                 : cudnn.why.c_str());
    }
    Rng rng(seed);
    try {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
        std::printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
        if (want("gdn")) {
            gdn_case(2, 1000, 2, 4, 64, rng);    // grouped value heads, partial last chunk
            gdn_case(1, 4100, 2, 2, 128, rng);   // long, partial last chunk
            gdn_case(1, 37, 1, 1, 128, rng);     // one partial chunk
            if (!quick) gdn_case(3, 130, 3, 3, 64, rng);
            // many (sequence, head) pairs: the scans' 32-row variants (one wave double-buffered; more
            // blocks than SMs single-buffered)
            gdn_case(2, 300, 16, 16, 128, rng);
            gdn_case(3, 333, 6, 12, 128, rng);
            gdn_case(8, 200, 9, 9, 64, rng);
            // the forced variant (by default the 64-row, 16-warp scans) on head shapes of every kind above
            gdn_case(2, 300, 16, 16, 128, rng, forced_scan);
            gdn_case(2, 1000, 2, 4, 64, rng, forced_scan);
            gdn_case(1, 37, 1, 1, 128, rng, forced_scan);
            gdn_case(3, 333, 6, 12, 128, rng, forced_scan);
            // without the q/k L2 norm (one value head per key head, and grouped: the finishing pass)
            gdn_case(2, 300, 4, 4, 128, rng, -1, false);
            gdn_case(2, 1000, 2, 4, 64, rng, -1, false);
            hydra::cuda::gdn_set_scan_variant(-1);
        }
        if (want("decode")) {
            decode_case(3, 2, 4, 64, rng);
            decode_case(5, 2, 2, 128, rng);
        }
        if (want("attn")) {
            attn_case(2, 1000, 4, 2, 64, rng);   // GQA, T not a multiple of the tiles
            attn_case(1, 4100, 2, 1, 128, rng);
            if (!quick) attn_case(1, 77, 3, 3, 128, rng);
            attn_case(2, 333, 9, 3, 64, rng);    // SmolLM2's grouping (3 query heads per KV head)
        }
    } catch (const std::exception& e) {
        std::printf("ERROR: %s\n", e.what());
        return 2;
    }
    int fails = 0;
    std::printf("\n%-22s %-28s %-7s %12s  %s\n", "op", "shape", "output", "rel_rms", "result");
    for (const auto& r : g_rows) {
        std::printf("%-22s %-28s %-7s %12.3e  %s\n", r.op.c_str(), r.shape.c_str(), r.out.c_str(), r.err,
                    r.nan ? "FAIL (NaN/unwritten)" : (r.pass ? "pass" : "FAIL"));
        fails += r.pass ? 0 : 1;
    }
    std::printf("%d passed, %d failed\n", int(g_rows.size()) - fails, fails);
    return fails ? 1 : 0;
}
