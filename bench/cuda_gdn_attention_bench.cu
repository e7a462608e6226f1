// Timings of the CUDA kernels at the shapes of shared/ANCHORS.md (bf16, 16 heads, d = 128; B8 x T4096,
// B2 x T16384, B1 x T65536) and at SmolLM2-135M's head shape (9 query heads, 3 KV heads, d = 64):
// GDN chunk forward (in-kernel q/k L2 norm, no state saved), GDN forward (saving) + backward, causal
// attention forward and forward + backward (our kernels and cuDNN's fused attention), GDN decode step (B64,
// fp32 state), decode attention of one token over 512-128K cached keys. CUDA events around each call, warm-up
// first, median of N (N sized to about 200 ms per point, at least 5). Inputs are random (never zeros). One
// JSON object per line on stdout (impl "ours"), matched by bench/cuda_peers.py's rows on op/B/T/H/D.
//
// Usage: cuda_gdn_attention_bench [--quick] [--attn-only | --gdn-only | --decode-only]
// [--shape BxTxHxD[xHkv]]...
//   --decode-only: the decode rows alone: the GDN decode step (and the state copy of the same bytes), and
//                 decode attention at 512-128K cached keys
//   --shape:      time these shapes instead of the built-in list (repeatable; D 64 or 128; Hkv, attention's
//                 key/value heads, defaults to H); decode rows are skipped
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gpu/decode_attention.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cudnn_attention.h"
#include "ops/cuda/device_arena.h"
#include "ops/cuda/gdn_chunk.h"
#include "ops/cuda/gdn_scan_policy.h"

using hydra::cuda::bf16;

namespace {

// `pre` (optional) runs before each timed call, outside the events (the L2 flush below).
float median_ms(const std::function<void()>& f, const std::function<void()>& pre = nullptr) {
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    f();  // first call: module load, attributes
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaEventRecord(a));
    f();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float once = 0;
    CUDA_CHECK(cudaEventElapsedTime(&once, a, b));
    const int warm = std::clamp(int(25.f / std::max(once, 1e-3f)), 2, 50);
    const int reps = std::clamp(int(200.f / std::max(once, 1e-3f)), 5, 100);
    for (int i = 0; i < warm; ++i) {
        if (pre) pre();
        f();
    }
    std::vector<float> t(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
        if (pre) pre();
        CUDA_CHECK(cudaEventRecord(a));
        f();
        CUDA_CHECK(cudaEventRecord(b));
        CUDA_CHECK(cudaEventSynchronize(b));
        CUDA_CHECK(cudaEventElapsedTime(&t[size_t(i)], a, b));
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// GPU time of the work `enqueue` puts on a stream, measured the way bench/cuda_peers.py measures fla
// replayed from a CUDA graph: captured once into a graph, then replayed with 256 MiB written before each
// call (triton.testing.do_bench's L2 flush, which also keeps the GPU busy while the next launch is queued,
// so no launch latency is counted). The caller runs the work once eagerly first (attributes, allocations).
float graph_ms(const std::function<void(cudaStream_t)>& enqueue) {
    void* flush = nullptr;
    const size_t flush_bytes = size_t(256) << 20;
    CUDA_CHECK(cudaMalloc(&flush, flush_bytes));
    cudaStream_t st;
    CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    enqueue(st);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    // per-node priorities, as our graphs run them (src/gpu/cuda_graph.cpp): the split and streamed GDN
    // forwards launch their scan on a high-priority stream
    CUDA_CHECK(cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
    const float ms = median_ms([&] { CUDA_CHECK(cudaGraphLaunch(exec, 0)); },
                               [&] { CUDA_CHECK(cudaMemsetAsync(flush, 0, flush_bytes, 0)); });
    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(graph));
    CUDA_CHECK(cudaStreamDestroy(st));
    CUDA_CHECK(cudaFree(flush));
    return ms;
}

template <typename T>
T* dev_random(size_t n, std::mt19937_64& gen, float lo, float hi, bool bf) {
    std::uniform_real_distribution<float> u(lo, hi);
    T* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    const size_t chunk = size_t(1) << 24;
    std::vector<T> h(std::min(n, chunk));
    for (size_t off = 0; off < n; off += chunk) {
        const size_t m = std::min(chunk, n - off);
        for (size_t i = 0; i < m; ++i) {
            const float x = u(gen);
            if constexpr (sizeof(T) == 2)
                h[i] = __float2bfloat16(x);
            else
                h[i] = x;
        }
        CUDA_CHECK(cudaMemcpy(p + off, h.data(), m * sizeof(T), cudaMemcpyHostToDevice));
    }
    (void)bf;
    return p;
}

void emit(const char* op, int B, int T, int H, int D, float ms, double tokens, double flops, double bytes) {
    std::printf(
        "{\"impl\": \"ours\", \"op\": \"%s\", \"B\": %d, \"T\": %d, \"H\": %d, \"D\": %d, \"ms\": %.4f", op,
        B, T, H, D, ms);
    if (tokens > 0) std::printf(", \"Mtok_s\": %.2f", tokens / ms / 1e3);
    if (flops > 0) std::printf(", \"TFLOPs\": %.1f", flops / ms / 1e9);
    if (bytes > 0) std::printf(", \"TB_s\": %.2f", bytes / ms / 1e9);
    std::printf("}\n");
    std::fflush(stdout);
}

void bench_gdn(int B, int T, int H, int D, std::mt19937_64& gen) {
    const size_t nq = size_t(B) * T * H * D, ng = size_t(B) * T * H;
    bf16* q = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    bf16* k = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    bf16* v = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    bf16* dout = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    float* g = dev_random<float>(ng, gen, -0.2f, -0.01f, false);
    float* beta = dev_random<float>(ng, gen, 0.3f, 0.9f, false);
    bf16 *o, *dq, *dk, *dv;
    float *dg, *db;
    CUDA_CHECK(cudaMalloc(&o, nq * 2));
    CUDA_CHECK(cudaMalloc(&dq, nq * 2));
    CUDA_CHECK(cudaMalloc(&dk, nq * 2));
    CUDA_CHECK(cudaMalloc(&dv, nq * 2));
    CUDA_CHECK(cudaMalloc(&dg, ng * 4));
    CUDA_CHECK(cudaMalloc(&db, ng * 4));
    const hydra::cuda::GdnShape s{B, T, H, H, D};
    const float scale = 1.f / std::sqrt(float(D));
    {
        hydra::cuda::GdnWorkspace ws(s, true);
        const std::function<void()> forward = [&] {
            hydra::cuda::gdn_chunk_forward(s, q, k, v, g, beta, nullptr, o, nullptr, scale, true, false, ws);
        };
        const std::function<void()> both = [&] {
            hydra::cuda::gdn_chunk_forward(s, q, k, v, g, beta, nullptr, o, nullptr, scale, true, true, ws);
            hydra::cuda::gdn_chunk_backward(s, q, k, v, g, beta, dout, nullptr, dq, dk, dv, dg, db, nullptr,
                                            scale, true, ws);
        };
        const float fwd = median_ms(forward);
        emit("gdn_fwd", B, T, H, D, fwd, double(B) * T, 0, 0);
        const float fb = median_ms(both);
        emit("gdn_fwdbwd", B, T, H, D, fb, double(B) * T, 0, 0);
        // the forward's GPU time alone, as fla's forward replayed from a CUDA graph is measured (L2 flushed
        // before each call, no launch latency counted)
        const float fwd_g = graph_ms([&](cudaStream_t st) {
            hydra::cuda::gdn_chunk_forward(s, q, k, v, g, beta, nullptr, o, nullptr, scale, true, false, ws,
                                           st);
        });
        emit("gdn_fwd_graph", B, T, H, D, fwd_g, double(B) * T, 0, 0);
        // one more call of each with per-kernel times on stderr
        hydra::cuda::gdn_set_profile(true);
        std::fprintf(stderr, "B%d T%d H%d D%d\n", B, T, H, D);
        forward();
        both();
        hydra::cuda::gdn_set_profile(false);
    }
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)dout, (void*)g, (void*)beta, (void*)o, (void*)dq,
                    (void*)dk, (void*)dv, (void*)dg, (void*)db})
        CUDA_CHECK(cudaFree(p));
}

void bench_attn(int B, int T, int H, int Hkv, int D, std::mt19937_64& gen) {
    const size_t nq = size_t(B) * T * H * D, nk = size_t(B) * T * Hkv * D;
    bf16* q = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    bf16* k = dev_random<bf16>(nk, gen, -1.f, 1.f, true);
    bf16* v = dev_random<bf16>(nk, gen, -1.f, 1.f, true);
    bf16* dout = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    bf16 *o, *dq, *dk, *dv;
    float* lse;
    CUDA_CHECK(cudaMalloc(&o, nq * 2));
    CUDA_CHECK(cudaMalloc(&dq, nq * 2));
    CUDA_CHECK(cudaMalloc(&dk, nk * 2));
    CUDA_CHECK(cudaMalloc(&dv, nk * 2));
    CUDA_CHECK(cudaMalloc(&lse, size_t(B) * H * T * 4));
    const hydra::cuda::AttnShape s{B, T, H, Hkv, D};
    const float scale = 1.f / std::sqrt(float(D));
    const double flops = 4.0 * B * H * double(T) * T * D / 2;
    {
        hydra::cuda::AttnWorkspace ws(s);
        const float fwd = median_ms([&] { hydra::cuda::attention_forward(s, q, k, v, o, lse, scale); });
        emit("attn_fwd", B, T, H, D, fwd, double(B) * T, flops, 0);
        for (int minb = 1; minb <= 2; ++minb) {  // both register budgets, for the record
            hydra::cuda::attention_set_fwd_blocks_per_sm(minb);
            const float ms = median_ms([&] { hydra::cuda::attention_forward(s, q, k, v, o, lse, scale); });
            emit(minb == 1 ? "attn_fwd_1blk" : "attn_fwd_2blk", B, T, H, D, ms, double(B) * T, flops, 0);
        }
        hydra::cuda::attention_set_fwd_blocks_per_sm(0);
        const float fb = median_ms([&] {
            hydra::cuda::attention_forward(s, q, k, v, o, lse, scale);
            hydra::cuda::attention_backward(s, q, k, v, o, lse, dout, dq, dk, dv, scale, ws);
        });
        emit("attn_fwdbwd", B, T, H, D, fb, double(B) * T, flops * 3.5, 0);
        // cuDNN's fused attention (cudnn_attention.h), the training step's default where it loads
        static hydra::cuda::CudnnAttention cudnn_attn;
        if (cudnn_attn.supports(s)) {
            const float cf = median_ms([&] { cudnn_attn.forward(s, q, k, v, o, lse, scale, nullptr); });
            emit("attn_fwd_cudnn", B, T, H, D, cf, double(B) * T, flops, 0);
            const float cfb = median_ms([&] {
                cudnn_attn.forward(s, q, k, v, o, lse, scale, nullptr);
                cudnn_attn.backward(s, q, k, v, o, lse, dout, dq, dk, dv, scale, ws, nullptr);
            });
            emit("attn_fwdbwd_cudnn", B, T, H, D, cfb, double(B) * T, flops * 3.5, 0);
        } else {
            std::fprintf(stderr, "cuDNN attention not run: %s\n", cudnn_attn.reason().c_str());
        }
    }
    for (void* p :
         {(void*)q, (void*)k, (void*)v, (void*)dout, (void*)o, (void*)dq, (void*)dk, (void*)dv, (void*)lse})
        CUDA_CHECK(cudaFree(p));
}

// The single-token decode attention (gpu/decode_attention.h) of n_q query heads over L cached keys of n_kv
// KV heads, from a CUDA graph with the L2 flushed before each call (a model's layers each read their own
// cache: the K/V come from HBM). TB/s counts the cache's K and V once (2 x L x n_kv x D bf16): the
// kernel's floor is that at the HBM's bandwidth (shared/ANCHORS.md's copy ceiling).
void bench_decode_attention(int n_q, int n_kv, int D, int L, std::mt19937_64& gen) {
    const size_t nkv = size_t(L) * n_kv * D;
    bf16* q = dev_random<bf16>(size_t(n_q) * D, gen, -1.f, 1.f, true);
    bf16* k = dev_random<bf16>(nkv, gen, -1.f, 1.f, true);
    bf16* v = dev_random<bf16>(nkv, gen, -1.f, 1.f, true);
    std::vector<int32_t> idx(static_cast<size_t>(n_q));
    for (int h = 0; h < n_q; ++h) idx[size_t(h)] = h / (n_q / n_kv);
    int32_t* kv_index = nullptr;
    CUDA_CHECK(cudaMalloc(&kv_index, idx.size() * sizeof(int32_t)));
    CUDA_CHECK(cudaMemcpy(kv_index, idx.data(), idx.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    bf16* o = nullptr;
    CUDA_CHECK(cudaMalloc(&o, size_t(n_q) * D * 2));
    hydra::cuda::DeviceBuffer<float> ws;
    float* part = hydra::gpu::ensure_decode_attention_workspace(
        ws, int64_t(hydra::gpu::decode_attention_workspace_floats(n_q, D, L)), nullptr);
    const float scale = 1.f / std::sqrt(float(D));
    auto run = [&](cudaStream_t st) {
        hydra::gpu::decode_attention(o, q, k, v, kv_index, n_q, n_kv, D, L, scale, part, st);
    };
    run(nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const float ms = graph_ms(run);
    emit("decode_attention_graph", 1, L, n_q, D, ms, 1.0, 4.0 * L * n_q * D, 2.0 * nkv * 2);
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)kv_index, (void*)o}) CUDA_CHECK(cudaFree(p));
}

void bench_decode(int B, int H, int D, std::mt19937_64& gen) {
    const size_t nq = size_t(B) * H * D, ns = size_t(B) * H * D * D;
    bf16* q = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    bf16* k = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    bf16* v = dev_random<bf16>(nq, gen, -1.f, 1.f, true);
    float* g = dev_random<float>(size_t(B) * H, gen, -0.2f, -0.01f, false);
    float* beta = dev_random<float>(size_t(B) * H, gen, 0.3f, 0.9f, false);
    float* s0 = dev_random<float>(ns, gen, -1.f, 1.f, false);
    float* s1 = dev_random<float>(ns, gen, -1.f, 1.f, false);
    bf16* o;
    CUDA_CHECK(cudaMalloc(&o, nq * 2));
    const float scale = 1.f / std::sqrt(float(D));
    // separate in/out buffers like fla's fused recurrent (which returns a fresh final state)
    const float ms = median_ms(
        [&] { hydra::cuda::gdn_decode_step(B, H, H, D, q, k, v, g, beta, s0, s1, o, scale, true); });
    emit("gdn_decode", B, 1, H, D, ms, double(B), 0, 2.0 * ns * 4);
    const float ms_ip = median_ms(
        [&] { hydra::cuda::gdn_decode_step(B, H, H, D, q, k, v, g, beta, s0, s0, o, scale, true); });
    emit("gdn_decode_inplace", B, 1, H, D, ms_ip, double(B), 0, 2.0 * ns * 4);
    // GPU time alone, as fla's step replayed from a CUDA graph is measured
    const float ms_g = graph_ms([&](cudaStream_t st) {
        hydra::cuda::gdn_decode_step(B, H, H, D, q, k, v, g, beta, s0, s1, o, scale, true, st);
    });
    emit("gdn_decode_graph", B, 1, H, D, ms_g, double(B), 0, 2.0 * ns * 4);
    // the same bytes as one device-to-device copy of the state, from a graph: the step's ceiling
    const float ms_c = graph_ms(
        [&](cudaStream_t st) { CUDA_CHECK(cudaMemcpyAsync(s1, s0, ns * 4, cudaMemcpyDeviceToDevice, st)); });
    emit("state_copy_graph", B, 1, H, D, ms_c, double(B), 0, 2.0 * ns * 4);
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)g, (void*)beta, (void*)s0, (void*)s1, (void*)o})
        CUDA_CHECK(cudaFree(p));
}

}  // namespace

// One --shape value: BxTxHxD or BxTxHxDxHkv, every field a positive integer, D 64 or 128, H a multiple of
// Hkv. False (with the reason in *why) when it is not.
struct BenchShape {
    int B, T, H, D, Hkv;
};

bool parse_shape(const char* text, BenchShape& out, std::string& why) {
    long f[5] = {0, 0, 0, 0, 0};
    int n = 0;
    const char* p = text;
    while (*p && n < 5) {
        char* end = nullptr;
        const long x = std::strtol(p, &end, 10);
        if (end == p || x <= 0 || x > (1L << 24)) {
            why = "expected positive integers separated by 'x'";
            return false;
        }
        f[n++] = x;
        p = end;
        if (*p == 'x' && p[1] != '\0')
            ++p;
        else if (*p) {
            why = std::string("unexpected '") + *p + "'";
            return false;
        }
    }
    if (*p || n < 4) {
        why = "expected BxTxHxD or BxTxHxDxHkv";
        return false;
    }
    out = {int(f[0]), int(f[1]), int(f[2]), int(f[3]), n == 5 ? int(f[4]) : int(f[2])};
    if (out.D != 64 && out.D != 128) {
        why = "D must be 64 or 128";
        return false;
    }
    if (out.H % out.Hkv != 0) {
        why = "H must be a multiple of Hkv";
        return false;
    }
    if (double(out.B) * out.T * out.H * out.D > double(1L << 31)) {
        why = "B x T x H x D over 2^31 elements";
        return false;
    }
    return true;
}

int main(int argc, char** argv) {
    // --attn-only: the attention rows alone; --gdn-only: the GDN rows alone (decode and chunk)
    bool quick = false, attn_only = false, gdn_only = false, decode_only = false;
    std::vector<BenchShape> shapes;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--quick"))
            quick = true;
        else if (!std::strcmp(argv[i], "--attn-only"))
            attn_only = true;
        else if (!std::strcmp(argv[i], "--gdn-only"))
            gdn_only = true;
        else if (!std::strcmp(argv[i], "--decode-only"))
            decode_only = true;
        else if (!std::strcmp(argv[i], "--shape")) {
            BenchShape sh{};
            std::string why;
            if (i + 1 >= argc || !parse_shape(argv[i + 1], sh, why)) {
                std::fprintf(stderr, "--shape %s: %s\n", i + 1 < argc ? argv[i + 1] : "(missing)",
                             i + 1 < argc ? why.c_str() : "expected BxTxHxD or BxTxHxDxHkv");
                return 2;
            }
            shapes.push_back(sh);
            ++i;
        } else {
            std::fprintf(stderr,
                         "unknown argument '%s' (use --quick, --attn-only, --gdn-only, --decode-only or "
                         "--shape BxTxHxD[xHkv])\n",
                         argv[i]);
            return 2;
        }
    }
    if (int(attn_only) + int(gdn_only) + int(decode_only) > 1) {
        std::fprintf(stderr, "--attn-only, --gdn-only and --decode-only exclude each other\n");
        return 2;
    }
    std::mt19937_64 gen(12345);
    try {
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        std::fprintf(stderr, "device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
        const auto& cudnn = hydra::cuda::cudnn_library();
        std::fprintf(stderr, "cuDNN: %s\n",
                     cudnn.loaded ? ("version " + std::to_string(cudnn.version)).c_str() : cudnn.why.c_str());
        if (!shapes.empty()) {
            for (const BenchShape& sh : shapes) {
                if (!attn_only) bench_gdn(sh.B, sh.T, sh.H, sh.D, gen);
                if (!gdn_only) bench_attn(sh.B, sh.T, sh.H, sh.Hkv, sh.D, gen);
            }
            return 0;
        }
        if (!attn_only) {
            bench_decode(64, 16, 128, gen);
            bench_decode(64, 9, 64, gen);
        }
        if (!gdn_only)  // SmolLM2's heads (9 / 3, d 64) and a Llama-3-8B layer's (32 / 8, d 128)
            for (const int L : {512, 4096, 16384, 32768, 131072}) {
                bench_decode_attention(9, 3, 64, L, gen);
                bench_decode_attention(32, 8, 128, L, gen);
            }
        if (decode_only) return 0;
        const int anchors[3][2] = {{8, 4096}, {2, 16384}, {1, 65536}};
        for (int i = 0; i < (quick ? 1 : 3); ++i) {
            if (!attn_only) bench_gdn(anchors[i][0], anchors[i][1], 16, 128, gen);
            if (!gdn_only) bench_attn(anchors[i][0], anchors[i][1], 16, 16, 128, gen);
        }
        if (!attn_only) bench_gdn(8, 4096, 9, 64, gen);
        if (!gdn_only) {
            bench_attn(8, 4096, 9, 3, 64, gen);
            bench_attn(8, 2048, 9, 3, 64, gen);
        }  // SmolLM2's training shape (8 x 2048)
    } catch (const std::exception& e) {
        std::printf("ERROR: %s\n", e.what());
        return 2;
    }
    return 0;
}
