// bench_cpu_inference: prefill and decode throughput of a model on the CPU, in the same shape as
// llama.cpp's llama-bench (pp = prompt tokens in one batch, tg = tokens generated one at a time).
//   bench_cpu_inference [MODEL] [--pp 512] [--tg 128] [--reps 3] [--threads N] [--f32-activations]
//   [--q8-weights]
// --f32-activations decodes with the f32-activation GEMVs (the reference) instead of 8-bit activations;
// --q8-weights decodes from Q8_0 copies of the f32 linear weights (a model directory: a converted hybrid).
// Prints one JSON object per test with the median tokens/s over the repetitions.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/blas_kernels.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threading.h"
#include "model/kv_cache.h"
#include "model/llama_forward.h"
#include "model/model_loader.h"
#include "model/weight_quantizer.h"
#include "serve/sampler.h"

using namespace hydra;

int main(int argc, char** argv) {
    hydra::ensure_blas_kernels(argv);
    std::string model_path = std::string(HYDRA_SOURCE_DIR) + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    int64_t pp = 512, tg = 128;
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
        if (a == "--pp")
            pp = std::stoll(next());
        else if (a == "--tg")
            tg = std::stoll(next());
        else if (a == "--reps")
            reps = std::stoi(next());
        else if (a == "--threads")
            threads = std::stoi(next());
        else if (a == "--f32-activations")
            options.q8_activations = false;
        else if (a == "--q8-weights")
            q8_weights = true;
        else if (a.rfind("--", 0) == 0) {
            fmt::print(stderr,
                       "usage: bench_cpu_inference [MODEL] [--pp N] [--tg N] [--reps N] [--threads N] "
                       "[--f32-activations] [--q8-weights]\n");
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
        Rng rng(1234);
        std::vector<int32_t> prompt(static_cast<size_t>(pp));
        for (auto& t : prompt) t = int32_t(rng.next_u64() % uint64_t(cfg.vocab_size));
        using clock = std::chrono::steady_clock;
        std::vector<double> pp_rates, tg_rates;
        for (int r = 0; r < reps + 1; ++r) {  // the first repetition warms caches and is discarded
            KVCache cache(*m.model, std::max<int64_t>(pp, tg) + 1);  // the plan's layout: hybrids too
            auto t0 = clock::now();
            Tensor logits = forward_last_logits(*m.model, prompt, cache, options);
            const double pp_s = std::chrono::duration<double>(clock::now() - t0).count();
            cache.reset();
            int32_t tok = prompt[0];
            auto t1 = clock::now();
            for (int64_t i = 0; i < tg; ++i) {
                const int32_t one[1] = {tok};
                logits = forward_last_logits(*m.model, one, cache, options);
                tok = argmax({logits.f32(), size_t(cfg.vocab_size)});
            }
            const double tg_s = std::chrono::duration<double>(clock::now() - t1).count();
            if (r == 0) continue;
            pp_rates.push_back(double(pp) / pp_s);
            tg_rates.push_back(double(tg) / tg_s);
        }
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        fmt::print(
            "{{\"engine\": \"hydra\", \"test\": \"pp{}\", \"tokens_per_s\": {:.2f}, \"threads\": {}}}\n", pp,
            median(pp_rates), num_threads());
        fmt::print(
            "{{\"engine\": \"hydra\", \"test\": \"tg{}\", \"tokens_per_s\": {:.2f}, \"threads\": {}}}\n", tg,
            median(tg_rates), num_threads());
    } catch (const Error& e) {
        fmt::print(stderr, "bench_cpu_inference: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
