// The inference prefill on the GPU, for bench/peer_prefill_sdpa.py to set beside PyTorch in the same call:
//   attn   causal GQA attention forward, bf16, q/k/v packed (B, T, heads, D): our cuDNN inference path
//          (ops/cuda/cudnn_attention.h forward_inference, what gpu/prefill_attention.h runs) and our own
//          flash kernel (ops/cuda/attention.h, the prefill's path before), at T = 1K, 4K, 16K, 32K, B 1 and 8
//          (B 8 up to 16K), SmolLM2's heads (9 / 3, D 64) and Dh-128 ones (16 / 8);
//   chunk  a prompt chunk of 512 queries continued at pos0 = S - 512 over S keys (bottom-right causal):
//          cuDNN, and our kernels' path for it (the decode kernel per row); ours only (SDPA's is_causal
//          aligns top-left when s_q != s_kv, so it computes something else);
//   model  the whole-model prefill (GpuForward::forward_last_logits) of T = 4K, 16K, 32K tokens at
//          SmolLM2-135M's shape with random weights, prefill attention through cuDNN and through our kernels.
// Times: CUDA events around `iters` back-to-back calls after `warmup` calls, the mean; the model rows time
// whole calls (host included) the same way. One JSON object per line on stdout; a table on stderr.
//
//   gpu_prefill_bench [--iters 20] [--warmup 3] [--model-iters 3] [--only attn|chunk|model]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "gpu/decode_attention.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu/prefill_attention.h"
#include "gpu_train_common.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/device_arena.h"

using namespace hydra;

namespace {

using cuda::bf16;

struct Options {
    int iters = 20, warmup = 3, model_iters = 3;
    std::string only;
};

// Mean ms of fn() over `iters` calls after `warmup`, CUDA events on `st`.
double time_ms(const std::function<void()>& fn, int warmup, int iters, cudaStream_t st) {
    for (int i = 0; i < warmup; ++i) fn();
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    CUDA_CHECK(cudaEventRecord(e0, st));
    for (int i = 0; i < iters; ++i) fn();
    CUDA_CHECK(cudaEventRecord(e1, st));
    CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return double(ms) / iters;
}

// Causal forward FLOPs of Tq queries over S keys (the last Tq of S positions): 2 matmuls, 2 flops per MAC.
double causal_flops(int64_t B, int64_t H, int64_t D, int64_t Tq, int64_t S) {
    const double pairs = double(Tq) * double(S - Tq) + double(Tq) * double(Tq + 1) / 2;
    return 4.0 * double(B) * double(H) * double(D) * pairs;
}

struct Heads {
    const char* name;
    int H, Hkv, D;
};
const Heads kHeads[] = {{"smollm2", 9, 3, 64}, {"d128", 16, 8, 128}};

void fill_random(cuda::DeviceBuffer<bf16>& b, uint64_t seed) {
    std::vector<bf16> h(size_t(b.size()));
    Rng rng(seed);
    for (auto& x : h) x = __float2bfloat16(float(rng.normal()));
    CUDA_CHECK(cudaMemcpy(b.data(), h.data(), h.size() * sizeof(bf16), cudaMemcpyHostToDevice));
}

void emit_attn(const char* kind, const char* impl, const Heads& hd, int64_t B, int64_t Tq, int64_t S,
               double ms) {
    const double tflops = causal_flops(B, hd.H, hd.D, Tq, S) / (ms * 1e-3) / 1e12;
    std::printf(
        "{\"kind\": \"%s\", \"impl\": \"%s\", \"heads\": \"%s\", \"B\": %lld, \"T\": %lld, \"S\": %lld, "
        "\"H\": %d, "
        "\"Hkv\": %d, \"D\": %d, \"ms\": %.5f, \"tflops\": %.1f}\n",
        kind, impl, hd.name, (long long)B, (long long)Tq, (long long)S, hd.H, hd.Hkv, hd.D, ms, tflops);
    std::fflush(stdout);
    std::fprintf(stderr, "%-6s %-13s %-8s B%-2lld T%-6lld S%-6lld %9.3f ms %7.1f TFLOP/s\n", kind, impl,
                 hd.name, (long long)B, (long long)Tq, (long long)S, ms, tflops);
}

void bench_attention(const Options& o, cudaStream_t st) {
    cuda::CudnnAttention dnn;
    for (const Heads& hd : kHeads)
        for (int64_t B : {1, 8})
            for (int64_t T : {1024, 4096, 16384, 32768}) {
                if (B == 8 && T > 16384) continue;  // B8 T32K: the old kernel alone takes seconds per call
                const int64_t nq = B * T * hd.H * hd.D, nk = B * T * hd.Hkv * hd.D;
                cuda::DeviceBuffer<bf16> q(nq), k(nk), v(nk), out(nq);
                cuda::DeviceBuffer<float> lse(B * hd.H * T);
                fill_random(q, 1), fill_random(k, 2), fill_random(v, 3);
                const float scale = 1.f / std::sqrt(float(hd.D));
                cuda::AttnInferShape s;
                s.B = int(B), s.T = int(T), s.S = int(T), s.H = hd.H, s.Hkv = hd.Hkv, s.D = hd.D;
                if (dnn.supports_inference(s)) {
                    emit_attn("attn", "hydra_cudnn", hd, B, T, T,
                              time_ms(
                                  [&] {
                                      dnn.forward_inference(s, q.data(), k.data(), v.data(), out.data(),
                                                            scale, st);
                                  },
                                  o.warmup, o.iters, st));
                } else {
                    std::fprintf(stderr, "cuDNN inference unavailable for B%lld T%lld %s: %s\n", (long long)B,
                                 (long long)T, hd.name, dnn.reason().c_str());
                }
                cuda::AttnShape as;
                as.B = int(B), as.T = int(T), as.H = hd.H, as.Hkv = hd.Hkv, as.D = hd.D;
                const int iters = T >= 16384 ? std::max(1, o.iters / 4) : o.iters;
                emit_attn("attn", "hydra_flash", hd, B, T, T,
                          time_ms(
                              [&] {
                                  cuda::attention_forward(as, q.data(), k.data(), v.data(), out.data(),
                                                          lse.data(), scale, st);
                              },
                              1, iters, st));
            }
}

void bench_chunks(const Options& o, cudaStream_t st) {
    const int64_t Tq = 512;
    for (const Heads& hd : kHeads)
        for (int64_t S : {4096, 16384, 32768}) {
            const int64_t pos0 = S - Tq;
            cuda::DeviceBuffer<bf16> q(Tq * hd.H * hd.D), k(S * hd.Hkv * hd.D), v(S * hd.Hkv * hd.D),
                out(Tq * hd.H * hd.D);
            fill_random(q, 4), fill_random(k, 5), fill_random(v, 6);
            const float scale = 1.f / std::sqrt(float(hd.D));
            for (auto backend :
                 {gpu::PrefillAttention::Backend::Cudnn, gpu::PrefillAttention::Backend::Own}) {
                gpu::PrefillAttention pa(backend);
                auto run = [&] {
                    pa.forward(out.data(), q.data(), 0, k.data(), v.data(), nullptr, true, Tq, pos0, hd.H,
                               hd.Hkv, hd.D, scale, st);
                };
                try {
                    run();
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "chunk %s S%lld: %s\n", hd.name, (long long)S, e.what());
                    continue;
                }
                const double ms = time_ms(run, o.warmup, o.iters, st);
                emit_attn("chunk",
                          backend == gpu::PrefillAttention::Backend::Cudnn ? "hydra_cudnn" : "hydra_decode",
                          hd, 1, Tq, S, ms);
            }
        }
}

void bench_model(const Options& o, cudaStream_t) {
    ModelConfig c = bench::smollm2_135m_config();
    c.max_position_embeddings = 32768 + 8;
    LlamaModel model(c, nullptr);
    bench::randomise(model, 11);
    gpu::GpuTrainModel gm(model, false);
    gpu::GpuForward fwd(gm);
    for (int64_t T : {4096, 16384, 32768}) {
        std::vector<int32_t> tokens(static_cast<size_t>(T));
        Rng rng(static_cast<uint64_t>(T));
        for (auto& t : tokens) t = int32_t(rng.uniform() * double(c.vocab_size - 1));
        gpu::GpuCache cache(gm, T + 1);
        for (auto backend : {gpu::PrefillAttention::Backend::Auto, gpu::PrefillAttention::Backend::Own}) {
            fwd.prefill_attention().set_backend(backend);
            auto run = [&] {
                cache.reset(fwd.stream());
                (void)fwd.forward_last_logits(cache, tokens);  // synchronous: the logits come back
            };
            run();  // warm-up: buffers, cuBLAS, cuDNN plans
            const double ms = time_ms(run, 0, o.model_iters, fwd.stream());
            const std::string impl = std::string("hydra_") + (backend == gpu::PrefillAttention::Backend::Own
                                                                  ? "own"
                                                                  : fwd.prefill_attention().last_path());
            std::printf(
                "{\"kind\": \"model\", \"impl\": \"%s\", \"model\": \"smollm2-135m\", \"T\": %lld, \"ms\": "
                "%.3f, "
                "\"tok_s\": %.0f}\n",
                impl.c_str(), (long long)T, ms, double(T) / (ms * 1e-3));
            std::fflush(stdout);
            std::fprintf(stderr, "model  %-13s smollm2-135m T%-6lld %9.3f ms %9.0f tok/s\n", impl.c_str(),
                         (long long)T, ms, double(T) / (ms * 1e-3));
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--iters")
            o.iters = std::atoi(next().c_str());
        else if (a == "--warmup")
            o.warmup = std::atoi(next().c_str());
        else if (a == "--model-iters")
            o.model_iters = std::atoi(next().c_str());
        else if (a == "--only")
            o.only = next();
        else {
            std::fprintf(stderr,
                         "usage: gpu_prefill_bench [--iters N] [--warmup N] [--model-iters N] [--only "
                         "attn|chunk|model]\n");
            return 2;
        }
    }
    if (o.iters < 1 || o.warmup < 0 || o.model_iters < 1 ||
        !(o.only.empty() || o.only == "attn" || o.only == "chunk" || o.only == "model")) {
        std::fprintf(
            stderr,
            "gpu_prefill_bench: --iters/--model-iters >= 1, --warmup >= 0, --only attn|chunk|model\n");
        return 2;
    }
    try {
        const cuda::CudnnLibrary& lib = cuda::cudnn_library();
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        std::printf("{\"kind\": \"env\", \"device\": \"%s\", \"cudnn\": %ld, \"cudnn_why\": \"%s\"}\n",
                    prop.name, lib.version, lib.loaded ? "" : "not loaded");
        std::fprintf(stderr, "device %s, cuDNN %s\n", prop.name,
                     lib.loaded ? std::to_string(lib.version).c_str() : lib.why.c_str());
        cudaStream_t st = nullptr;
        CUDA_CHECK(cudaStreamCreate(&st));
        if (o.only.empty() || o.only == "attn") bench_attention(o, st);
        if (o.only.empty() || o.only == "chunk") bench_chunks(o, st);
        if (o.only.empty() || o.only == "model") bench_model(o, st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        CUDA_CHECK(cudaStreamDestroy(st));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpu_prefill_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
