// Training-step throughput of the GPU path (src/gpu/gpu_train_step.h + DeviceAdamW) for SmolLM2-135M and
// its 7:1 HydraHead hybrid (random kv groups, scale-norm fusion): whole steps (zero grads, forward, CE
// through the LM head, backward, grad norm, AdamW), CUDA-synchronised wall clock, median over steps.
// Also the stage-2 distillation step (hybrid student + teacher forward + KL) and a T = 32K batch-1 step
// of the hybrid with and without layer recomputation. Prints one JSON object per configuration.
//
//   gpu_train_bench [--model GGUF | --config config.json] [--shapes 8x2048,4x4096] [--long 32768] [--steps 5]
//                   [--warmup 2] [--recompute] [--distill-shape BxT] [--models teacher,hybrid,distill]
//                   [--plan-out plan.json] [--json out.jsonl] [--peak-tflops 989] [--lm-row-block N]
// Without --model the weights are random (throughput does not depend on them): at SmolLM2-135M's shape, or
// at the shape of a Hugging Face config.json (--config; e.g. configs/qwen3-1.7b.config.json).
// MFU = (6 * parameters + attention + GDN FLOPs per token) * tokens/s / peak. Attention (causal, training):
// 6 * T * Dh per token and FA query head per layer (half of PaLM's 12 L H Q T for a causal mask).
// "mfu_palm" is the usual definition (PaLM, Chowdhery et al. 2022, app. B; Megatron-LM's formula likewise):
// the full 12 L H Q T attention term, the causal mask not discounted. GDN
// (chunked, training): 2 * 122.9K * (Dh/64)^2 FLOPs per token and LA head (the chunk GEMMs counted in
// docs/BENCHMARKS.md's CPU GDN section). Peak: 989 TFLOP/s, the H200's dense bf16 tensor-core figure.
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "gpu/gpu_train_step.h"
#include "gpu_train_common.h"
#include "model/hf_config.h"
#include "model/hybrid_conversion.h"
#include "model/model_loader.h"
#include "ops/cuda/adamw.h"
#include "ops/cuda/cuda_check.h"
#include "train/param_groups.h"

using namespace hydra;
using json = nlohmann::json;

namespace {

struct Opts {
    std::vector<std::pair<int64_t, int64_t>> shapes = {{8, 2048}, {4, 4096}};
    int64_t long_T = 32768;
    int steps = 5, warmup = 2;
    int64_t lm_row_block = 0;  // > 0: the LM-head loss's row block (the whole vocabulary stays one chunk)
    double peak_tflops = 989.0;
    std::string model, config, plan_out, json_out;
    bool recompute = false;                              // per-layer activation recomputation in --shapes
    std::optional<std::pair<int64_t, int64_t>> distill;  // the distillation step's shape (default: the first)
    std::vector<std::string> models = {"teacher", "hybrid", "distill"};
};

std::pair<int64_t, int64_t> parse_shape(const std::string& item, const char* option) {
    const size_t x = item.find('x');
    HYDRA_CHECK(x != std::string::npos && x > 0 && x + 1 < item.size(), "{}: '{}' is not BxT", option, item);
    const int64_t B = std::stoll(item.substr(0, x)), T = std::stoll(item.substr(x + 1));
    HYDRA_CHECK(B > 0 && T > 0, "{}: '{}' needs B, T >= 1", option, item);
    return {B, T};
}

// Training FLOPs per token of the causal attention as counted above (PaLM's count adds as much again).
double attention_flops(const LlamaModel& m, int64_t T) {
    double f = 0;
    for (const LayerPlan& lp : m.plan().layers)
        f += 6.0 * double(T) * double(m.config().head_dim) * double(lp.num_fa());
    return f;
}

double flops_per_token(const LlamaModel& m, int64_t T) {
    const ModelConfig& c = m.config();
    double f = 6.0 * double(m.params().parameter_count());
    const double dh = double(c.head_dim);
    for (const LayerPlan& lp : m.plan().layers) {
        f += 6.0 * double(T) * dh * double(lp.num_fa());
        f += 2.0 * 122.9e3 * (dh / 64.0) * (dh / 64.0) * double(lp.num_la());
    }
    return f;
}

std::ofstream g_json;

void emit(const json& j) {
    fmt::print("{}\n", j.dump());
    std::fflush(stdout);
    if (g_json.is_open()) g_json << j.dump() << "\n" << std::flush;
}

// Times `steps` whole training steps after `warmup`; returns the JSON row.
json time_steps(const std::string& name, const LlamaModel& student, const LlamaModel* teacher, int64_t B,
                int64_t T, bool recompute, const Opts& o, cudaStream_t stream) {
    const int64_t N = B * T, V = student.config().vocab_size;
    Rng rng(1234 + uint64_t(T));
    std::vector<int32_t> inputs(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
    for (auto& x : inputs) x = int32_t(rng.uniform() * double(V - 1));
    for (auto& x : targets) x = int32_t(rng.uniform() * double(V - 1));
    const TrainBatch batch{inputs.data(), targets.data(), B, T};
    json row = {{"impl", "hydra-cuda"}, {"model", name}, {"B", B}, {"T", T}, {"recompute", recompute}};
    try {
        gpu::GpuTrainModel sm(student, true, stream);
        std::optional<gpu::GpuTrainModel> tm;
        gpu::GpuObjective obj;
        if (teacher) {
            tm.emplace(*teacher, false, stream);
            obj.ce_weight = 0.0, obj.kl_weight = 1.0;
        }
        gpu::GpuStepOptions so;
        so.recompute = recompute;
        if (o.lm_row_block > 0) {
            so.chunking.row_block = o.lm_row_block;
            so.lm_row_block_auto = false;
            so.resident_vocab_bytes =
                std::max(so.resident_vocab_bytes, size_t(o.lm_row_block) * size_t(V) * sizeof(float));
            row["lm_row_block"] = o.lm_row_block;
        }
        gpu::GpuTrainStep step(sm, tm ? &*tm : nullptr, so, stream);
        const std::vector<ParamSpan> spans = build_param_spans(student.params().entries());
        std::vector<cuda::AdamWSpan> aspans;
        for (const ParamSpan& sp : spans) {
            cuda::AdamWSpan a;
            a.offset = sm.device_offset(sp.offset), a.size = sp.size, a.wd_scale = sp.wd_scale;
            aspans.push_back(a);
        }
        cuda::AdamWHyper hy;
        hy.lr = 1e-4f;
        cuda::DeviceAdamW opt(hy, sm.numel(), aspans, stream);
        std::vector<double> ms;
        double loss = 0;
        for (int s = 0; s < o.warmup + o.steps; ++s) {
            CUDA_CHECK(cudaStreamSynchronize(stream));
            const auto t0 = std::chrono::steady_clock::now();
            sm.zero_grads(stream);
            const gpu::GpuStepLosses l = step.forward_backward(batch, obj);
            opt.grad_norm(sm.grads(), stream);
            const cuda::GradNormResult gn = opt.read_result(stream);
            opt.step(sm.master(), sm.mirror(), sm.grads(), stream,
                     float(cuda::DeviceAdamW::clip_coefficient(gn.norm, 1.0)));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            const double dt =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            if (s >= o.warmup) ms.push_back(dt);
            loss = teacher ? l.kl() : l.ce();
            if (s == 0) step.reset_peak();  // first step's arena high-water mark is the same; keep it clean
        }
        std::sort(ms.begin(), ms.end());
        const double med = ms[ms.size() / 2];
        row["attention"] = step.used_cudnn_attention() ? "cudnn" : "own";
        row["step_graph"] = step.used_step_graph();
        if (const char* p = std::getenv("HYDRA_STEP_PROFILE"); p && std::string(p) == "1") {
            // one more step with CUDA events at the section boundaries (slower by the events' CPU cost):
            // GPU milliseconds per category of forward_backward, and the optimizer's share
            step.enable_profile();
            sm.zero_grads(stream);
            (void)step.forward_backward(batch, obj);
            json prof = json::object();
            double total = 0;
            for (const auto& [k, v] : step.profile()) {
                prof[k] = std::round(v * 100) / 100;
                total += v;
            }
            prof["forward_backward_total"] = std::round(total * 100) / 100;
            row["profile_ms"] = prof;
        }
        const double tps = double(N) / (med / 1000.0);
        double fpt = flops_per_token(student, T);
        if (teacher)
            fpt += 2.0 * double(teacher->params().parameter_count()) +
                   2.0 * double(T) * double(teacher->config().head_dim) *
                       double(teacher->plan().total_fa_heads());
        const double gib = 1.0 / double(size_t(1) << 30);
        const size_t fixed = sm.device_bytes() + size_t(opt.size()) * 8 + (tm ? tm->device_bytes() : 0) +
                             step.workspace_bytes();
        row["params"] = student.params().parameter_count();
        row["step_ms"] = std::round(med * 100) / 100;
        row["step_ms_min"] = std::round(ms.front() * 100) / 100;
        row["step_ms_max"] = std::round(ms.back() * 100) / 100;
        row["tokens_per_s"] = std::round(tps);
        row["flops_per_token"] = fpt;
        row["tflops"] = std::round(fpt * tps / 1e12 * 10) / 10;
        row["mfu"] = std::round(fpt * tps / (o.peak_tflops * 1e12) * 1000) / 1000;
        // the teacher's forward in the distillation step: a third of its training attention term
        const double fpt_palm =
            fpt + attention_flops(student, T) + (teacher ? attention_flops(*teacher, T) / 3 : 0);
        row["mfu_palm"] = std::round(fpt_palm * tps / (o.peak_tflops * 1e12) * 1000) / 1000;
        row["peak_mem_gib"] = std::round(double(fixed + step.arena_peak_bytes()) * gib * 100) / 100;
        row["activations_gib"] = std::round(double(step.arena_peak_bytes()) * gib * 100) / 100;
        row["fixed_gib"] = std::round(double(fixed) * gib * 100) / 100;
        row["loss"] = loss;
        row["objective"] = teacher ? "KL (teacher forward included)" : "CE";
    } catch (const std::exception& e) {
        row["error"] = e.what();
        (void)cudaGetLastError();
    }
    emit(row);
    return row;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        Opts o;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            auto next = [&]() -> std::string {
                HYDRA_CHECK(i + 1 < argc, "{} needs a value", a);
                return argv[++i];
            };
            if (a == "--model")
                o.model = next();
            else if (a == "--config")
                o.config = next();
            else if (a == "--recompute")
                o.recompute = true;
            else if (a == "--distill-shape")
                o.distill = parse_shape(next(), "--distill-shape");
            else if (a == "--models") {
                o.models.clear();
                std::stringstream ss(next());
                std::string item;
                while (std::getline(ss, item, ',')) {
                    HYDRA_CHECK(item == "teacher" || item == "hybrid" || item == "distill",
                                "--models: '{}' is not teacher, hybrid or distill", item);
                    o.models.push_back(item);
                }
            } else if (a == "--steps")
                o.steps = std::stoi(next());
            else if (a == "--warmup")
                o.warmup = std::stoi(next());
            else if (a == "--long")
                o.long_T = std::stoll(next());
            else if (a == "--peak-tflops")
                o.peak_tflops = std::stod(next());
            else if (a == "--lm-row-block") {
                o.lm_row_block = std::stoll(next());
                HYDRA_CHECK(o.lm_row_block > 0 && o.lm_row_block <= 65535,
                            "--lm-row-block: need 1..65535 (got {})", o.lm_row_block);
            } else if (a == "--plan-out")
                o.plan_out = next();
            else if (a == "--json")
                o.json_out = next();
            else if (a == "--shapes") {
                o.shapes.clear();
                std::stringstream ss(next());
                std::string item;
                while (std::getline(ss, item, ',')) o.shapes.push_back(parse_shape(item, "--shapes"));
            } else {
                fail(
                    "usage: gpu_train_bench [--model GGUF | --config config.json] [--shapes 8x2048,4x4096] "
                    "[--long 32768] [--steps 5] [--warmup 2] [--recompute] [--distill-shape BxT] "
                    "[--models teacher,hybrid,distill] [--plan-out FILE] [--json FILE] [--peak-tflops 989] "
                    "[--lm-row-block 2048]");
            }
        }
        if (!o.json_out.empty()) g_json.open(o.json_out);
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        cudaStream_t stream;
        CUDA_CHECK(cudaStreamCreate(&stream));

        std::unique_ptr<LlamaModel> teacher, hybrid;
        std::string weights = "random";
        HYDRA_CHECK(o.model.empty() || o.config.empty(), "--model and --config exclude each other");
        if (!o.config.empty()) {
            teacher = std::make_unique<LlamaModel>(load_hf_config(o.config));
            bench::randomise_parallel(*teacher, 21);  // billions of values: minutes on one thread
            weights = "random, shape of " + o.config;
        } else if (!o.model.empty()) {
            LoadedModel lm = load_model(o.model);
            teacher = std::move(lm.model);
            weights = o.model;
        } else {
            teacher = std::make_unique<LlamaModel>(bench::smollm2_135m_config());
            bench::randomise(*teacher, 21);
        }
        const ModelConfig& c = teacher->config();
        const HybridPlan plan = build_plan(c, bench::plan_request(c, "7:1", "kv", FusionKind::ScaleNorm, 1));
        if (!o.model.empty()) {
            ConversionOptions co;
            hybrid = convert_to_hybrid(*teacher, plan, co);
        } else {
            hybrid = std::make_unique<LlamaModel>(c, &plan);
            if (o.config.empty())
                bench::randomise(*hybrid, 22);
            else
                bench::randomise_parallel(*hybrid, 22);
        }
        emit({{"device", prop.name},
              {"sms", prop.multiProcessorCount},
              {"weights", weights},
              {"teacher_params", teacher->params().parameter_count()},
              {"hybrid_params", hybrid->params().parameter_count()},
              {"hybrid_plan", plan.ratio_summary()},
              {"peak_tflops", o.peak_tflops}});
        if (!o.plan_out.empty()) {  // the layout for tools/torch_hybrid_ref.py
            json layers = json::array();
            for (int64_t l = 0; l < c.num_layers; ++l)
                layers.push_back({plan.layers[size_t(l)].num_fa(), int64_t(plan.fa_kv_groups(c, l).size()),
                                  plan.layers[size_t(l)].num_la()});
            json j = {{"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"intermediate_size", c.intermediate_size},
                      {"num_layers", c.num_layers},
                      {"num_heads", c.num_heads},
                      {"num_kv_heads", c.num_kv_heads},
                      {"head_dim", c.head_dim},
                      {"rope_theta", c.rope_theta},
                      {"rms_norm_eps", c.rms_norm_eps},
                      {"conv_size", plan.gdn.conv_size},
                      {"fusion", fusion_name(plan.fusion)},
                      {"layers", layers},
                      {"teacher_params", teacher->params().parameter_count()},
                      {"hybrid_params", hybrid->params().parameter_count()}};
            std::ofstream(o.plan_out) << j.dump(1) << "\n";
        }
        auto wanted = [&](const char* m) {
            return std::find(o.models.begin(), o.models.end(), m) != o.models.end();
        };
        for (const auto& [B, T] : o.shapes) {
            if (wanted("teacher")) time_steps("teacher", *teacher, nullptr, B, T, o.recompute, o, stream);
            if (wanted("hybrid")) time_steps("hybrid-7:1", *hybrid, nullptr, B, T, o.recompute, o, stream);
        }
        if (wanted("distill") && (o.distill || !o.shapes.empty())) {
            const auto [B, T] = o.distill ? *o.distill : o.shapes.front();
            time_steps("hybrid-7:1 distill", *hybrid, teacher.get(), B, T, o.recompute, o, stream);
        }
        if (o.long_T > 0) {
            Opts lo = o;
            lo.warmup = 1, lo.steps = std::max(2, o.steps / 2);
            time_steps("hybrid-7:1", *hybrid, nullptr, 1, o.long_T, true, lo, stream);
            time_steps("hybrid-7:1", *hybrid, nullptr, 1, o.long_T, false, lo, stream);
        }
        CUDA_CHECK(cudaStreamDestroy(stream));
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "gpu_train_bench: {}\n", e.what());
        return 1;
    }
}
