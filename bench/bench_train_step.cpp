// bench_train_step: forward+backward tokens/s of the CPU training step (train/model_step, the pretraining CE
// objective) for a `hydra train` preset or for a real model's shape, on random tokens.
//   bench_train_step [--preset tiny-cpu | --model PATH] [--batch B] [--seq S] [--steps N] [--threads T]
// Prints one JSON object with the median tokens/s over the steps (after one warm-up step).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/blas_kernels.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threading.h"
#include "model/llama_model.h"
#include "model/model_loader.h"
#include "train/model_step.h"
#include "train/train_config.h"

using namespace hydra;

int main(int argc, char** argv) {
    hydra::ensure_blas_kernels(argv);
    std::string preset = "tiny-cpu", model_path;
    int64_t batch = -1, seq = -1, steps = 5;
    int threads = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fmt::print(stderr, "bench_train_step: {} needs a value\n", a);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--preset")
            preset = next();
        else if (a == "--model")
            model_path = next();
        else if (a == "--batch")
            batch = std::stoll(next());
        else if (a == "--seq")
            seq = std::stoll(next());
        else if (a == "--steps")
            steps = std::stoll(next());
        else if (a == "--threads")
            threads = std::stoi(next());
        else {
            fmt::print(stderr,
                       "usage: bench_train_step [--preset P | --model PATH] [--batch B] [--seq S] [--steps "
                       "N] [--threads T]\n");
            return 2;
        }
    }
    try {
        set_num_threads(threads);
        std::unique_ptr<LlamaModel> model;
        std::string name;
        if (!model_path.empty()) {
            model = std::move(load_model(model_path).model);
            name = model->config().name;
            if (batch < 0) batch = 1;
            if (seq < 0) seq = 256;
        } else {
            const TrainConfig c = TrainConfig::preset(preset);
            ModelConfig m = c.model_config(260, 256);  // the byte tokenizer's vocabulary and eos
            m.name = preset;
            model = std::make_unique<LlamaModel>(m);
            Rng init(1);
            for (int64_t i = 0; i < model->params().numel(); ++i)
                model->params().data()[i] = 0.02f * init.normal();
            name = preset;
            if (batch < 0) batch = c.batch_size;
            if (seq < 0) seq = c.seq_len;
        }
        const ModelConfig& cfg = model->config();
        Rng rng(7);
        std::vector<int32_t> inputs(static_cast<size_t>(batch * seq)), targets(inputs.size());
        for (auto& t : inputs) t = int32_t(rng.next_u64() % uint64_t(cfg.vocab_size));
        for (auto& t : targets) t = int32_t(rng.next_u64() % uint64_t(cfg.vocab_size));
        std::vector<float> grads(static_cast<size_t>(model->params().numel()));
        TrainBatch b{inputs.data(), targets.data(), batch, seq};
        std::vector<double> rates;
        for (int64_t s = 0; s < steps + 1; ++s) {
            std::fill(grads.begin(), grads.end(), 0.0f);
            const auto t0 = std::chrono::steady_clock::now();
            model_train_step<float>(cfg, model->plan(), model->params(), model->params().data(), grads.data(),
                                    b);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (s > 0) rates.push_back(double(batch * seq) / secs);
        }
        std::sort(rates.begin(), rates.end());
        fmt::print(
            "{{\"engine\": \"hydra\", \"model\": \"{}\", \"params\": {}, \"batch\": {}, \"seq\": {}, "
            "\"threads\": {}, \"fwd_bwd_tokens_per_s\": {:.1f}}}\n",
            name, model->params().parameter_count(), batch, seq, num_threads(), rates[rates.size() / 2]);
    } catch (const Error& e) {
        fmt::print(stderr, "bench_train_step: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
