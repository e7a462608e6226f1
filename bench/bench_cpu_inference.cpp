// bench_cpu_inference: prefill and decode throughput of a model on the CPU, in the same shape as
// llama.cpp's llama-bench (pp = prompt tokens in one batch, tg = tokens generated one at a time).
//   bench_cpu_inference [MODEL] [--pp 512] [--tg 128] [--depth 0] [--reps 3] [--threads N]
//   [--f32-activations] [--q8-weights]
// --depth D runs each test after a context of D tokens, prefilled untimed before it (llama-bench's -d):
// the cost at length, with the median time of that prefill (one pass over D tokens). --pp 0 or --tg 0
// leaves that test out (a long depth is prefilled once per test). tg at depth 0 decodes after one token.
// --f32-activations decodes with the f32-activation GEMVs (the reference) instead of 8-bit activations;
// --q8-weights decodes from Q8_0 copies of the f32 linear weights (a model directory: a converted hybrid).
// Prints one JSON object per test with the median tokens/s over the repetitions.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/blas_kernels.h"
#include "core/error.h"
#include "core/parse_number.h"
#include "core/threading.h"
#include "eval/decode_cost.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model/weight_quantizer.h"

using namespace hydra;

int main(int argc, char** argv) {
    hydra::ensure_blas_kernels(argv);
    std::string model_path = std::string(HYDRA_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int64_t pp = 512, tg = 128, depth = 0;
    int reps = 3, threads = 0;
    ForwardOptions options;
    bool q8_weights = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fmt::print(stderr, "bench_cpu_inference: {} needs a value\n", a);
                std::exit(2);
            }
            return argv[++i];
        };
        // a whole number in [lo, hi], else exit 2 naming the option
        auto count = [&](int64_t lo, int64_t hi) -> int64_t {
            const std::string v = next();
            const std::optional<int64_t> n = parse_int64(v);
            if (!n || *n < lo || *n > hi) {
                fmt::print(stderr, "bench_cpu_inference: {} '{}': expected a whole number in [{}, {}]\n", a,
                           v, lo, hi);
                std::exit(2);
            }
            return *n;
        };
        if (a == "--pp")
            pp = count(0, 1 << 20);
        else if (a == "--tg")
            tg = count(0, 1 << 20);
        else if (a == "--depth")
            depth = count(0, 1 << 20);
        else if (a == "--reps")
            reps = int(count(1, 1000));
        else if (a == "--threads")
            threads = int(count(0, 4096));
        else if (a == "--f32-activations")
            options.q8_activations = false;
        else if (a == "--q8-weights")
            q8_weights = true;
        else if (a.rfind("--", 0) == 0) {
            fmt::print(stderr,
                       "usage: bench_cpu_inference [MODEL] [--pp N] [--tg N] [--depth N] [--reps N] "
                       "[--threads N] [--f32-activations] [--q8-weights]\n");
            return 2;
        } else
            model_path = a;
    }
    try {
        set_num_threads(threads);
        LoadedModel m = load_model(model_path);
        if (q8_weights) quantize_linear_weights(*m.model);  // what --quantize-weights q8_0 does in the CLI
        const ModelConfig& cfg = m.model->config();
        // Random token ids, as llama-bench uses: throughput does not depend on the text.
        const std::vector<int32_t> context = random_token_ids(depth, cfg.vocab_size, 1234),
                                   prompt = random_token_ids(std::max<int64_t>(pp, 1), cfg.vocab_size, 1235);
        using clock = std::chrono::steady_clock;
        auto seconds_of = [](auto&& run) {
            const auto t0 = clock::now();
            run();
            return std::chrono::duration<double>(clock::now() - t0).count();
        };
        std::vector<double> depth_seconds;  // each prefill of the depth's context (one pass)
        size_t pp_cache = 0, tg_cache = 0;  // the cache as each test leaves it
        // pp: a fresh sequence holding the depth's context (a recurrent state cannot be rewound, so each test
        // prefills its own), then the prompt in one batch, timed.
        KVCache cache(*m.model, std::max<int64_t>(1, depth + pp));  // the plan's layout: hybrids too
        auto pp_once = [&](int64_t n, bool at_depth) {
            cache.reset();
            if (at_depth && depth > 0)
                depth_seconds.push_back(
                    seconds_of([&] { forward_last_logits(*m.model, context, cache, options); }));
            const double s = seconds_of([&] {
                forward_last_logits(*m.model, std::span<const int32_t>(prompt.data(), size_t(n)), cache,
                                    options);
            });
            pp_cache = cache.bytes_per_token() * size_t(cache.pos()) + cache.state_bytes();
            return double(n) / s;
        };
        // tg: greedy single-token steps after the context (eval/decode_cost; at depth 0 after one token).
        auto tg_once = [&](int64_t n, bool at_depth) {
            const bool deep = at_depth && depth > 0;
            const std::vector<int32_t> ctx = deep ? context : std::vector<int32_t>{prompt[0]};
            const DecodeCost c = measure_decode_cost(*m.model, ctx, n, options);
            if (deep) depth_seconds.push_back(c.prefill_seconds);
            tg_cache = c.cache_bytes;
            return c.decode_tokens_per_second;
        };
        // Warm-up (discarded): short passes warm the weights and the allocator.
        pp_once(std::min<int64_t>(std::max<int64_t>(pp, 1), 64), false);
        if (tg > 0) tg_once(std::min<int64_t>(tg, 8), false);
        std::vector<double> pp_rates, tg_rates;
        for (int r = 0; r < reps; ++r) {
            if (pp > 0) pp_rates.push_back(pp_once(pp, true));
            if (tg > 0) tg_rates.push_back(tg_once(tg, true));
        }
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        auto report = [&](const char* kind, int64_t n, const std::vector<double>& rates, size_t bytes) {
            if (rates.empty()) return;
            fmt::print(
                "{{\"engine\": \"hydra\", \"test\": \"{}{}\", \"depth\": {}, \"tokens_per_s\": {:.2f}, "
                "\"threads\": {}, \"kv_bytes_per_token\": {}, \"cache_bytes\": {}}}\n",
                kind, n, depth, median(rates), num_threads(), cache.bytes_per_token(), bytes);
        };
        report("pp", pp, pp_rates, pp_cache);
        report("tg", tg, tg_rates, tg_cache);
        if (!depth_seconds.empty())  // the prefill of the whole context in one pass: the cost at length
            fmt::print(
                "{{\"engine\": \"hydra\", \"test\": \"prefill{}\", \"seconds\": {:.3f}, \"threads\": {}}}\n",
                depth, median(depth_seconds), num_threads());
    } catch (const Error& e) {
        fmt::print(stderr, "bench_cpu_inference: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
