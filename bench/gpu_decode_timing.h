// Single-token decode speed of the GPU forward, eager launches vs CUDA graphs (src/gpu/gpu_forward.h), at a
// few cache lengths, for bench/gpu_decode_bench. Per model and length P: a prefill of
// P - 1 random tokens fills the cache, then `warmup` + `steps` greedy single-token steps through
// forward_argmax (the argmax and its 4 bytes back to the host, one synchronisation per token: what
// `hydra eval --device cuda` does per generated token); the `steps` are timed by the host clock, so a
// figure is the whole per-token latency, host work included. Eager first, then the same prefill and steps
// with graphs (the warm-up holds the captures). Both greedy streams must be equal (same kernels).
// Also the models the GPU decode benchmarks time (decode_models) and greedy steps timed one by one
// (timed_greedy_steps, for medians: bench/gpu_length_cost_bench).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "gpu/gpu_cache.h"
#include "gpu/gpu_forward.h"
#include "gpu/gpu_train_model.h"
#include "gpu_train_common.h"
#include "model/hybrid_conversion.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "model/plan_builders.h"

namespace hydra::bench {

struct DecodeModel {
    std::string name;
    std::unique_ptr<LlamaModel> model;
    int64_t teacher = -1;  // index of the teacher this is the 7:1 hybrid of, -1 for none
};

// The 7:1 hybrid of models[t]: converted from it, or with random weights of the same shape.
inline void add_hybrid(std::vector<DecodeModel>& models, size_t t, const std::string& name,
                       bool random_weights) {
    const LlamaModel& teacher = *models[t].model;
    const ModelConfig& c = teacher.config();
    const HybridPlan plan = build_plan(c, plan_request(c, "7:1", "kv", FusionKind::ScaleNorm, 1));
    std::unique_ptr<LlamaModel> h;
    if (random_weights) {
        h = std::make_unique<LlamaModel>(c, &plan);
        randomise(*h, 22);
    } else {
        h = convert_to_hybrid(teacher, plan, ConversionOptions{});
    }
    models.push_back(
        {fmt::format("{} 7:1 hybrid ({})", name, plan.ratio_summary()), std::move(h), int64_t(t)});
}

// Each MODEL and, for teachers (all-FA plans), its 7:1 conversion (random kv groups, seed 1) right after it;
// without paths random weights at SmolLM2-135M's shape, teacher then 7:1 hybrid (speed does not depend on
// the weights). `max_positions` (> 0) raises the random config's max_position_embeddings (a label only:
// RoPE without scaling has no limit).
inline std::vector<DecodeModel> decode_models(const std::vector<std::string>& paths,
                                              int64_t max_positions = 0) {
    std::vector<DecodeModel> models;
    if (paths.empty()) {
        ModelConfig c = smollm2_135m_config();
        if (max_positions > c.max_position_embeddings) c.max_position_embeddings = max_positions;
        auto teacher = std::make_unique<LlamaModel>(c);
        randomise(*teacher, 21);
        const std::string name = "SmolLM2-135M shape (random weights)";
        models.push_back({name + " teacher", std::move(teacher), -1});
        add_hybrid(models, 0, name, true);
        return models;
    }
    for (const std::string& p : paths) {
        LoadedModel m = load_model(p);
        const std::string name = std::filesystem::path(p).filename().string();
        const bool teacher = m.model->plan().is_all_fa();
        models.push_back({name, std::move(m.model), -1});
        if (teacher) add_hybrid(models, models.size() - 1, name, false);
    }
    return models;
}

// `n` greedy single-token steps from `tok` through forward_argmax, each timed by the host clock (the whole
// per-token latency: launch or replay, the argmax's 4 bytes back, one synchronisation). Returns the last
// token; the per-step milliseconds are appended to `ms`.
inline int32_t timed_greedy_steps(gpu::GpuForward& fwd, gpu::GpuCache& cache, int32_t tok, int64_t n,
                                  std::vector<double>& ms) {
    using clock = std::chrono::steady_clock;
    for (int64_t i = 0; i < n; ++i) {
        const auto t0 = clock::now();
        tok = fwd.forward_argmax(cache, std::span<const int32_t>(&tok, 1));
        ms.push_back(1000.0 * std::chrono::duration<double>(clock::now() - t0).count());
    }
    return tok;
}

struct DecodeTimingRow {
    std::string model;
    int64_t positions = 0;              // cache length at the first timed step
    double eager_ms = 0, graph_ms = 0;  // per token
    int64_t equal = 0, compared = 0;    // greedy tokens equal, of warm-up + timed steps
    int64_t captures = 0;               // graphs recorded during this length's graph run
    double capture_ms = 0;
};

// One model over `lengths` (each >= 2: the prefill needs a token), one cache sized for the longest (as hydra
// eval sizes it).
inline std::vector<DecodeTimingRow> time_decode(const LlamaModel& model, const std::string& name,
                                                const std::vector<int64_t>& lengths, int64_t steps,
                                                int64_t warmup) {
    using clock = std::chrono::steady_clock;
    gpu::GpuTrainModel gm(model, false);
    gpu::GpuForward fwd(gm);
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    gpu::GpuCache cache(gm, longest + warmup + steps + 1);
    std::vector<DecodeTimingRow> rows;
    for (int64_t P : lengths) {
        HYDRA_CHECK(P >= 2, "decode timing at {} positions: the prefill needs at least one token", P);
        Rng rng{uint64_t(P)};
        std::vector<int32_t> prompt(size_t(P - 1));
        for (int32_t& t : prompt) t = int32_t(rng.uniform() * double(model.config().vocab_size - 1));
        DecodeTimingRow row;
        row.model = name, row.positions = P;
        std::vector<int32_t> streams[2];
        // one untimed prefill first: with HYDRA_PREFILL_CUDNN_AFTER set, a shape's first sightings run our flash
        // kernel and later ones cuDNN (gpu/plan_admission.h); both modes' prefills must take the same path
        cache.reset(fwd.stream());
        (void)fwd.forward_argmax(cache, prompt);
        for (int mode = 0; mode < 2; ++mode) {
            const bool graphs = mode == 1;
            fwd.set_cuda_graphs(graphs);
            const gpu::GpuForward::GraphStats before = fwd.graph_stats();
            cache.reset(fwd.stream());
            int32_t tok = fwd.forward_argmax(cache, prompt);  // prefill (eager in both modes)
            for (int64_t i = 0; i < warmup; ++i) {
                streams[mode].push_back(tok);
                tok = fwd.forward_argmax(cache, std::span<const int32_t>(&tok, 1));
            }
            const auto t0 = clock::now();
            for (int64_t i = 0; i < steps; ++i) {
                streams[mode].push_back(tok);
                tok = fwd.forward_argmax(cache, std::span<const int32_t>(&tok, 1));
            }
            const double ms =
                1000.0 * std::chrono::duration<double>(clock::now() - t0).count() / double(steps);
            (graphs ? row.graph_ms : row.eager_ms) = ms;
            if (graphs) {
                row.captures = fwd.graph_stats().captures - before.captures;
                row.capture_ms = 1000.0 * (fwd.graph_stats().capture_seconds - before.capture_seconds);
                if (fwd.graph_stats().replays == before.replays) row.graph_ms = -1;  // graphs did not run
            }
        }
        row.compared = int64_t(streams[0].size());
        while (row.equal < row.compared && streams[0][size_t(row.equal)] == streams[1][size_t(row.equal)])
            ++row.equal;
        fmt::print(
            "decode timing {} at {} positions: eager {:.3f} ms/token, graphs {:.3f} ms/token ({:.2f}x); "
            "greedy {}/{} equal; {} captures ({:.1f} ms)\n",
            name, P, row.eager_ms, row.graph_ms, row.eager_ms / row.graph_ms, row.equal, row.compared,
            row.captures, row.capture_ms);
        std::fflush(stdout);
        rows.push_back(row);
    }
    fwd.set_cuda_graphs(true);
    return rows;
}

inline void print_decode_table(const std::vector<DecodeTimingRow>& rows, int64_t steps) {
    fmt::print(
        "\n| model | positions | eager ms/token | CUDA graphs ms/token | speed-up | greedy tokens equal |\n"
        "|---|---|---|---|---|---|\n");
    for (const DecodeTimingRow& r : rows)
        fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.2f}x | {}/{} |\n", r.model, r.positions, r.eager_ms,
                   r.graph_ms, r.eager_ms / r.graph_ms, r.equal, r.compared);
    fmt::print(
        "({} timed greedy steps per cell after the warm-up; host clock, one synchronisation per token)\n",
        steps);
}

}  // namespace hydra::bench
