// GPU batched decode (gpu/gpu_batch_backend.h, serving's continuous batching): the time of ONE batched
// decode step (a CUDA-graph replay over paged KV + GDN state slots) against the batch size B and the
// context every sequence holds, for SmolLM2-135M's shape with random weights (speed does not depend on the
// weights): the teacher and its 7:1 hybrid (random kv groups, seed 1). Sequences "hold" the context without
// a prefill (GpuBatchBackend::assume_filled: the pool's blocks as they are), so a cell costs only its steps.
// A cell whose KV does not fit in the device memory is reported as skipped. JSON lines on stdout, one per
// cell: model, plan, context, batch, ms_per_step, tokens_per_s, kv_bytes_per_seq, state_bytes_per_seq,
// graph captures / replays / fallbacks.
//
//   gpu_batch_decode_bench [--batches 1,2,4,8,16,32,64,128,256] [--contexts 1024,4096,16384,32768]
//                          [--steps 30] [--warmup 3] [--block 16] [--eager]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "gpu/gpu_batch_backend.h"
#include "gpu/gpu_train_model.h"
#include "gpu_train_common.h"
#include "model/plan_builders.h"

using namespace hydra;

namespace {

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> out;
    size_t p = 0;
    while (p < s.size()) {
        const size_t q = s.find(',', p);
        out.push_back(std::stoll(s.substr(p, q == std::string::npos ? std::string::npos : q - p)));
        if (q == std::string::npos) break;
        p = q + 1;
    }
    return out;
}

struct Args {
    std::vector<int64_t> batches{1, 2, 4, 8, 16, 32, 64, 128, 256}, contexts{1024, 4096, 16384, 32768};
    int64_t steps = 30, warmup = 3, block = 16;
    bool eager = false;
};

void run_model(const std::string& name, const LlamaModel& model, const Args& args) {
    gpu::GpuTrainModel gm(model, false);
    const int64_t V = model.config().vocab_size;
    int64_t max_b = 1;
    for (int64_t b : args.batches) max_b = std::max(max_b, b);
    for (const int64_t L : args.contexts) {
        gpu::GpuBatchOptions o;
        o.max_slots = max_b;
        o.context = L + args.warmup + args.steps + 1;
        o.block_size = args.block;
        o.cache_bytes = 0;  // most of the free device memory
        gpu::GpuBatchBackend be(gm, o);
        be.set_cuda_graphs(!args.eager);
        const size_t kv_seq = be.kv_bytes_per_position() * size_t(o.context);
        for (const int64_t B : args.batches) {
            std::vector<int32_t> slots;
            bool fits = true;
            for (int64_t i = 0; i < B && fits; ++i) {
                const int32_t s = be.acquire();
                slots.push_back(s);
                fits = s >= 0 && be.reserve(s, o.context);
            }
            auto json_head = [&] {
                return fmt::format(
                    R"({{"bench":"gpu_batch_decode","model":"{}","plan":"{}","context":{},"batch":{})", name,
                    model.plan().ratio_summary(), L, B);
            };
            if (!fits) {
                fmt::print(
                    "{},\"skipped\":\"the KV of {} sequences of {} positions does not fit ({} bytes "
                    "each)\"}}\n",
                    json_head(), B, o.context, kv_seq);
            } else {
                for (int32_t s : slots) be.assume_filled(s, L);
                std::vector<int32_t> toks(static_cast<size_t>(B));
                for (int64_t i = 0; i < B; ++i) toks[size_t(i)] = int32_t((i * 7919) % V);
                const auto before = be.graph_stats();
                for (int64_t i = 0; i < args.warmup; ++i) be.decode_on_device(slots, toks);
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                cudaStreamSynchronize(be.stream());
                cudaEventRecord(e0, be.stream());
                for (int64_t i = 0; i < args.steps; ++i) be.decode_on_device(slots, toks);
                cudaEventRecord(e1, be.stream());
                cudaEventSynchronize(e1);
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
                const auto& after = be.graph_stats();
                const double per = double(ms) / double(args.steps);
                fmt::print(
                    "{},\"ms_per_step\":{:.4f},\"tokens_per_s\":{:.1f},\"kv_bytes_per_seq\":{},"
                    "\"state_bytes_per_seq\":{},\"graphs\":{},\"captures\":{},\"replays\":{},\"fallbacks\":{}"
                    "}}\n",
                    json_head(), per, double(B) * 1000.0 / per, kv_seq, be.state_bytes_per_slot(),
                    be.cuda_graphs() ? "true" : "false", after.captures - before.captures,
                    after.replays - before.replays, after.fallbacks);
            }
            std::fflush(stdout);
            for (int32_t s : slots)
                if (s >= 0) be.release(s);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    Args args;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fmt::print(stderr, "{} needs a value\n", a);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--batches")
            args.batches = parse_list(next());
        else if (a == "--contexts")
            args.contexts = parse_list(next());
        else if (a == "--steps")
            args.steps = std::stoll(next());
        else if (a == "--warmup")
            args.warmup = std::stoll(next());
        else if (a == "--block")
            args.block = std::stoll(next());
        else if (a == "--eager")
            args.eager = true;
        else {
            fmt::print(
                stderr,
                "usage: gpu_batch_decode_bench [--batches 1,2,...,256] [--contexts 1024,4096,16384,32768] "
                "[--steps 30] [--warmup 3] [--block 16] [--eager]\n");
            return 2;
        }
    }
    for (int64_t b : args.batches)
        if (b < 1 || b > gpu::GpuBatchBackend::kMaxBucket) {
            fmt::print(stderr, "batch {} outside 1..{}\n", b, gpu::GpuBatchBackend::kMaxBucket);
            return 2;
        }
    try {
        const ModelConfig c = bench::smollm2_135m_config();
        {
            LlamaModel t(c);
            bench::randomise(t, 21);
            run_model("SmolLM2-135M shape teacher (random weights)", t, args);
        }
        const HybridPlan plan = build_plan(c, bench::plan_request(c, "7:1", "kv", FusionKind::ScaleNorm, 1));
        LlamaModel h(c, &plan);
        bench::randomise(h, 22);
        run_model("SmolLM2-135M shape 7:1 hybrid (random weights)", h, args);
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
}
