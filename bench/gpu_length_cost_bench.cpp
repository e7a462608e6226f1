// Cost at length on the GPU, teacher against its 7:1 hybrid (issue 34's "cost at length"): at each prompt
// length L (default 4K .. 128K) and for each model (bench/gpu_decode_timing.h decode_models: random weights
// at SmolLM2-135M's shape without MODEL, else each MODEL and its 7:1 conversion),
//   prefill  an L-token random prompt through GpuForward in chunks of --chunk tokens (each later chunk
//            one pass at pos0 > 0, cuDNN's bottom-right causal mask: gpu/prefill_attention.h); a first
//            pass builds the per-shape cuDNN plans and buffers (reported as cold), the second is the timed
//            one (host clock, each chunk synchronous: forward_argmax brings its token back);
//   decode   greedy single-token steps at positions L.. with CUDA graphs, each step timed by the host
//            clock, the median; as many steps as fit --decode-seconds (at least --min-steps, at most
//            --steps), so long lengths take fewer;
//   cache    GpuCache::kv_bytes() + state_bytes() of the cache the cell ran (capacity L + decode steps),
//            and the bytes per additional token (kv_bytes of a 1024-token cache / 1024: the K/V rows are
//            the only part that grows; the GDN state and conv windows are constant);
//   memory   peak device memory of the cell: the model's uploaded weights plus the high-water of the
//            device's used memory (cudaMemGetInfo after every chunk and after the decode; the stream-ordered
//            pool keeps its high-water reserved, so op scratch is seen) over what was used before the cell.
// Ratios are teacher / hybrid (prefill tokens/s: hybrid / teacher), so > 1 favours the hybrid.
//
// The physics: a decode step reads every cached K/V byte once (each FA head attends over all L keys) plus
// the weights and the GDN state (read and written), and does a few FLOPs per byte, far below the H200's
// ridge point, so it is HBM-bound: floor = (K/V bytes at L + 2 * state bytes + weight bytes) / bandwidth
// (~4.8 TB/s on an H200, --hbm-tbps). SmolLM2-135M's teacher holds 30 layers x 3 KV heads x 64 x (K + V)
// x 2 bytes = 23 KB per token, 3 GB at 128K: >= 0.63 ms per token from the K/V alone. The 7:1 hybrid keeps
// one KV group in eight, so 1/8 of those bytes (~0.08 ms at 128K), plus a GDN state of constant size (fp32
// (Dh, Dh) per LA head, ~4 MB in all); with ~0.27 GB of bf16 weights read per step by both, the floors at
// 128K are ~0.69 ms against ~0.14 ms (~5x), and the measured ratio approaches that as far as the kernels
// reach the bandwidth; at short lengths both are bound by the weights and the launch / replay latency and
// the ratio tends to 1. The prefill is quadratic in L through the FA heads' attention (the hybrid has 1/8
// of them) and linear through the GEMMs and the GDN chunked scan.
//
// Cells that would not fit are skipped with their reason instead of failing the run: a cache that does not
// fit in free device memory, an allocation failure, or the --max-seconds budget (each cell's time is
// predicted from the model's previous lengths, the prefill as b L + c L^2 through the last two; a prefill
// that runs past the budget is abandoned between chunks). The whole default run targets under ~4 minutes on
// one H200. Exit 1 when a cell ran but its decode did not replay graphs, or on an error outside a cell.
//
//   gpu_length_cost_bench [--lengths 4k,8k,16k,32k,64k,128k] [--chunk 8192] [--steps 200]
//       [--min-steps 20] [--warmup 10] [--decode-seconds 1.5] [--max-seconds 210] [--hbm-tbps 4.8]
//       [--json FILE] [MODEL...]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "eval/eval_runner.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu_decode_timing.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cudnn_attention.h"

using namespace hydra;

namespace {

using clock_type = std::chrono::steady_clock;

struct Options {
    std::vector<int64_t> lengths{4096, 8192, 16384, 32768, 65536, 131072};
    int64_t chunk = 8192, steps = 200, min_steps = 20, warmup = 10;
    double decode_seconds = 1.5, max_seconds = 210, hbm_tbps = 4.8;
    std::string json;
    std::vector<std::string> paths;
};

struct Cell {
    std::string model;
    int64_t model_index = 0, length = 0;
    std::string skipped;  // the reason, empty when the cell ran
    double prefill_s = 0, prefill_cold_s = 0, prefill_tok_s = 0;
    std::string prefill_path;  // what the last chunk's attention ran (cudnn / flash / decode)
    std::map<std::string, double> prefill_profile_ms;  // HYDRA_STEP_PROFILE=1: GPU ms per layer section
    int64_t decode_steps = 0;
    double decode_ms = 0, decode_p10_ms = 0, decode_p90_ms = 0, floor_ms = 0;
    bool graphs_ran = false;
    int64_t capacity = 0;
    size_t kv_bytes = 0, state_bytes = 0, bytes_per_token = 0, peak_bytes = 0;
    size_t cache_bytes() const { return kv_bytes + state_bytes; }
};

size_t device_used() {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

size_t device_free() {
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
}

// The default stream-ordered pool keeps what it reserved (so cudaMemGetInfo sees op scratch's high-water);
// trimmed to nothing between cells so that each cell starts from the same point.
cudaMemPool_t keep_pool_reserved() {
    cudaMemPool_t pool = nullptr;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t keep = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    return pool;
}

double quantile(std::vector<double> v, double q) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const double pos = q * double(v.size() - 1);
    const size_t i = size_t(pos);
    const double f = pos - double(i);
    return i + 1 < v.size() ? v[i] * (1 - f) + v[i + 1] * f : v[i];
}

// Prefill seconds (both passes) at `L` predicted from the model's previous cells (L, seconds): through the
// last two a + b L + c L^2 with a = 0 (prefill: linear GEMMs + quadratic attention), the larger of that and
// the quadratic scaling of the last one when only one is known; 0 with none (the first cell always runs).
double predict_seconds(const std::vector<std::pair<int64_t, double>>& seen, int64_t L) {
    if (seen.empty()) return 0;
    const auto [l1, t1] = seen.back();
    const double r = double(L) / double(l1);
    if (seen.size() < 2) return t1 * r * r;
    const auto [l0, t0] = seen[seen.size() - 2];
    // t = b L + c L^2 through (l0, t0), (l1, t1); b, c >= 0
    const double x0 = double(l0), x1 = double(l1);
    double c = (t1 / x1 - t0 / x0) / (x1 - x0), b = t1 / x1 - c * x1;
    if (c < 0) c = 0, b = t1 / x1;
    if (b < 0) b = 0, c = t1 / (x1 * x1);
    return b * double(L) + c * double(L) * double(L);
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    Rng rng{seed};
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& x : t) x = int32_t(rng.uniform() * double(vocab - 1));
    return t;
}

class LengthCostBench {
  public:
    explicit LengthCostBench(const Options& o)
        : o_(o), start_(clock_type::now()), pool_(keep_pool_reserved()) {}

    double elapsed() const { return std::chrono::duration<double>(clock_type::now() - start_).count(); }

    // One model at one length; `weights_bytes` is what its upload took on the device.
    Cell run(const gpu::GpuTrainModel& gm, const std::string& name, int64_t index, int64_t L,
             size_t weights_bytes, std::vector<std::pair<int64_t, double>>& seen) {
        Cell c;
        c.model = name, c.model_index = index, c.length = L;
        // both prefill passes + the decode's slice + its warm-up + ~1 s for the cache, buffers, graph
        // captures
        const double predicted = predict_seconds(seen, L) + 1.2 * o_.decode_seconds + 1.0;
        if (!seen.empty() && elapsed() + predicted > o_.max_seconds) {
            c.skipped = fmt::format("time budget: ~{:.0f} s predicted, {:.0f} s of --max-seconds {:.0f} left",
                                    predicted, o_.max_seconds - elapsed(), o_.max_seconds);
            return c;
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
        const size_t used0 = device_used();
        size_t high = used0;
        auto sample = [&] { high = std::max(high, device_used()); };
        try {
            c.capacity = L + o_.warmup + o_.steps + 1;
            {
                gpu::GpuCache probe(gm, 1024);
                c.bytes_per_token = probe.kv_bytes() / 1024;
                c.state_bytes = probe.state_bytes();
            }
            const size_t need = c.bytes_per_token * size_t(c.capacity) + c.state_bytes;
            const size_t free_b = device_free();
            if (need + (size_t(1) << 30) > free_b) {  // + 1 GiB for activations and workspaces
                c.skipped = fmt::format("memory: the cache needs {:.2f} GiB, {:.2f} GiB free",
                                        double(need) / 0x1p30, double(free_b) / 0x1p30);
                return c;
            }
            gpu::GpuForward fwd(gm);
            fwd.set_cuda_graphs(true);
            gpu::GpuCache cache(gm, c.capacity);
            c.kv_bytes = cache.kv_bytes();
            c.state_bytes = cache.state_bytes();
            const std::vector<int32_t> prompt = random_tokens(L, gm.config().vocab_size, uint64_t(L));
            int32_t tok = 0;
            // HYDRA_STEP_PROFILE=1: a third, untimed pass with CUDA events at the layer's sections
            const char* prof_env = std::getenv("HYDRA_STEP_PROFILE");
            const bool profile = prof_env && std::string(prof_env) == "1";
            for (int pass = 0; pass < (profile ? 3 : 2); ++pass) {
                if (pass == 2) fwd.enable_profile();
                cache.reset(fwd.stream());
                const auto t0 = clock_type::now();
                for (int64_t off = 0; off < L; off += o_.chunk) {
                    const int64_t n = std::min(o_.chunk, L - off);
                    tok = fwd.forward_argmax(cache, std::span<const int32_t>(prompt.data() + off, size_t(n)));
                    sample();
                    if (elapsed() > o_.max_seconds) {
                        c.skipped = fmt::format(
                            "time budget: --max-seconds {:.0f} reached in the {} prefill pass after {} of {} "
                            "tokens",
                            o_.max_seconds, pass == 0 ? "first" : "timed", off + n, L);
                        return c;
                    }
                }
                if (pass == 2) {
                    c.prefill_profile_ms = fwd.collect_profile();
                    continue;
                }
                (pass == 0 ? c.prefill_cold_s : c.prefill_s) =
                    std::chrono::duration<double>(clock_type::now() - t0).count();
            }
            c.prefill_tok_s = double(L) / c.prefill_s;
            c.prefill_path = fwd.prefill_attention().last_path();
            // decode: the warm-up holds the graph captures; it sizes the timed steps
            std::vector<double> warm_ms, ms;
            tok = bench::timed_greedy_steps(fwd, cache, tok, o_.warmup, warm_ms);
            const int64_t replays0 = fwd.graph_stats().replays;
            const double est = std::max(1e-3, quantile(warm_ms, 0.5));
            c.decode_steps = std::clamp(int64_t(o_.decode_seconds * 1000.0 / est),
                                        std::min(o_.min_steps, o_.steps), o_.steps);
            tok = bench::timed_greedy_steps(fwd, cache, tok, c.decode_steps, ms);
            (void)tok;
            sample();
            c.decode_ms = quantile(ms, 0.5), c.decode_p10_ms = quantile(ms, 0.1),
            c.decode_p90_ms = quantile(ms, 0.9);
            c.graphs_ran = fwd.graph_stats().replays - replays0 >= c.decode_steps;
            const double read =
                double(c.bytes_per_token) * double(L) + 2.0 * double(c.state_bytes) + double(weights_bytes);
            c.floor_ms = 1000.0 * read / (o_.hbm_tbps * 1e12);
            CUDA_CHECK(cudaStreamSynchronize(fwd.stream()));
            sample();
        } catch (const std::exception& e) {
            (void)cudaGetLastError();  // an allocation failure is not sticky: clear it for the next cell
            c.skipped = fmt::format("failed: {}", e.what());
            return c;
        }
        c.peak_bytes = weights_bytes + (high - used0);
        seen.emplace_back(L, c.prefill_cold_s + c.prefill_s);
        return c;
    }

  private:
    const Options& o_;
    clock_type::time_point start_;
    cudaMemPool_t pool_;
};

std::string mib(size_t b) {
    return fmt::format("{:.1f}", double(b) / 0x1p20);
}

std::string length_label(int64_t L) {
    return L % 1024 == 0 ? fmt::format("{}K", L / 1024) : fmt::format("{}", L);
}

// A JSON string literal of s (quotes, backslashes and control characters escaped).
std::string json_str(const std::string& s) {
    std::string out = "\"";
    for (const char ch : s) {
        if (ch == '"' || ch == '\\')
            out += '\\', out += ch;
        else if (static_cast<unsigned char>(ch) < 0x20)
            out += fmt::format("\\u{:04x}", int(ch));
        else
            out += ch;
    }
    return out + "\"";
}

std::string json_line(const Cell& c, const std::string& device, size_t weights_bytes) {
    std::string s = fmt::format(R"({{"kind": "cell", "device": {}, "model": {}, "length": {}, )",
                                json_str(device), json_str(c.model), c.length);
    if (!c.skipped.empty()) return s + fmt::format(R"("skipped": {}}})", json_str(c.skipped));
    std::string profile;  // HYDRA_STEP_PROFILE=1: , "prefill_profile_ms": {section: ms, ...}
    if (!c.prefill_profile_ms.empty()) {
        const char* sep = "";
        for (const auto& [k, v] : c.prefill_profile_ms)
            profile += fmt::format(R"({}{}: {:.3f})", sep, json_str(k), v), sep = ", ";
        profile = R"(, "prefill_profile_ms": {)" + profile + "}";
    }
    return s +
           fmt::format(
               R"("prefill_s": {:.4f}, "prefill_cold_s": {:.4f}, "prefill_tok_s": {:.0f}, "prefill_attention": {}, )"
               R"("decode_ms": {:.4f}, "decode_p10_ms": {:.4f}, "decode_p90_ms": {:.4f}, "decode_steps": {}, )"
               R"("hbm_floor_ms": {:.4f}, "cache_capacity": {}, "kv_bytes": {}, "state_bytes": {}, )"
               R"("cache_bytes": {}, "bytes_per_token": {}, "weights_bytes": {}, "peak_bytes": {}{}}})",
               c.prefill_s, c.prefill_cold_s, c.prefill_tok_s, json_str(c.prefill_path), c.decode_ms,
               c.decode_p10_ms, c.decode_p90_ms, c.decode_steps, c.floor_ms, c.capacity, c.kv_bytes,
               c.state_bytes, c.cache_bytes(), c.bytes_per_token, weights_bytes, c.peak_bytes, profile);
}

void print_row(const std::string& label, const Cell& c) {
    if (!c.skipped.empty()) {
        fmt::print("| {} | {} | skipped: {} | | | | | | |\n", length_label(c.length), label, c.skipped);
        return;
    }
    fmt::print("| {} | {} | {:.3f} ({:.3f} cold) | {:.0f} | {:.3f} ({}) | {:.3f} | {} | {} | {} |\n",
               length_label(c.length), label, c.prefill_s, c.prefill_cold_s, c.prefill_tok_s, c.decode_ms,
               c.decode_steps, c.floor_ms, mib(c.cache_bytes()), c.bytes_per_token, mib(c.peak_bytes));
}

void print_ratio(const Cell& t, const Cell& h) {
    if (!t.skipped.empty() || !h.skipped.empty()) {
        fmt::print("| {} | ratio teacher / hybrid | n/a (a cell was skipped) | | | | | | |\n",
                   length_label(t.length));
        return;
    }
    fmt::print(
        "| {} | **ratio teacher / hybrid** | {:.2f}x | {:.2f}x | **{:.2f}x** | {:.2f}x | **{:.2f}x** | "
        "{:.2f}x | {:.2f}x |\n",
        length_label(t.length), t.prefill_s / h.prefill_s, h.prefill_tok_s / t.prefill_tok_s,
        t.decode_ms / h.decode_ms, t.floor_ms / h.floor_ms, double(t.cache_bytes()) / double(h.cache_bytes()),
        double(t.bytes_per_token) / double(h.bytes_per_token), double(t.peak_bytes) / double(h.peak_bytes));
}

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo) {
    char* end = nullptr;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    HYDRA_CHECK(!v.empty() && *end == 0 && x >= lo, "{} wants an integer >= {} (got '{}')", flag, lo, v);
    return int64_t(x);
}

double parse_pos(const std::string& flag, const std::string& v) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    HYDRA_CHECK(!v.empty() && *end == 0 && x > 0, "{} wants a positive number (got '{}')", flag, v);
    return x;
}

Options parse_args(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            HYDRA_CHECK(i + 1 < argc, "{} needs a value", a);
            return argv[++i];
        };
        if (a == "--lengths") {
            o.lengths = parse_lengths(next());
            HYDRA_CHECK(o.lengths.front() >= 2, "--lengths: each length must be at least 2 tokens");
        } else if (a == "--chunk")
            o.chunk = parse_int(a, next(), 1);
        else if (a == "--steps")
            o.steps = parse_int(a, next(), 1);
        else if (a == "--min-steps")
            o.min_steps = parse_int(a, next(), 1);
        else if (a == "--warmup")
            o.warmup = parse_int(a, next(), 1);
        else if (a == "--decode-seconds")
            o.decode_seconds = parse_pos(a, next());
        else if (a == "--max-seconds")
            o.max_seconds = parse_pos(a, next());
        else if (a == "--hbm-tbps")
            o.hbm_tbps = parse_pos(a, next());
        else if (a == "--json")
            o.json = next();
        else if (a.rfind("--", 0) == 0)
            HYDRA_CHECK(false,
                        "unknown option {}; usage: gpu_length_cost_bench [--lengths 4k,8k,16k,32k,64k,128k] "
                        "[--chunk 8192] [--steps 200] [--min-steps 20] [--warmup 10] [--decode-seconds 1.5] "
                        "[--max-seconds 210] [--hbm-tbps 4.8] [--json FILE] [MODEL...]",
                        a);
        else
            o.paths.push_back(a);
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    try {
        o = parse_args(argc, argv);
    } catch (const std::exception& e) {
        fmt::print(stderr, "gpu_length_cost_bench: {}\n", e.what());
        return 2;
    }
    try {
        std::unique_ptr<std::FILE, int (*)(std::FILE*)> json_file(nullptr, &std::fclose);
        if (!o.json.empty()) {
            json_file.reset(std::fopen(o.json.c_str(), "w"));
            HYDRA_CHECK(json_file != nullptr, "cannot write --json file {}", o.json);
        }
        std::FILE* json = json_file.get();
        auto emit = [&](const std::string& line) {
            if (!json) return;
            std::fputs((line + "\n").c_str(), json);
            std::fflush(json);
        };
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        const cuda::CudnnLibrary& lib = cuda::cudnn_library();
        const std::string cudnn = lib.loaded ? std::to_string(lib.version) : lib.why;
        fmt::print("device {}, cuDNN {}; chunk {}, budget {:.0f} s, HBM {:.1f} TB/s for the floor\n",
                   prop.name, cudnn, o.chunk, o.max_seconds, o.hbm_tbps);
        emit(fmt::format(
            R"({{"kind": "env", "device": {}, "cudnn": {}, "chunk": {}, "max_seconds": {}, )"
            R"("decode_seconds": {}, "steps": {}, "min_steps": {}, "warmup": {}, "hbm_tbps": {}}})",
            json_str(prop.name), json_str(cudnn), o.chunk, o.max_seconds, o.decode_seconds, o.steps,
            o.min_steps, o.warmup, o.hbm_tbps));
        LengthCostBench bench(o);
        std::vector<bench::DecodeModel> models =
            bench::decode_models(o.paths, o.lengths.back() + o.steps + o.warmup + 1);
        // every model resident at once (weights only): the length loop runs all models at a length first, so
        // a spent budget costs the longest lengths of both, never one side of a pair
        std::vector<std::unique_ptr<gpu::GpuTrainModel>> gms;
        std::vector<size_t> weights_bytes;
        for (const bench::DecodeModel& m : models) {
            CUDA_CHECK(cudaDeviceSynchronize());
            const size_t before = device_used();
            gms.push_back(std::make_unique<gpu::GpuTrainModel>(*m.model, false));
            CUDA_CHECK(cudaDeviceSynchronize());
            weights_bytes.push_back(device_used() - before);
        }
        std::vector<std::vector<std::pair<int64_t, double>>> seen(models.size());
        std::vector<std::vector<Cell>> cells(models.size());
        int failed = 0;
        for (int64_t L : o.lengths)
            for (size_t i = 0; i < models.size(); ++i) {
                Cell c = bench.run(*gms[i], models[i].name, int64_t(i), L, weights_bytes[i], seen[i]);
                if (c.skipped.empty())
                    fmt::print(
                        "{} at {}: prefill {:.3f} s ({:.0f} tok/s, cold {:.3f} s, attention {}), "
                        "decode {:.3f} ms/token median of {} (p10 {:.3f}, p90 {:.3f}; HBM floor {:.3f}), "
                        "cache {} MiB ({} B/token), peak {} MiB [{:.0f} s]\n",
                        c.model, length_label(L), c.prefill_s, c.prefill_tok_s, c.prefill_cold_s,
                        c.prefill_path, c.decode_ms, c.decode_steps, c.decode_p10_ms, c.decode_p90_ms,
                        c.floor_ms, mib(c.cache_bytes()), c.bytes_per_token, mib(c.peak_bytes),
                        bench.elapsed());
                else
                    fmt::print("{} at {}: skipped: {}\n", c.model, length_label(L), c.skipped);
                std::fflush(stdout);
                if (c.skipped.empty() && !c.graphs_ran) {
                    fmt::print("FAIL: {} at {}: the decode steps did not replay CUDA graphs\n", c.model,
                               length_label(L));
                    ++failed;
                }
                emit(json_line(c, prop.name, weights_bytes[i]));
                cells[i].push_back(c);
                if (models[i].teacher >= 0) {
                    const Cell& t = cells[size_t(models[i].teacher)].back();
                    if (t.skipped.empty() && c.skipped.empty())
                        emit(fmt::format(
                            R"({{"kind": "ratio", "teacher": {}, "hybrid": {}, "length": {}, "prefill_speedup": {:.4f}, )"
                            R"("decode_speedup": {:.4f}, "cache_ratio": {:.4f}, "bytes_per_token_ratio": {:.4f}, )"
                            R"("peak_ratio": {:.4f}}})",
                            json_str(t.model), json_str(c.model), L, t.prefill_s / c.prefill_s,
                            t.decode_ms / c.decode_ms, double(t.cache_bytes()) / double(c.cache_bytes()),
                            double(t.bytes_per_token) / double(c.bytes_per_token),
                            double(t.peak_bytes) / double(c.peak_bytes)));
                }
            }
        fmt::print(
            "\n| length | model | prefill s (cold) | prefill tok/s | decode ms/token (steps) | HBM floor ms "
            "| cache MiB | cache B/token | peak MiB |\n|---|---|---|---|---|---|---|---|---|\n");
        for (size_t k = 0; k < o.lengths.size(); ++k)
            for (size_t i = 0; i < models.size(); ++i) {
                print_row(models[i].name, cells[i][k]);
                if (models[i].teacher >= 0) print_ratio(cells[size_t(models[i].teacher)][k], cells[i][k]);
            }
        fmt::print(
            "(prefill: the timed second pass in chunks of {}, host clock; decode: CUDA graphs, median "
            "per-token latency; cache: capacity = length + decode steps; floor: (K/V at the length + 2 x "
            "state + weights) / {:.1f} TB/s)\n",
            o.chunk, o.hbm_tbps);
        // issue 34's target at the longest length run: decode >= 3x faster, cache >= 8x smaller
        for (size_t i = 0; i < models.size(); ++i) {
            if (models[i].teacher < 0) continue;
            const Cell& h = cells[i].back();
            const Cell& t = cells[size_t(models[i].teacher)].back();
            if (!t.skipped.empty() || !h.skipped.empty()) {
                fmt::print("target at {}: not measured (a cell was skipped)\n", length_label(h.length));
                continue;
            }
            const double dr = t.decode_ms / h.decode_ms,
                         cr = double(t.cache_bytes()) / double(h.cache_bytes());
            fmt::print(
                "target at {} ({}): decode {:.2f}x faster (>= 3x: {}), cache {:.2f}x smaller (>= 8x: {})\n",
                length_label(h.length), h.model, dr, dr >= 3 ? "met" : "NOT met", cr,
                cr >= 8 ? "met" : "NOT met");
        }
        fmt::print("total {:.0f} s\n", bench.elapsed());
        return failed == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        fmt::print(stderr, "gpu_length_cost_bench: {}\n", e.what());
        return 1;
    }
}
