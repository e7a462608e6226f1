// The fused single-row GEMVs of decode (ops/cuda/decode_gemv.h) against a double-precision reference of
// the same roundings (normalized input and gate / up to bf16), on SmolLM2-135M's and Qwen3's decode shapes,
// with 16-byte loads and on the scalar path (odd width, unaligned rows); and greedy decoding through them
// (GpuForward::set_decode_gemv) against the cuBLASLt path, on random models of SmolLM2's head shape (the
// teacher and a head-granular 7:1 hybrid): every step's logits within max(2e-2, 2 x the CPU's bf16 floor).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "cpu_logits_floor.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu_train_common.h"
#include "model/plan_builders.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/decode_gemv.h"
#include "ops/cuda/device_arena.h"
#include "parity.h"
#include "serve/sampler.h"

namespace hydra::gputest {

namespace {

using cuda::bf16;

std::vector<bf16> to_bf16(const std::vector<float>& v) {
    std::vector<bf16> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16_rn(v[i]);
    return out;
}

template <class T>
cuda::DeviceBuffer<T> device(const std::vector<T>& host) {
    cuda::DeviceBuffer<T> d(int64_t(host.size()));
    d.upload(host.data());
    return d;
}

template <class T>
std::vector<T> host(const cuda::DeviceBuffer<T>& d, size_t n) {
    std::vector<T> out(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    cuda::copy_to_host(out.data(), d.data(), n * sizeof(T));
    CUDA_CHECK(cudaDeviceSynchronize());
    return out;
}

std::vector<float> to_f(const std::vector<bf16>& v) {
    std::vector<float> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
    return out;
}

// (in, out, ld_w) cases: SmolLM2-135M's projection / o / gate-up / down, Qwen3-1.7B's down, the scalar path.
struct Shape {
    int64_t in, out, ld;
};
const Shape kShapes[] = {{576, 960, 576},    {576, 1536, 576}, {1536, 576, 1536},
                         {6144, 2048, 6144}, {100, 37, 100},   {576, 40, 580}};

TEST(DecodeGemv, KernelsMatchAReferenceOfTheSameRoundings) {
    for (const Shape& sh : kShapes) {
        SCOPED_TRACE(std::to_string(sh.in) + " -> " + std::to_string(sh.out) + " ld " +
                     std::to_string(sh.ld));
        Rng rng = case_rng("decode_gemv" + std::to_string(sh.in) + "_" + std::to_string(sh.out));
        const std::vector<float> x = f32_values(size_t(sh.in), rng, 2.f, 0.1f);
        const std::vector<float> wn = f32_values(size_t(sh.in), rng, 0.3f, 1.f);
        const std::vector<float> W = bf16_values(size_t(sh.out * sh.ld), rng, 0.05f);
        const std::vector<float> W2 = bf16_values(size_t(sh.out * sh.ld), rng, 0.05f);
        const std::vector<float> xb = bf16_values(size_t(sh.in), rng, 1.f);
        const std::vector<float> r = f32_values(size_t(sh.out), rng, 1.f);
        auto dot = [&](const std::vector<float>& w, int64_t o, const std::vector<double>& v) {
            double s = 0;
            for (int64_t i = 0; i < sh.in; ++i) s += double(w[size_t(o * sh.ld + i)]) * v[size_t(i)];
            return s;
        };
        // rmsnorm_gemv: xn = bf16(x * rstd * w), y = xn @ W^T
        double ss = 0;
        for (float v : x) ss += double(v) * double(v);
        const float rs = 1.0f / std::sqrt(float(ss / double(sh.in)) + 1e-5f);
        std::vector<double> xn(size_t(sh.in)), xbd(xb.begin(), xb.end());
        for (int64_t i = 0; i < sh.in; ++i) xn[size_t(i)] = round_bf16(x[size_t(i)] * rs * wn[size_t(i)]);
        std::vector<float> ref_y(size_t(sh.out)), ref_add(size_t(sh.out)), ref_act(size_t(sh.out));
        for (int64_t o = 0; o < sh.out; ++o) {
            ref_y[size_t(o)] = float(dot(W, o, xn));
            ref_add[size_t(o)] = float(double(r[size_t(o)]) + dot(W, o, xbd));
            const double g = round_bf16(float(dot(W, o, xbd))), u = round_bf16(float(dot(W2, o, xbd)));
            ref_act[size_t(o)] = float(g / (1 + std::exp(-g)) * u);
        }
        auto dx = device(x), dwn = device(wn), dr = device(r);
        auto dW = device(to_bf16(W)), dW2 = device(to_bf16(W2)), dxb = device(to_bf16(xb));
        cuda::DeviceBuffer<bf16> dy(sh.out), dxn(sh.in), dact(sh.out);
        cuda::DeviceBuffer<float> dsum(sh.out);
        cuda::rmsnorm_gemv(dy.data(), dxn.data(), dx.data(), dwn.data(), 1e-5f, dW.data(), sh.ld, sh.in,
                           sh.out, nullptr);
        cuda::gemv_add(dsum.data(), dr.data(), dxb.data(), dW.data(), sh.ld, sh.in, sh.out, nullptr);
        cuda::gemv_swiglu(dact.data(), dxb.data(), dW.data(), dW2.data(), sh.ld, sh.in, sh.out, nullptr);
        const std::vector<float> y = to_f(host(dy, size_t(sh.out))), xn_gpu = to_f(host(dxn, size_t(sh.in)));
        const std::vector<float> act = to_f(host(dact, size_t(sh.out))), sum = host(dsum, size_t(sh.out));
        // the normalized row: bf16 of the same value, so equal but where the sum of squares' order moved a
        // value across a rounding boundary (rare)
        int64_t differ = 0;
        for (int64_t i = 0; i < sh.in; ++i) differ += xn_gpu[size_t(i)] != float(xn[size_t(i)]);
        EXPECT_LE(differ, sh.in / 100 + 1) << "normalized row elements differing from the reference";
        expect_rel("rmsnorm_gemv y", y, ref_y, 4e-3);       // bf16 output rounding
        expect_rel("gemv_add y", sum, ref_add, 1e-5);       // fp32 output
        expect_rel("gemv_swiglu act", act, ref_act, 8e-3);  // gate / up and the result rounded
    }
    cuda::DeviceBuffer<float> y(4), r(4);
    cuda::DeviceBuffer<bf16> x(20000), w(4 * 20000);
    EXPECT_THROW(cuda::gemv_add(y.data(), r.data(), x.data(), w.data(), 20000, 20000, 4, nullptr), Error);
    EXPECT_THROW(cuda::gemv_add(y.data(), r.data(), x.data(), w.data(), 10, 20, 4, nullptr), Error);
}

// Prompt of 64 random tokens, then 32 greedy steps (CUDA graphs) with and without the GEMVs.
void check_decode(const LlamaModel& model) {
    const int64_t V = model.config().vocab_size, kPrompt = 64, kGen = 32;
    Rng rng(11);
    std::vector<int32_t> prompt(static_cast<size_t>(kPrompt));
    for (auto& t : prompt) t = int32_t(uniform_below(rng, V));
    const LogitsFloor floor = cpu_logits_floor(model, prompt);
    const double tol = std::max(2e-2, 2 * floor.worst);
    gpu::GpuTrainModel gm(model, false);
    std::vector<std::vector<float>> steps[2];
    std::vector<int32_t> tokens[2];
    for (int use = 0; use < 2; ++use) {
        gpu::GpuForward fwd(gm);
        fwd.set_decode_gemv(use == 1);
        gpu::GpuCache cache(gm, kPrompt + kGen + 1);
        std::vector<float> lg = fwd.forward_last_logits(cache, prompt);
        for (int64_t i = 0; i < kGen; ++i) {
            // both runs feed the same tokens (the GEMM path's), so each step compares the same context
            const int32_t tok = use == 0 ? argmax({lg.data(), size_t(V)}) : tokens[0][size_t(i)];
            tokens[use].push_back(argmax({lg.data(), size_t(V)}));
            lg = fwd.forward_last_logits(cache, std::span<const int32_t>(&tok, 1));
            steps[use].push_back(lg);
        }
        EXPECT_GT(fwd.graph_stats().replays, 0) << "the steps ran as CUDA graphs";
    }
    double worst = 0;
    int64_t agree = 0;
    for (int64_t i = 0; i < kGen; ++i) {
        worst = std::max(worst, rel_rms(steps[1][size_t(i)], steps[0][size_t(i)]).value);
        agree += tokens[0][size_t(i)] == tokens[1][size_t(i)];
    }
    std::printf(
        "%s: GEMV decode vs cuBLASLt decode, %lld steps: worst rel RMS %.3e (tolerance %.3e); top-1 "
        "%lld/%lld\n",
        model.plan().ratio_summary().c_str(), (long long)kGen, worst, tol, (long long)agree, (long long)kGen);
    EXPECT_LT(worst, tol);
}

TEST(DecodeGemv, GreedyStepsMatchTheGemmPath) {
    const ModelConfig c = bench::smollm2_heads_synthetic_config();
    {
        LlamaModel teacher(c, nullptr);
        bench::randomise(teacher, 4100, /*unit_logits=*/false);
        check_decode(teacher);
    }
    PlanRequest r;
    r.select = "random";
    r.ratio = parse_ratio("7:1", "synthetic");
    r.granularity = "head";
    r.seed = 3;
    r.gdn.norm_eps = c.rms_norm_eps;
    const HybridPlan plan = build_plan(c, r);
    LlamaModel hybrid(c, &plan);
    bench::randomise(hybrid, 4101, /*unit_logits=*/false);
    check_decode(hybrid);
}

}  // namespace
}  // namespace hydra::gputest
