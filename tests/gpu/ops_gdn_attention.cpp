// GPU parity of the sequence mixers: the GDN chunked forward and backward (ops/cuda/gdn_chunk.h), the GDN
// decode step, and causal GQA attention forward and backward (ops/cuda/attention.h, cudnn_attention.h; with
// per-head sliding windows also the decode kernel, gpu/decode_attention.h)
// against the CPU float references (ops/cpu/gdn_recurrence.h, l2norm.h, attention.h); the GDN backward and
// the deterministic attention backwards (ours, cuDNN's) run again on the same inputs must give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/gemm.h"
#include "device_io.h"
#include "gpu/decode_attention.h"
#include "op_case.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/gdn_recurrence.h"
#include "ops/cpu/l2norm.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gdn_scan_policy.h"
#include "parity.h"

namespace hydra::gputest {

namespace {

// The GDN's dg and dbeta: each is a sum over the chunk of terms much larger than itself, formed from bf16
// operands (dg a suffix sum of per-position terms within the chunk, gdn.md §3.2), so a short draw whose
// terms cancel divides an ordinary absolute error by a small norm (seen on the H200 at B1 T37 D128: dbeta
// 1.6e-2 and dg 1.2e-2 with every other output under 5e-3, the float reference agreeing with double to
// 2e-7). flash-linear-attention's test of the same op uses this metric with 0.02 for dg and dbeta
// (tests/ops/test_gdn.py), 0.008 for dq, dk, dv.
constexpr double kTolGdnReduced = 2e-2;

void run_gdn_chunk(const GdnChunkShape& sh, Rng& rng) {
    const int B = sh.B, T = sh.T, H = sh.H, HV = sh.HV, D = sh.D;
    const bool l2norm = sh.l2norm;
    const size_t pairs = size_t(B) * HV;
    std::printf("device %s; scan variant %d by the policy (%zu pairs)\n", device_name().c_str(),
                cuda::gdn_scan_variant_for(D, pairs, device_sms()), pairs);
    const size_t nq = size_t(B) * T * H * D, nv = size_t(B) * T * HV * D, ng = size_t(B) * T * HV,
                 ns = size_t(B) * HV * D * D;
    auto q = bf16_values(nq, rng), k = bf16_values(nq, rng), v = bf16_values(nv, rng),
         dout = bf16_values(nv, rng);
    if (sh.silu_qk)
        for (auto* x : {&q, &k})
            for (auto& e : *x) {
                const float a = 1.f + rng.normal();
                e = round_bf16(a / (1.f + std::exp(-a)));
            }
    if (!l2norm) {  // rows scaled by a power of two (exact in bf16) to norms near 1: the delta rule stays
                    // stable
        const float f = D >= 128 ? 1.f / 16 : 1.f / 8;
        for (auto& x : q) x *= f;
        for (auto& x : k) x *= f;
    }
    std::vector<float> g(ng), beta(ng), h0(ns), dht(ns);
    for (size_t i = 0; i < ng; ++i) {
        const int j = int(i % size_t(HV));
        const float s = j % 3 == 0 ? 1.0f : (j % 3 == 1 ? 0.3f : 0.05f);  // strong .. weak decay per head
        const float x = rng.normal();
        g[i] = -s * std::log1p(std::exp(-x));  // s * logsigmoid(x) <= 0
        beta[i] = 1.f / (1.f + std::exp(-rng.normal()));
    }
    for (auto& x : h0) x = 0.5f * rng.normal();
    for (auto& x : dht) x = 0.1f * rng.normal();
    const float scale = 1.f / std::sqrt(float(D));

    // CPU reference, one sequence at a time; with bf16 on, every product's operands rounded to bf16 as the
    // GPU's tensor cores read them (core/gemm.h set_gemm_bf16_rounding): that run's distance from the fp32
    // one is the floor the GPU's error is printed against (how far above it a case sits says whether the
    // kernel or the inputs' conditioning is the cause)
    struct Ref {
        std::vector<float> o, ht, dq, dk, dv, dg, db, dh0;
    };
    auto cpu_reference = [&](bool bf16) {
        set_gemm_bf16_rounding(bf16);
        Ref r{std::vector<float>(nv), std::vector<float>(ns), std::vector<float>(nq), std::vector<float>(nq),
              std::vector<float>(nv), std::vector<float>(ng), std::vector<float>(ng), std::vector<float>(ns)};
        for (int b = 0; b < B; ++b) {
            const size_t oq = size_t(b) * T * H * D, ov = size_t(b) * T * HV * D, og = size_t(b) * T * HV,
                         os = size_t(b) * HV * D * D;
            const int64_t rows = int64_t(T) * H;
            std::vector<float> qn(size_t(rows) * D), kn(qn.size()), rq(static_cast<size_t>(rows)),
                rk(static_cast<size_t>(rows));
            if (l2norm) {
                cpu::l2norm_forward<float>(qn.data(), rq.data(), q.data() + oq, rows, D);
                cpu::l2norm_forward<float>(kn.data(), rk.data(), k.data() + oq, rows, D);
            } else {
                std::copy(q.begin() + long(oq), q.begin() + long(oq + qn.size()), qn.begin());
                std::copy(k.begin() + long(oq), k.begin() + long(oq + kn.size()), kn.begin());
            }
            const cpu::GdnDims dims{T, H, HV, D, D};
            std::vector<float> states(size_t(cpu::gdn_chunk_states_numel(dims, 64)));
            cpu::gdn_chunked_forward<float>(r.o.data() + ov, r.ht.data() + os, states.data(), qn.data(),
                                            kn.data(), v.data() + ov, g.data() + og, beta.data() + og,
                                            h0.data() + os, dims, scale, 64);
            std::vector<float> dqn(qn.size()), dkn(qn.size());
            cpu::gdn_chunked_backward<float>(
                dqn.data(), dkn.data(), r.dv.data() + ov, r.dg.data() + og, r.db.data() + og,
                r.dh0.data() + os, dout.data() + ov, dht.data() + os, qn.data(), kn.data(), v.data() + ov,
                g.data() + og, beta.data() + og, h0.data() + os, states.data(), dims, scale, 64);
            if (l2norm) {
                cpu::l2norm_backward<float>(r.dq.data() + oq, dqn.data(), qn.data(), rq.data(), rows, D);
                cpu::l2norm_backward<float>(r.dk.data() + oq, dkn.data(), kn.data(), rk.data(), rows, D);
            } else {
                std::copy(dqn.begin(), dqn.end(), r.dq.begin() + long(oq));
                std::copy(dkn.begin(), dkn.end(), r.dk.begin() + long(oq));
            }
        }
        set_gemm_bf16_rounding(false);
        return r;
    };
    const Ref ref = cpu_reference(false), floor = cpu_reference(true);
    const std::vector<float>&o_ref = ref.o, &ht_ref = ref.ht, &dq_ref = ref.dq, &dk_ref = ref.dk,
          &dv_ref = ref.dv, &dg_ref = ref.dg, &db_ref = ref.db, &dh0_ref = ref.dh0;

    auto dq = dev_bf16(q), dk = dev_bf16(k), dv = dev_bf16(v), ddo = dev_bf16(dout);
    auto dg = dev_f32(g), db = dev_f32(beta), dh0 = dev_f32(h0), ddht = dev_f32(dht);
    Dev<bf16> o{int64_t(nv)}, gq{int64_t(nq)}, gk{int64_t(nq)}, gv{int64_t(nv)};
    Dev<float> ht{int64_t(ns)}, gg{int64_t(ng)}, gb{int64_t(ng)}, gh0{int64_t(ns)};
    const cuda::GdnShape s{B, T, H, HV, D};
    cuda::GdnWorkspace ws(s, true);
    // a first forward on the same workspace with q and k swapped (other W, U, P): the one checked below must
    // not read anything it left behind (at d 64 the streamed forward's scan clears its per-chunk flags)
    cuda::gdn_chunk_forward(s, dk.p(), dq.p(), dv.p(), dg.p(), db.p(), dh0.p(), o.p(), ht.p(), scale, l2norm,
                            true, ws);
    o.poison();
    ht.poison();
    cuda::gdn_chunk_forward(s, dq.p(), dk.p(), dv.p(), dg.p(), db.p(), dh0.p(), o.p(), ht.p(), scale, l2norm,
                            true, ws);
    cuda::gdn_chunk_backward(s, dq.p(), dk.p(), dv.p(), dg.p(), db.p(), ddo.p(), ddht.p(), gq.p(), gk.p(),
                             gv.p(), gg.p(), gb.p(), gh0.p(), scale, l2norm, ws);
    expect_rel("gdn_chunk fwd o", host(o), o_ref, kTolBf16);
    expect_rel("gdn_chunk fwd ht", host(ht), ht_ref, kTolBf16);
    expect_rel("gdn_chunk bwd dq", host(gq), dq_ref, kTolBf16);
    expect_rel("gdn_chunk bwd dk", host(gk), dk_ref, kTolBf16);
    expect_rel("gdn_chunk bwd dv", host(gv), dv_ref, kTolBf16);
    expect_rel("gdn_chunk bwd dg", host(gg), dg_ref, kTolGdnReduced);
    {  // the GPU's error against the CPU's own bf16-operand floor, each output
        const std::pair<const char*, std::vector<float>> got[] = {
            {"dq", host(gq)}, {"dk", host(gk)}, {"dv", host(gv)}, {"dg", host(gg)}, {"dbeta", host(gb)}};
        const std::vector<float>* refs[] = {&dq_ref, &dk_ref, &dv_ref, &dg_ref, &db_ref};
        const std::vector<float>* floors[] = {&floor.dq, &floor.dk, &floor.dv, &floor.dg, &floor.db};
        for (size_t i = 0; i < std::size(got); ++i) {
            const double e = rel_rms(got[i].second, *refs[i]).value, f = rel_rms(*floors[i], *refs[i]).value;
            std::printf("  gdn_chunk bwd %-6s GPU rel %.3e, CPU bf16-operand floor %.3e (%.1fx)\n",
                        got[i].first, e, f, f > 0 ? e / f : 0.0);
        }
    }
    expect_rel("gdn_chunk bwd dbeta", host(gb), db_ref, kTolGdnReduced);
    expect_rel("gdn_chunk bwd dh0", host(gh0), dh0_ref, kTolBf16);
    // the backward again on the same inputs, twice: the same bits (its sums over warps have a fixed order;
    // with shared-memory atomics they varied from run to run, and so the training step)
    {
        const std::vector<float> hq = host(gq), hk = host(gk), hv = host(gv), hg = host(gg), hb = host(gb),
                                 hh0 = host(gh0);
        for (int rep = 1; rep <= 2; ++rep) {
            Dev<bf16> rq{int64_t(nq)}, rk{int64_t(nq)}, rv{int64_t(nv)};
            Dev<float> rg{int64_t(ng)}, rb{int64_t(ng)}, rh0{int64_t(ns)};
            cuda::gdn_chunk_backward(s, dq.p(), dk.p(), dv.p(), dg.p(), db.p(), ddo.p(), ddht.p(), rq.p(),
                                     rk.p(), rv.p(), rg.p(), rb.p(), rh0.p(), scale, l2norm, ws);
            const std::string what =
                "gdn_chunk bwd repeated (" + std::to_string(rep) + "): differing elements of ";
            expect_exact(what + "dq", bit_mismatches(host(rq), hq));
            expect_exact(what + "dk", bit_mismatches(host(rk), hk));
            expect_exact(what + "dv", bit_mismatches(host(rv), hv));
            expect_exact(what + "dg", bit_mismatches(host(rg), hg));
            expect_exact(what + "dbeta", bit_mismatches(host(rb), hb));
            expect_exact(what + "dh0", bit_mismatches(host(rh0), hh0));
        }
    }
    // the plain forward (save = false: the scan instantiations inference and the benchmarks run, the
    // tile-copy scan among them), on the same workspace after the saving forward
    o.poison();
    ht.poison();
    cuda::gdn_chunk_forward(s, dq.p(), dk.p(), dv.p(), dg.p(), db.p(), dh0.p(), o.p(), ht.p(), scale, l2norm,
                            false, ws);
    expect_rel("gdn_chunk fwd plain o", host(o), o_ref, kTolBf16);
    expect_rel("gdn_chunk fwd plain ht", host(ht), ht_ref, kTolBf16);
}

void run_gdn_decode(int B, int H, int HV, int D, Rng& rng) {
    const size_t nq = size_t(B) * H * D, nv = size_t(B) * HV * D, ng = size_t(B) * HV,
                 ns = size_t(B) * HV * D * D;
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
        cpu::l2norm_forward<float>(qn.data(), r.data(), q.data() + size_t(b) * H * D, H, D);
        cpu::l2norm_forward<float>(kn.data(), r.data(), k.data() + size_t(b) * H * D, H, D);
        const cpu::GdnDims dims{1, H, HV, D, D};
        cpu::gdn_recurrent_forward<float>(
            o_ref.data() + size_t(b) * HV * D, st_ref.data() + size_t(b) * HV * D * D, qn.data(), kn.data(),
            v.data() + size_t(b) * HV * D, g.data() + size_t(b) * HV, beta.data() + size_t(b) * HV,
            st.data() + size_t(b) * HV * D * D, dims, scale);
    }
    auto dq = dev_bf16(q), dk = dev_bf16(k), dv = dev_bf16(v);
    auto dg = dev_f32(g), db = dev_f32(beta), dst = dev_f32(st);
    Dev<bf16> o{int64_t(nv)};
    Dev<float> out{int64_t(ns)};
    cuda::gdn_decode_step(B, H, HV, D, dq.p(), dk.p(), dv.p(), dg.p(), db.p(), dst.p(), out.p(), o.p(), scale,
                          true);
    expect_rel("gdn_decode o", host(o), o_ref, kTolBf16);
    expect_rel("gdn_decode state", host(out), st_ref, kTolBf16);
    // in place (state_out == state_in)
    cuda::gdn_decode_step(B, H, HV, D, dq.p(), dk.p(), dv.p(), dg.p(), db.p(), dst.p(), dst.p(), o.p(), scale,
                          true);
    expect_rel("gdn_decode in-place state", host(dst), st_ref, kTolBf16);
}

// The inputs and CPU references of one attention shape (shared by our kernels' and cuDNN's cases).
struct AttnData {
    cuda::AttnShape s;
    float scale;
    std::vector<float> q, k, v, dout, o_ref, dq_ref, dk_ref, dv_ref;
};

AttnData attention_data(int B, int T, int H, int Hkv, int D, Rng& rng,
                        const std::vector<int32_t>& window = {}, int sinks = 0) {
    AttnData a;
    a.s = cuda::AttnShape{B, T, H, Hkv, D};
    const int32_t* win = window.empty() ? nullptr : window.data();
    const size_t nq = size_t(B) * T * H * D, nk = size_t(B) * T * Hkv * D;
    a.q = bf16_values(nq, rng), a.k = bf16_values(nk, rng), a.v = bf16_values(nk, rng),
    a.dout = bf16_values(nq, rng);
    a.scale = 1.f / std::sqrt(float(D));
    a.o_ref.resize(nq), a.dq_ref.resize(nq), a.dk_ref.resize(nk), a.dv_ref.resize(nk);
    for (int b = 0; b < B; ++b) {
        const size_t oq = size_t(b) * T * H * D, ok = size_t(b) * T * Hkv * D;
        cpu::causal_attention_forward<float>(a.o_ref.data() + oq, nullptr, a.q.data() + oq, a.k.data() + ok,
                                             a.v.data() + ok, T, 0, H, Hkv, D, a.scale, nullptr, win, sinks);
        cpu::causal_attention_backward<float>(a.dq_ref.data() + oq, a.dk_ref.data() + ok,
                                              a.dv_ref.data() + ok, a.dout.data() + oq, a.q.data() + oq,
                                              a.k.data() + ok, a.v.data() + ok, nullptr, T, H, Hkv, D,
                                              a.scale, nullptr, win, sinks);
    }
    return a;
}

// The device copies of one attention case's inputs, our kernels' outputs, forward then backward.
struct AttnRun {
    Dev<bf16> q, k, v, d_o, o, gq, gk, gv;
    Dev<float> lse;
    // deterministic: the backward's dQ pass without atomics (AttnWorkspace::deterministic)
    explicit AttnRun(const AttnData& a, bool deterministic = false)
        : q(dev_bf16(a.q)),
          k(dev_bf16(a.k)),
          v(dev_bf16(a.v)),
          d_o(dev_bf16(a.dout)),
          o{int64_t(a.q.size())},
          gq{int64_t(a.q.size())},
          gk{int64_t(a.k.size())},
          gv{int64_t(a.k.size())},
          lse(int64_t(a.s.B) * a.s.H * a.s.T) {
        cuda::AttnWorkspace ws(a.s);
        ws.deterministic = deterministic;
        cuda::attention_forward(a.s, q.p(), k.p(), v.p(), o.p(), lse.p(), a.scale);
        cuda::attention_backward(a.s, q.p(), k.p(), v.p(), o.p(), lse.p(), d_o.p(), gq.p(), gk.p(), gv.p(),
                                 a.scale, ws);
    }
    // The deterministic backward again on the same inputs and forward, twice: the same bits as this run's.
    void expect_repeatable(const AttnData& a, const std::string& what) const {
        cuda::AttnWorkspace ws(a.s);
        ws.deterministic = true;
        const std::vector<float> hq = host(gq), hk = host(gk), hv = host(gv);
        for (int rep = 1; rep <= 2; ++rep) {
            Dev<bf16> rq{int64_t(a.q.size())}, rk{int64_t(a.k.size())}, rv{int64_t(a.k.size())};
            cuda::attention_backward(a.s, q.p(), k.p(), v.p(), o.p(), lse.p(), d_o.p(), rq.p(), rk.p(),
                                     rv.p(), a.scale, ws);
            const std::string w =
                what + " bwd repeated (" + std::to_string(rep) + "): differing elements of ";
            expect_exact(w + "dq", bit_mismatches(host(rq), hq));
            expect_exact(w + "dk", bit_mismatches(host(rk), hk));
            expect_exact(w + "dv", bit_mismatches(host(rv), hv));
        }
    }
    void expect(const AttnData& a, const std::string& what) const {
        expect_rel(what + " fwd o", host(o), a.o_ref, kTolBf16);
        expect_rel(what + " bwd dq", host(gq), a.dq_ref, kTolBf16);
        expect_rel(what + " bwd dk", host(gk), a.dk_ref, kTolBf16);
        expect_rel(what + " bwd dv", host(gv), a.dv_ref, kTolBf16);
    }
};

void run_attention(int B, int T, int H, int Hkv, int D, Rng& rng) {
    const AttnData a = attention_data(B, T, H, Hkv, D, rng);
    AttnRun r(a);
    r.expect(a, "attention");
    // the forward kernel built for the other register budget (1 or 2 resident blocks per SM)
    cuda::attention_set_fwd_blocks_per_sm(1);
    r.o.poison();
    cuda::attention_forward(a.s, r.q.p(), r.k.p(), r.v.p(), r.o.p(), r.lse.p(), a.scale);
    const std::vector<float> o_alt = host(r.o);
    cuda::attention_set_fwd_blocks_per_sm(0);
    expect_rel("attention fwd alt-regs o", o_alt, a.o_ref, kTolBf16);
    // the deterministic backward (dQ by a second pass per query block): the same references, the same bits
    // every run
    const AttnRun d(a, true);
    d.expect(a, "attention deterministic");
    d.expect_repeatable(a, "attention deterministic");
}

// Our kernels with per-head sliding windows and sinks (the head-level sliding-window baseline) against the
// CPU reference with the same windows, forward and backward; then the single-token decode kernel (both
// forms) at the last position of each sequence against the CPU forward of that one query.
void run_attention_window(int B, int T, int H, int Hkv, int D, const std::vector<int32_t>& window, int sinks,
                          Rng& rng) {
    AttnData a = attention_data(B, T, H, Hkv, D, rng, window, sinks);
    auto dwin = dev_i32(window);
    a.s.window = dwin.p(), a.s.sinks = sinks;
    const AttnRun r(a);
    r.expect(a, "windowed attention");
    const AttnRun rd(a, true);
    rd.expect(a, "windowed attention deterministic");
    rd.expect_repeatable(a, "windowed attention deterministic");
    const Dev<bf16>& dk = r.k;
    const Dev<bf16>& dv = r.v;
    // decode: sequence 0's last query over its T cached rows
    std::vector<int32_t> idx(static_cast<size_t>(H));
    for (int h = 0; h < H; ++h) idx[size_t(h)] = h / (H / Hkv);
    auto didx = dev_i32(idx);
    std::vector<float> q_last(a.q.begin() + size_t(T - 1) * H * D, a.q.begin() + size_t(T) * H * D);
    std::vector<float> ref(size_t(H) * D);
    cpu::causal_attention_forward<float>(ref.data(), nullptr, q_last.data(), a.k.data(), a.v.data(), 1, T - 1,
                                         H, Hkv, D, a.scale, nullptr, window.data(), sinks);
    auto dql = dev_bf16(q_last);
    Dev<bf16> od{int64_t(H) * D};
    Dev<float> part(int64_t(gpu::decode_attention_workspace_floats(H, D, T)));
    gpu::decode_attention_workspace_clear(part.p());
    const gpu::DecodeWindows dw{dwin.p(), sinks};
    gpu::decode_attention(od.p(), dql.p(), dk.p(), dv.p(), didx.p(), H, Hkv, D, T, a.scale, part.p(), nullptr,
                          dw);
    expect_rel("windowed decode attention o", host(od), ref, kTolBf16);
    auto len = dev_i32({T});
    od.poison();
    gpu::decode_attention_dev(od.p(), dql.p(), dk.p(), dv.p(), didx.p(), H, Hkv, D, len.p(),
                              gpu::decode_attention_splits(T), a.scale, part.p(), nullptr, dw);
    expect_rel("windowed decode attention (device length) o", host(od), ref, kTolBf16);
}

// deterministic: cuDNN's deterministic graphs (CudnnAttention(true), the deterministic training step's),
// checked against the same references and, run twice more, for the same bits.
void run_attention_cudnn(int B, int T, int H, int Hkv, int D, bool fused, bool deterministic, Rng& rng) {
    const cuda::CudnnLibrary& lib = cuda::cudnn_library();
    if (!lib.loaded) GTEST_SKIP() << "cuDNN not loaded: " << lib.why;
    const AttnData a = attention_data(B, T, H, Hkv, D, rng);
    const size_t nq = a.q.size(), nk = a.k.size();
    cuda::CudnnAttention cudnn(deterministic);
    cuda::AttnShape s = a.s;
    if (fused) s.ld_qkv = (H + 2 * Hkv) * D;
    if (!cudnn.supports(s)) GTEST_SKIP() << "cuDNN does not run this shape: " << cudnn.reason();
    std::printf("cuDNN version %ld%s\n", lib.version, deterministic ? ", deterministic graphs" : "");
    const std::string tag = deterministic ? "attention cudnn deterministic" : "attention cudnn";
    // the backward run twice more into fresh buffers of `n` elements: the same bits as `first`
    auto expect_repeatable = [&](const std::string& what, size_t n, const std::vector<float>& first,
                                 auto&& backward_into) {
        if (!deterministic) return;
        for (int rep = 1; rep <= 2; ++rep) {
            Dev<bf16> again{int64_t(n)};
            backward_into(again);
            expect_exact(what + " repeated (" + std::to_string(rep) + "): differing elements",
                         bit_mismatches(host(again), first));
        }
    };
    auto dq = dev_bf16(a.q), dk = dev_bf16(a.k), dv = dev_bf16(a.v), ddo = dev_bf16(a.dout);
    Dev<bf16> o{int64_t(nq)};
    Dev<float> lse(int64_t(B) * H * T);
    cuda::AttnWorkspace ws(a.s);
    // our kernel's base-2 LSE: cuDNN's stats are the natural-log LSE, so stats * log2(e) must match it
    cuda::attention_forward(a.s, dq.p(), dk.p(), dv.p(), o.p(), lse.p(), a.scale);
    const std::vector<float> lse_own = host(lse);
    o.poison();
    lse.poison();
    if (!fused) {
        Dev<bf16> gq{int64_t(nq)}, gk{int64_t(nk)}, gv{int64_t(nk)};
        cudnn.forward(s, dq.p(), dk.p(), dv.p(), o.p(), lse.p(), a.scale, nullptr);
        cudnn.backward(s, dq.p(), dk.p(), dv.p(), o.p(), lse.p(), ddo.p(), gq.p(), gk.p(), gv.p(), a.scale,
                       ws, nullptr);
        std::vector<float> stats2 = host(lse);
        for (float& x : stats2) x *= 1.4426950408889634f;
        expect_rel(tag + " fwd o", host(o), a.o_ref, kTolBf16);
        expect_rel(tag + " fwd stats", stats2, lse_own, kTolBf16);
        expect_rel(tag + " bwd dq", host(gq), a.dq_ref, kTolBf16);
        expect_rel(tag + " bwd dk", host(gk), a.dk_ref, kTolBf16);
        expect_rel(tag + " bwd dv", host(gv), a.dv_ref, kTolBf16);
        // dq, dk, dv of one more backward each time (the other two into scratch)
        const std::vector<float> hq = host(gq), hk = host(gk), hv = host(gv);
        Dev<bf16> sq{int64_t(nq)}, sk{int64_t(nk)}, sv{int64_t(nk)};
        auto bwd = [&](bf16* q_out, bf16* k_out, bf16* v_out) {
            cudnn.backward(s, dq.p(), dk.p(), dv.p(), o.p(), lse.p(), ddo.p(), q_out, k_out, v_out, a.scale,
                           ws, nullptr);
        };
        expect_repeatable(tag + " bwd dq", nq, hq, [&](Dev<bf16>& x) { bwd(x.p(), sk.p(), sv.p()); });
        expect_repeatable(tag + " bwd dk", nk, hk, [&](Dev<bf16>& x) { bwd(sq.p(), x.p(), sv.p()); });
        expect_repeatable(tag + " bwd dv", nk, hv, [&](Dev<bf16>& x) { bwd(sq.p(), sk.p(), x.p()); });
        return;
    }
    // the training step's fused layout: q|k|v as columns of one (B T, (H + 2 Hkv) D) row, read strided, and
    // dq|dk|dv written into the same layout (AttnShape::ld_qkv)
    const size_t ld = size_t(s.ld_qkv), rows = size_t(B) * T, hd = size_t(H) * D, kd = size_t(Hkv) * D;
    std::vector<float> qkv(rows * ld);
    for (size_t r = 0; r < rows; ++r) {
        for (size_t c = 0; c < hd; ++c) qkv[r * ld + c] = a.q[r * hd + c];
        for (size_t c = 0; c < kd; ++c) {
            qkv[r * ld + hd + c] = a.k[r * kd + c];
            qkv[r * ld + hd + kd + c] = a.v[r * kd + c];
        }
    }
    auto dqkv = dev_bf16(qkv);
    Dev<bf16> gqkv{int64_t(rows * ld)};
    const bf16* fq = dqkv.p();
    cudnn.forward(s, fq, fq + hd, fq + hd + kd, o.p(), lse.p(), a.scale, nullptr);
    cudnn.backward(s, fq, fq + hd, fq + hd + kd, o.p(), lse.p(), ddo.p(), gqkv.p(), gqkv.p() + hd,
                   gqkv.p() + hd + kd, a.scale, ws, nullptr);
    const std::vector<float> g = host(gqkv);
    std::vector<float> fdq(nq), fdk(nk), fdv(nk);
    for (size_t r = 0; r < rows; ++r) {
        for (size_t c = 0; c < hd; ++c) fdq[r * hd + c] = g[r * ld + c];
        for (size_t c = 0; c < kd; ++c) {
            fdk[r * kd + c] = g[r * ld + hd + c];
            fdv[r * kd + c] = g[r * ld + hd + kd + c];
        }
    }
    expect_rel(tag + " fused-qkv fwd o", host(o), a.o_ref, kTolBf16);
    expect_rel(tag + " fused-qkv bwd dq", fdq, a.dq_ref, kTolBf16);
    expect_rel(tag + " fused-qkv bwd dk", fdk, a.dk_ref, kTolBf16);
    expect_rel(tag + " fused-qkv bwd dv", fdv, a.dv_ref, kTolBf16);
    // the whole fused dq|dk|dv rows of one more backward each time
    expect_repeatable(tag + " fused-qkv bwd dq|dk|dv", rows * ld, g, [&](Dev<bf16>& x) {
        cudnn.backward(s, fq, fq + hd, fq + hd + kd, o.p(), lse.p(), ddo.p(), x.p(), x.p() + hd,
                       x.p() + hd + kd, a.scale, ws, nullptr);
    });
}

}  // namespace

OpCase gdn_chunk_case(const GdnChunkShape& s) {
    std::string name = case_name("gdn_chunk", {{"B", s.B}, {"T", s.T}, {"H", s.H}, {"HV", s.HV}, {"D", s.D}});
    if (!s.l2norm) name += "_nonorm";
    if (s.silu_qk) name += "_siluqk";
    return {name, [s](Rng& rng) { run_gdn_chunk(s, rng); }};
}

OpCase gdn_decode_case(int B, int H, int HV, int D) {
    return {case_name("gdn_decode", {{"B", B}, {"H", H}, {"HV", HV}, {"D", D}}),
            [=](Rng& rng) { run_gdn_decode(B, H, HV, D, rng); }};
}

OpCase attention_case(int B, int T, int H, int Hkv, int D) {
    return {case_name("attention", {{"B", B}, {"T", T}, {"H", H}, {"Hkv", Hkv}, {"D", D}}),
            [=](Rng& rng) { run_attention(B, T, H, Hkv, D, rng); }};
}

OpCase attention_window_case(int B, int T, int H, int Hkv, int D, int window, int sinks) {
    // the query heads alternate: full, windowed, full, ...
    std::vector<int32_t> w(static_cast<size_t>(H));
    for (int h = 0; h < H; ++h) w[size_t(h)] = h % 2 ? window : 0;
    return {
        case_name("attention_window",
                  {{"B", B}, {"T", T}, {"H", H}, {"Hkv", Hkv}, {"D", D}, {"W", window}, {"sinks", sinks}}),
        [=](Rng& rng) { run_attention_window(B, T, H, Hkv, D, w, sinks, rng); }};
}

OpCase attention_cudnn_case(int B, int T, int H, int Hkv, int D, bool fused_qkv, bool deterministic) {
    std::string name = fused_qkv ? "attention_cudnn_fusedqkv" : "attention_cudnn";
    if (deterministic) name += "_det";
    return {case_name(name, {{"B", B}, {"T", T}, {"H", H}, {"Hkv", Hkv}, {"D", D}}),
            [=](Rng& rng) { run_attention_cudnn(B, T, H, Hkv, D, fused_qkv, deterministic, rng); }};
}

}  // namespace hydra::gputest
