// bf16_floor_bench: how far bf16 rounding moves the CPU training step's gradients of a model, per tensor: the
// GEMM weights rounded to bf16 (what the GPU reads), and bf16 storage (the weights, and every product's
// operands and fresh outputs: core/gemm.h set_gemm_bf16_rounding), each against the fp32 step. The GPU
// training-step parity test (tests/gpu/test_train_step.cpp) accepts a GPU gradient within twice the storage
// floor; this prints the floors of its real-model case so that they can be read beside the GPU's errors.
//   bf16_floor_bench MODEL [--batch 1] [--seq 256] [--layers 0,15,29]
// The batch is the test's: random ids (seed 11 + seq), targets (seed 12 + seq) with every 17th ignored; the
// CE objective, every tensor trainable. Prints one line per tensor of the listed layers and the non-layer
// tensors, then the whole-vector floors.
#include <cmath>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/blas_kernels.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/parse_number.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "train/bf16_weights.h"
#include "train/model_step.h"

using namespace hydra;

namespace {

double rel_rms(const float* a, const float* ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = double(a[i]) - double(ref[i]);
        num += d * d, den += double(ref[i]) * double(ref[i]);
    }
    return den > 0 ? std::sqrt(num / den) : 0.0;
}

std::vector<int32_t> random_ids(int64_t n, int64_t V, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(std::min<double>(double(V - 1), rng.uniform() * double(V)));
    return t;
}

// A whole-string integer from the command line, or a hydra::Error naming the option.
int64_t int_arg(const std::string& text, const char* option) {
    const std::optional<int64_t> v = parse_int64(text);
    HYDRA_CHECK(v.has_value(), "bf16_floor_bench: {} takes an integer, not '{}'", option, text);
    return *v;
}

// The layer index of an arena name "model.layers.L.*", or -1.
int64_t layer_of(const std::string& name) {
    const std::string p = "model.layers.";
    if (name.rfind(p, 0) != 0) return -1;
    return std::strtoll(name.c_str() + p.size(), nullptr, 10);
}

}  // namespace

int main(int argc, char** argv) {
    ensure_blas_kernels(argv);
    try {
        std::string path;
        int64_t B = 1, T = 256;
        std::set<int64_t> layers{0, 15, 29};
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto next = [&]() -> std::string {
                HYDRA_CHECK(i + 1 < argc, "bf16_floor_bench: {} needs a value", a);
                return argv[++i];
            };
            if (a == "--batch")
                B = int_arg(next(), "--batch");
            else if (a == "--seq")
                T = int_arg(next(), "--seq");
            else if (a == "--layers") {
                layers.clear();
                const std::string list = next();
                size_t at = 0;
                while (at <= list.size()) {
                    const size_t comma = std::min(list.find(',', at), list.size());
                    layers.insert(int_arg(list.substr(at, comma - at), "--layers"));
                    at = comma + 1;
                }
            } else if (a.rfind("--", 0) == 0)
                fail("bf16_floor_bench: unknown option {}", a);
            else
                path = a;
        }
        HYDRA_CHECK(!path.empty(), "usage: bf16_floor_bench MODEL [--batch B] [--seq T] [--layers 0,15,29]");
        HYDRA_CHECK(B >= 1 && T >= 2, "bf16_floor_bench: --batch >= 1 and --seq >= 2");
        LoadedModel loaded = load_model(path);
        const LlamaModel& m = *loaded.model;
        const ParamArena& layout = m.params();
        const int64_t n = layout.numel(), N = B * T, V = m.config().vocab_size;
        const std::vector<int32_t> inputs = random_ids(N, V, 11 + uint64_t(T));
        std::vector<int32_t> targets = random_ids(N, V, 12 + uint64_t(T));
        for (int64_t i = 0; i < N; i += 17) targets[size_t(i)] = -1;
        const TrainBatch batch{inputs.data(), targets.data(), B, T};

        const std::vector<float> p16 = bf16_gemm_weights(layout, layout.data());
        std::vector<float> g(size_t(n), 0.f), g_weights(size_t(n), 0.f), g_storage(size_t(n), 0.f);
        model_train_step<float>(m.config(), m.plan(), layout, layout.data(), g.data(), batch);
        model_train_step<float>(m.config(), m.plan(), layout, p16.data(), g_weights.data(), batch);
        set_gemm_bf16_rounding(true);
        model_train_step<float>(m.config(), m.plan(), layout, p16.data(), g_storage.data(), batch);
        set_gemm_bf16_rounding(false);

        fmt::print("{} (B {} x T {}): gradient relative RMS against the fp32 step\n", path, B, T);
        fmt::print("| tensor | bf16 weights | bf16 storage |\n|---|---|---|\n");
        for (const ArenaEntry& e : layout.entries()) {
            const int64_t l = layer_of(e.name);
            if (l >= 0 && !layers.count(l)) continue;
            const int64_t cnt = shape_numel(e.shape);
            const size_t o = size_t(e.offset);
            fmt::print("| {} | {:.3e} | {:.3e} |\n", e.name, rel_rms(g_weights.data() + o, g.data() + o, cnt),
                       rel_rms(g_storage.data() + o, g.data() + o, cnt));
        }
        fmt::print("| whole vector | {:.3e} | {:.3e} |\n", rel_rms(g_weights.data(), g.data(), n),
                   rel_rms(g_storage.data(), g.data(), n));
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "bf16_floor_bench: {}\n", e.what());
        return 1;
    }
}
