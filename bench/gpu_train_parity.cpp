// Gradient parity of the GPU training step (src/gpu/gpu_train_step.h) against the CPU reference
// (train/model_step.h): one step of a teacher and of kv-granularity hybrids, the
// loss and every parameter's gradient, relative RMS error per tensor (bf16 tolerance 2e-2, loss 1e-2).
// Frozen tensors must get exactly zero gradient on the GPU. Hybrids are converted from the random teacher
// (random GDN heads make the step chaotic at bf16 resolution); each case also prints its "bf16 floor": how
// far rounding only the GEMM weights to bf16 moves the fp32 CPU gradients. Then the CUDA engine (gpu_train_engine.h):
// three AdamW steps on one batch must lower the loss and leave frozen tensors bit-identical.
// Stage 1 (align) cases: GpuTrainStep::align_forward_backward against train/align_step (teacher states from
// layer_boundary_states): the loss, every layer's loss (1e-2) and the gradients as above, with every tensor
// of the layers that have LA heads trainable, or the align set {*.linear_attn.*, *.fusion.*} (every other
// tensor must get exactly zero); their bf16 floor rounds the teacher's and the student's GEMM weights.
// Then the engine on stage align.
//
//   gpu_train_parity [--smollm] [--model GGUF] [--seq T] [--no-tiny] [--no-align]
//     default: tiny random models (hidden 256, 4 heads of 64, 2 KV heads, 3 layers, vocab 512, B 2 x T 130)
//     --smollm: also SmolLM2-135M-shaped random models (teacher, 7:1 hybrid), B 1 x T 256
//     --model:  also the real teacher from a GGUF and its 7:1 random-kv conversion (KL objective, align)
//     --no-align: skip the align cases (every group above has them)
// Exit status: 0 all pass; 1 some tensor over tolerance but every error < 0.1; 2 worse (or non-finite).
#include <cuda_runtime.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gpu_train_common.h"
#include "core/error.h"
#include "core/half.h"
#include "gpu/gpu_train_engine.h"
#include "gpu/gpu_train_step.h"
#include "model/hybrid_conversion.h"
#include "model/model_loader.h"
#include "ops/cuda/cuda_check.h"
#include "train/align_step.h"
#include "train/model_step.h"
#include "train/param_groups.h"

using namespace hydra;

namespace {

constexpr double kGradTol = 2e-2, kLossTol = 1e-2, kGross = 0.1;

struct Outcome {
    int fails = 0;         // tensors / losses over tolerance
    double worst = 0;      // worst relative error seen
};

struct Case {
    std::string name;
    const LlamaModel* student = nullptr;
    const LlamaModel* teacher = nullptr;  // KL objective; align: the states' source
    gpu::GpuObjective obj;
    std::vector<std::string> frozen;     // globs
    std::vector<std::string> trainable;  // globs; non-empty: only these train (as stage.trainable)
    bool recompute = false;
    int64_t B = 2, T = 130;
};

std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = int32_t(std::min<double>(double(V - 1), rng.uniform() * double(V)));
    return t;
}

void note(Outcome& o, double rel, double tol) {
    if (!(rel <= tol)) o.fails++;
    o.worst = std::max(o.worst, std::isfinite(rel) ? rel : INFINITY);
}

// The case's trainable mask: stage.trainable globs (then everything else frozen), or frozen globs.
std::vector<char> trainable_mask(const ParamArena& layout, const Case& c) {
    std::vector<ParamRule> rules;
    for (const std::string& g : c.trainable) rules.push_back(ParamRule{g, true, std::nullopt, std::nullopt, ""});
    if (!c.trainable.empty()) rules.push_back(ParamRule{"*", false, std::nullopt, std::nullopt, ""});
    for (const std::string& g : c.frozen) rules.push_back(ParamRule{g, false, std::nullopt, std::nullopt, ""});
    std::vector<char> trainable;
    for (const ParamSpan& s : build_param_spans(layout.entries(), rules)) trainable.push_back(s.trainable);
    return trainable;
}

// A copy of the parameters with the GEMM weights (2-D tensors) rounded to bf16, as the GPU reads them.
std::vector<float> bf16_gemm_weights(const ParamArena& layout) {
    const int64_t n = layout.numel();
    std::vector<float> p16(layout.data(), layout.data() + n);
    for (const ArenaEntry& e : layout.entries())
        if (e.shape.size() == 2)
            for (int64_t i = 0; i < e.shape[0] * e.shape[1]; ++i)
                p16[size_t(e.offset + i)] = bf16_to_f32(f32_to_bf16(p16[size_t(e.offset + i)]));
    return p16;
}

// Every trainable tensor's GPU gradient against the CPU reference (rel RMS, kGradTol) beside its bf16 floor,
// the whole trainable vector; frozen tensors must be exactly zero on the GPU.
void compare_gradients(const ParamArena& layout, const std::vector<char>& trainable, const std::vector<float>& g_gpu,
                       const std::vector<float>& g_cpu, const std::vector<float>& g_floor, Outcome& out) {
    struct Row {
        std::string name;
        int64_t numel;
        double rel;
        double floor;  // the bf16-weight floor of this tensor
    };
    std::vector<Row> rows;
    int frozen_nonzero = 0, n_frozen = 0;
    for (size_t i = 0; i < layout.entries().size(); ++i) {
        const ArenaEntry& e = layout.entries()[i];
        const int64_t cnt = e.shape.empty() ? 1 : [&] {
            int64_t k = 1;
            for (int64_t d : e.shape) k *= d;
            return k;
        }();
        const float* a = g_gpu.data() + e.offset;
        const float* r = g_cpu.data() + e.offset;
        if (!trainable[i]) {
            n_frozen++;
            bool zero = true;
            for (int64_t j = 0; j < cnt; ++j) zero = zero && a[j] == 0.f;
            if (!zero) frozen_nonzero++;
            continue;
        }
        rows.push_back({e.name, cnt, bench::rel_rms(a, r, cnt), bench::rel_rms(g_floor.data() + e.offset, r, cnt)});
    }
    std::vector<size_t> order(rows.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return rows[x].rel > rows[y].rel; });
    int over = 0;
    double sum_log = 0;
    int within_floor = 0;
    for (const Row& r : rows) {
        const bool ok_floor = r.rel <= std::max(kGradTol, 2.0 * r.floor);
        within_floor += ok_floor;
        fmt::print("  {:<52} {:>9} rel {:.2e} (bf16 floor {:.2e}){}\n", r.name, r.numel, r.rel, r.floor,
                   r.rel <= kGradTol ? "" : ok_floor ? " (within 2x floor)" : " *");
    }
    for (const Row& r : rows) {
        note(out, r.rel, kGradTol);
        over += !(r.rel <= kGradTol);
        sum_log += std::log10(std::max(1e-12, r.rel));
    }
    // all trainable gradients at once
    std::vector<float> a_all, r_all, f_all;  // GPU, CPU and bf16-floor gradients of the trainable tensors
    for (size_t i = 0; i < layout.entries().size(); ++i) {
        if (!trainable[i]) continue;
        const ArenaEntry& e = layout.entries()[i];
        int64_t cnt = 1;
        for (int64_t d : e.shape) cnt *= d;
        a_all.insert(a_all.end(), g_gpu.begin() + e.offset, g_gpu.begin() + e.offset + cnt);
        r_all.insert(r_all.end(), g_cpu.begin() + e.offset, g_cpu.begin() + e.offset + cnt);
        f_all.insert(f_all.end(), g_floor.begin() + e.offset, g_floor.begin() + e.offset + cnt);
    }
    const double whole = bench::rel_rms(a_all.data(), r_all.data(), int64_t(a_all.size()));
    fmt::print("bf16 floor (CPU gradients with bf16-rounded weights vs fp32): whole-vector rel RMS {:.2e}; {} of {} "
               "tensors within max({:.0e}, 2x their floor)\n",
               bench::rel_rms(f_all.data(), r_all.data(), int64_t(f_all.size())), within_floor, rows.size(), kGradTol);
    fmt::print("gradients: {} trainable tensors, {} over {:.0e}; whole-vector rel RMS {:.2e}; geometric mean {:.2e}; "
               "worst:",
               rows.size(), over, kGradTol, whole, std::pow(10.0, sum_log / std::max<size_t>(1, rows.size())));
    for (size_t k = 0; k < std::min<size_t>(4, order.size()); ++k)
        fmt::print(" {} {:.2e}{}", rows[order[k]].name, rows[order[k]].rel, k + 1 < std::min<size_t>(4, order.size()) ? "," : "");
    fmt::print("\n");
    if (n_frozen) {
        fmt::print("frozen: {} tensors, {} with a nonzero GPU gradient\n", n_frozen, frozen_nonzero);
        out.fails += frozen_nonzero;
        if (frozen_nonzero) out.worst = INFINITY;
    }
}

// The closing lines of a case: where the time went and the verdict.
void print_case_end(const std::string& name, const Outcome& out, std::chrono::steady_clock::time_point t0,
                    std::chrono::steady_clock::time_point t1, std::chrono::steady_clock::time_point t2,
                    size_t arena_peak_bytes) {
    fmt::print("timing: CPU reference {:.2f} s, GPU upload + step {:.2f} s; arena peak {:.1f} MiB\n",
               std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
               double(arena_peak_bytes) / 1048576.0);
    fmt::print("{}: {} ({} checks over tolerance, worst {:.2e})\n\n", name, out.fails ? "FAIL" : "PASS", out.fails,
               out.worst);
}

Outcome run_case(const Case& c, cudaStream_t stream) {
    const auto t0 = std::chrono::steady_clock::now();
    const LlamaModel& m = *c.student;
    const ModelConfig& cfg = m.config();
    const ParamArena& layout = m.params();
    const int64_t n = layout.numel(), N = c.B * c.T, V = cfg.vocab_size;
    fmt::print("== {}: {} (B {} x T {}), {} parameters{}{}\n", c.name, m.plan().ratio_summary(), c.B, c.T,
               layout.parameter_count(), c.recompute ? ", layer recomputation" : "",
               c.frozen.empty() ? "" : ", frozen: " + fmt::format("{}", fmt::join(c.frozen, " ")));
    const std::vector<int32_t> inputs = random_tokens(N, V, 11 + c.T);
    std::vector<int32_t> targets = random_tokens(N, V, 12 + c.T);
    for (int64_t i = 0; i < N; i += 17) targets[size_t(i)] = -1;  // some ignored targets
    const TrainBatch batch{inputs.data(), targets.data(), c.B, c.T};

    const std::vector<char> trainable = trainable_mask(layout, c);

    // CPU reference
    StageObjective so;
    so.ce_weight = c.obj.ce_weight;
    so.kl_weight = c.obj.kl_weight;
    so.temperature = c.obj.temperature;
    std::vector<float> t_hidden;
    std::vector<uint8_t> mask;
    if (c.obj.kl_weight > 0) {
        const LlamaModel& t = *c.teacher;
        t_hidden = final_hidden_states(t.config(), t.plan(), t.params(), t.params().data(), inputs.data(), c.B, c.T);
        so.teacher_hidden = t_hidden.data();
        so.teacher_head = t.lm_head().f32();
        so.teacher_hidden_size = t.config().hidden_size;
        if (c.obj.kl_max_position > 0) {
            mask.resize(size_t(N));
            for (int64_t i = 0; i < N; ++i) mask[size_t(i)] = i % c.T < c.obj.kl_max_position;
            so.kl_mask = mask.data();
        }
    }
    std::vector<float> g_cpu(static_cast<size_t>(n), 0.f);
    const ModelStepResult ref =
        model_train_step<float>(cfg, m.plan(), layout, layout.data(), g_cpu.data(), batch, so, trainable, {false});
    // The bf16 floor: the same CPU step with the GEMM weights (2-D tensors) rounded to bf16, as the GPU reads
    // them. How far that moves the fp32 gradients is how well-conditioned the case is for a bf16 check.
    std::vector<float> g_floor(static_cast<size_t>(n), 0.f);
    {
        const std::vector<float> p16 = bf16_gemm_weights(layout);
        model_train_step<float>(cfg, m.plan(), layout, p16.data(), g_floor.data(), batch, so, trainable, {false});
    }
    const auto t1 = std::chrono::steady_clock::now();

    // GPU
    gpu::GpuTrainModel sm(m, true, stream);
    sm.set_trainable(trainable);
    std::optional<gpu::GpuTrainModel> tm;
    if (c.obj.kl_weight > 0) tm.emplace(*c.teacher, false, stream);
    gpu::GpuStepOptions opt;
    opt.recompute = c.recompute;
    gpu::GpuTrainStep step(sm, tm ? &*tm : nullptr, opt, stream);
    const gpu::GpuStepLosses gl = step.forward_backward(batch, c.obj);
    std::vector<float> g_gpu(static_cast<size_t>(n));
    sm.download_grads(g_gpu.data(), stream);
    const auto t2 = std::chrono::steady_clock::now();

    Outcome out;
    auto rel = [](double a, double b) { return std::abs(a - b) / std::max(1e-12, std::abs(b)); };
    const double gpu_loss = c.obj.ce_weight * gl.ce() + c.obj.kl_weight * gl.kl();
    fmt::print("loss: CPU {:.6f} GPU {:.6f} rel {:.2e}", ref.loss, gpu_loss, rel(gpu_loss, ref.loss));
    note(out, rel(gpu_loss, ref.loss), kLossTol);
    if (c.obj.ce_weight > 0) {
        fmt::print(" | CE CPU {:.6f} GPU {:.6f} ({} targets)", ref.ce, gl.ce(), gl.ce_count);
        note(out, rel(gl.ce(), ref.ce), kLossTol);
    }
    if (c.obj.kl_weight > 0) {
        fmt::print(" | KL CPU {:.6f} GPU {:.6f} ({} rows)", ref.kl, gl.kl(), gl.kl_count);
        note(out, rel(gl.kl(), ref.kl), kLossTol);
    }
    fmt::print("\n");
    if (tm) {
        const std::vector<float> th = step.final_hidden(batch, true);
        const double r = bench::rel_rms(th.data(), t_hidden.data(), int64_t(th.size()));
        fmt::print("teacher final hidden (bf16) vs CPU: rel RMS {:.2e}\n", r);
        note(out, r, kGradTol);
    }

    // The same step twice more (GpuStepOptions::cuda_graph: the first repeat is captured as a CUDA graph,
    // the second replays it): the replayed loss and gradients must equal the eager step's, up to the order
    // of cuDNN's atomic dQ accumulation (a stale pointer in the graph would be off by O(1)).
    {
        std::vector<float> g_rep(static_cast<size_t>(n));
        gpu::GpuStepLosses gr;
        for (int k = 0; k < 2; ++k) {
            sm.zero_grads(stream);
            gr = step.forward_backward(batch, c.obj);
        }
        sm.download_grads(g_rep.data(), stream);
        const double r_loss = rel(c.obj.ce_weight * gr.ce() + c.obj.kl_weight * gr.kl(), gpu_loss);
        const double r_grad = bench::rel_rms(g_rep.data(), g_gpu.data(), n);
        fmt::print("step repeated ({}): loss rel {:.2e}, all gradients rel RMS {:.2e} vs the first step\n",
                   step.used_step_graph() ? "CUDA graph replayed" : "eager", r_loss, r_grad);
        note(out, r_loss, 1e-6);
        note(out, r_grad, 1e-5);
    }

    compare_gradients(layout, trainable, g_gpu, g_cpu, g_floor, out);
    print_case_end(c.name, out, t0, t1, t2, step.arena_peak_bytes());
    return out;
}

// Stage 1 (align): GpuTrainStep::align_forward_backward against train/align_step.cpp on the teacher's
// layer_boundary_states. The bf16 floor rounds the GEMM weights of both models (the GPU teacher reads bf16
// weights too). Layer losses are compared relative to max(CPU, 1e-2): a pure-FA layer of a converted hybrid
// is the teacher's layer, its loss is rounding noise around 0 on both sides.
Outcome run_align_case(const Case& c, cudaStream_t stream) {
    const auto t0 = std::chrono::steady_clock::now();
    const LlamaModel& m = *c.student;
    const LlamaModel& t = *c.teacher;
    const ModelConfig& cfg = m.config();
    const ParamArena& layout = m.params();
    const int64_t n = layout.numel(), N = c.B * c.T, V = cfg.vocab_size, L = cfg.num_layers;
    fmt::print("== {}: {} (B {} x T {}), {} parameters{}{}\n", c.name, m.plan().ratio_summary(), c.B, c.T,
               layout.parameter_count(), c.recompute ? ", recompute (shared GDN workspaces)" : "",
               c.trainable.empty() ? "" : ", trainable: " + fmt::format("{}", fmt::join(c.trainable, " ")));
    const std::vector<int32_t> inputs = random_tokens(N, V, 13 + c.T);
    const TrainBatch batch{inputs.data(), nullptr, c.B, c.T};  // align reads no targets
    const std::vector<char> trainable = trainable_mask(layout, c);

    // CPU reference
    const std::vector<float> states =
        layer_boundary_states(t.config(), t.plan(), t.params(), t.params().data(), inputs.data(), c.B, c.T);
    std::vector<float> g_cpu(static_cast<size_t>(n), 0.f);
    const AlignResult ref =
        align_step(cfg, m.plan(), layout, layout.data(), g_cpu.data(), trainable, states.data(), c.B, c.T);
    std::vector<float> g_floor(static_cast<size_t>(n), 0.f);
    AlignResult ref16;
    {
        const std::vector<float> t16 = bf16_gemm_weights(t.params());
        const std::vector<float> states16 =
            layer_boundary_states(t.config(), t.plan(), t.params(), t16.data(), inputs.data(), c.B, c.T);
        const std::vector<float> p16 = bf16_gemm_weights(layout);
        ref16 = align_step(cfg, m.plan(), layout, p16.data(), g_floor.data(), trainable, states16.data(), c.B, c.T);
    }
    const auto t1 = std::chrono::steady_clock::now();

    // GPU
    gpu::GpuTrainModel sm(m, true, stream);
    sm.set_trainable(trainable);
    gpu::GpuTrainModel tm(t, false, stream);
    gpu::GpuStepOptions opt;
    opt.recompute = c.recompute;
    gpu::GpuTrainStep step(sm, &tm, opt, stream);
    const gpu::GpuAlignResult gl = step.align_forward_backward(batch);
    std::vector<float> g_gpu(static_cast<size_t>(n));
    sm.download_grads(g_gpu.data(), stream);
    const auto t2 = std::chrono::steady_clock::now();

    Outcome out;
    auto rel = [](double a, double b) { return std::abs(a - b) / std::max(1e-12, std::abs(b)); };
    auto rel_layer = [](double a, double b) { return std::abs(a - b) / std::max(1e-2, std::abs(b)); };
    fmt::print("align loss: CPU {:.6f} GPU {:.6f} rel {:.2e} (bf16 floor {:.2e})\n", ref.loss, gl.loss,
               rel(gl.loss, ref.loss), rel(ref16.loss, ref.loss));
    note(out, rel(gl.loss, ref.loss), kLossTol);
    if (int64_t(gl.layer_loss.size()) != L) {
        fmt::print("GPU returned {} layer losses for {} layers\n", gl.layer_loss.size(), L);
        out.fails++, out.worst = INFINITY;
    } else {
        int over = 0;
        double worst = 0;
        for (int64_t l = 0; l < L; ++l) {
            const double r = rel_layer(gl.layer_loss[size_t(l)], ref.layer_loss[size_t(l)]);
            const double f = rel_layer(ref16.layer_loss[size_t(l)], ref.layer_loss[size_t(l)]);
            const LayerPlan& lp = m.plan().layers[size_t(l)];
            fmt::print("  layer {:>2} ({} FA, {} LA heads): CPU {:.6f} GPU {:.6f} rel {:.2e} (bf16 floor {:.2e}){}\n", l,
                       lp.num_fa(), lp.num_la(), ref.layer_loss[size_t(l)], gl.layer_loss[size_t(l)], r, f,
                       r <= kLossTol ? "" : " *");
            note(out, r, kLossTol);
            over += !(r <= kLossTol);
            worst = std::max(worst, std::isfinite(r) ? r : INFINITY);
        }
        fmt::print("layer losses: {} layers, {} over {:.0e} (relative to max(CPU, 1e-2)), worst {:.2e}\n", L, over,
                   kLossTol, worst);
    }
    compare_gradients(layout, trainable, g_gpu, g_cpu, g_floor, out);
    print_case_end(c.name, out, t0, t1, t2, step.arena_peak_bytes());
    return out;
}

// Every tensor of the layers that have LA heads (their align losses are real; a pure-FA layer of a converted
// hybrid is the teacher's, with a loss and gradients of rounding noise on both sides).
std::vector<std::string> la_layer_globs(const LlamaModel& m) {
    std::vector<std::string> globs;
    for (int64_t l = 0; l < m.config().num_layers; ++l)
        if (m.plan().layers[size_t(l)].num_la() > 0) globs.push_back(LlamaModel::layer_name(l, "*"));
    return globs;
}

const std::vector<std::string> kAlignTrainable = {"*.linear_attn.*", "*.fusion.*"};

// The CUDA engine on the distillation objective: 3 steps on one batch lower the loss; frozen tensors stay
// bit-identical, trainable ones move.
// With `align`: stage 1 (align loss, CE / KL must read NaN), lr 1e-3, the align trainable set.
Outcome run_engine(const LlamaModel& student_in, const LlamaModel& teacher, int64_t B, int64_t T, bool align = false) {
    const float lr = align ? 1e-3f : 3e-3f;
    fmt::print("== engine: 3 AdamW steps ({}, lr {:.0e}, clip 1.0, {})\n", align ? "align" : "distill: 0.5 CE + KL", lr,
               align ? "trainable *.linear_attn.* *.fusion.*" : "MLPs frozen");
    LlamaModel student(student_in.config(), &student_in.plan());
    std::copy_n(student_in.params().data(), student_in.params().numel(), student.params().data());
    TrainConfig tc;
    tc.stage = align ? "align" : "distill";
    tc.ce_weight = 0.5;
    tc.kl_weight = align ? 0.0 : 1.0;  // align must build its teacher whatever kl_weight says
    tc.trainable = {"*.self_attn.*", "*.linear_attn.*", "*.fusion.*", "*norm*", "model.embed_tokens.weight"};
    if (align) tc.trainable = kAlignTrainable;
    std::vector<ParamRule> rules;
    for (const std::string& p : tc.trainable) rules.push_back(ParamRule{p, true, std::nullopt, std::nullopt, ""});
    rules.push_back(ParamRule{"*", false, std::nullopt, std::nullopt, ""});
    const std::vector<ParamSpan> spans = build_param_spans(student.params().entries(), rules);
    AdamWConfig ac;
    ac.lr = lr;
    AdamW cpu_opt(ac, student.params().numel());
    std::unique_ptr<TrainEngine> eng =
        gpu::make_gpu_train_engine(TrainEngineSetup{&tc, &student, &teacher, &spans, &cpu_opt});
    const int64_t N = B * T, V = student.config().vocab_size;
    const std::vector<int32_t> inputs = random_tokens(N, V, 99);
    const std::vector<int32_t> targets = random_tokens(N, V, 98);
    const TrainBatch batch{inputs.data(), targets.data(), B, T};
    Outcome out;
    double first = 0, last = 0;
    for (int s = 0; s < 3; ++s) {
        const EngineStepResult r = eng->step(batch, lr, 1.0);
        fmt::print("step {}: loss {:.5f} (CE {:.5f}, KL {:.5f}), grad norm {:.3f}, finite {}\n", s + 1, r.loss, r.ce, r.kl,
                   r.grad_norm, r.finite);
        if (!r.finite) out.fails++;
        if (align && !(std::isnan(r.ce) && std::isnan(r.kl))) out.fails++;  // as the CPU loop's align step
        if (s == 0) first = r.loss;
        last = r.loss;
    }
    const auto [ce_sum, ce_n] = eng->eval_ce(batch);
    fmt::print("eval CE after 3 steps: {:.5f} over {} targets\n", ce_sum / double(std::max<int64_t>(1, ce_n)), ce_n);
    if (!(last < first)) out.fails++;
    eng->sync_to_host(student, cpu_opt);
    int frozen_changed = 0, trainable_same = 0;
    for (const ParamSpan& sp : spans) {
        const float* a = student.params().data() + sp.offset;
        const float* b = student_in.params().data() + sp.offset;
        const bool same = std::equal(a, a + sp.size, b);
        if (!sp.trainable && !same) frozen_changed++;
        if (sp.trainable && same) trainable_same++;
    }
    fmt::print("after sync_to_host: {} frozen tensors changed, {} trainable tensors unchanged; AdamW step count {}\n",
               frozen_changed, trainable_same, cpu_opt.step_count());
    out.fails += frozen_changed + trainable_same + (cpu_opt.step_count() == 3 ? 0 : 1);
    fmt::print("engine: {}\n\n", out.fails ? "FAIL" : "PASS");
    if (out.fails) out.worst = INFINITY;
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        bool smollm = false, tiny_cases = true, align_cases = true;
        std::string model_path;
        int64_t smollm_T = 256;
        for (int i = 1; i < argc; ++i) {
            const std::string a = argv[i];
            if (a == "--smollm") smollm = true;
            else if (a == "--model" && i + 1 < argc) model_path = argv[++i];
            else if (a == "--seq" && i + 1 < argc) smollm_T = std::stoll(argv[++i]);
            else if (a == "--no-tiny") tiny_cases = false;
            else if (a == "--no-align") align_cases = false;
            else fail("usage: gpu_train_parity [--smollm] [--model GGUF] [--seq T] [--no-tiny] [--no-align]");
        }
        int dev = 0;
        CUDA_CHECK(cudaGetDeviceCount(&dev));
        HYDRA_CHECK(dev > 0, "no CUDA device");
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        fmt::print("device: {} ({} SMs)\n\n", prop.name, prop.multiProcessorCount);
        cudaStream_t stream;
        CUDA_CHECK(cudaStreamCreate(&stream));

        std::vector<Outcome> outcomes;
        std::vector<std::string> names;
        auto record = [&](const std::string& name, const Outcome& o) {
            names.push_back(name);
            outcomes.push_back(o);
        };

        // ---- tiny random models (d = 64 heads) ----
        ModelConfig tiny;
        tiny.name = "tiny";
        tiny.vocab_size = 512, tiny.hidden_size = 256, tiny.intermediate_size = 512, tiny.num_layers = 3;
        tiny.num_heads = 4, tiny.num_kv_heads = 2, tiny.head_dim = 64, tiny.rope_dim = 64;
        tiny.max_position_embeddings = 1024, tiny.rope_theta = 10000.f, tiny.tie_word_embeddings = true;
        tiny.eos_token_ids = {0};
        LlamaModel teacher(tiny);
        bench::randomise(teacher, 1);
        // 1:1 LA:FA over the 6 KV groups: the random draw (seed 3) gives mixed and pure layers
        const HybridPlan plan_sn = build_plan(tiny, bench::plan_request(tiny, "1:1", "kv", FusionKind::ScaleNorm, 3));
        // Hybrids converted from the random teacher (model/hybrid_conversion: long-memory decays, beta 1/2,
        // identity convs): randomly initialised GDN heads make the step chaotic -- rounding the weights to bf16
        // alone moves the fp32 CPU gradients by O(1) (the "bf16 floor" printed per case) -- so they cannot
        // check a bf16 implementation.
        ConversionOptions conv;
        conv.seed = 1;
        std::unique_ptr<LlamaModel> hybrid_p = convert_to_hybrid(teacher, plan_sn, conv);
        LlamaModel& hybrid = *hybrid_p;
        const HybridPlan plan_hy = build_plan(tiny, bench::plan_request(tiny, "2:1", "kv", FusionKind::Hymba, 5));
        std::unique_ptr<LlamaModel> hybrid_hymba_p = convert_to_hybrid(teacher, plan_hy, conv);
        LlamaModel& hybrid_hymba = *hybrid_hymba_p;
        ModelConfig tiny_bias = tiny;
        tiny_bias.attention_bias = true;
        tiny_bias.tie_word_embeddings = false;
        const HybridPlan plan_lo = build_plan(tiny_bias, bench::plan_request(tiny_bias, "1:2", "kv", FusionKind::LaOnly, 6));
        LlamaModel teacher_bias(tiny_bias);
        bench::randomise(teacher_bias, 7);
        std::unique_ptr<LlamaModel> hybrid_bias_p = convert_to_hybrid(teacher_bias, plan_lo, conv);
        LlamaModel& hybrid_bias = *hybrid_bias_p;

        gpu::GpuObjective ce;
        gpu::GpuObjective kl;
        kl.ce_weight = 0.5, kl.kl_weight = 1.0, kl.temperature = 2.0f, kl.kl_max_position = 100;
        std::vector<Case> cases;
        {
            Case c;
            c.name = "tiny teacher, CE";
            c.student = &teacher, c.obj = ce;
            cases.push_back(c);
        }
        {
            Case c;
            c.name = "tiny hybrid kv scale-norm, CE";
            c.student = &hybrid, c.obj = ce;
            cases.push_back(c);
        }
        {
            Case c;
            c.name = "tiny hybrid kv scale-norm, 0.5 CE + KL (tau 2, kl_max_position 100), MLP + embedding frozen";
            c.student = &hybrid, c.teacher = &teacher, c.obj = kl;
            c.frozen = {"*.mlp.*", "model.embed_tokens.weight"};
            cases.push_back(c);
        }
        {
            Case c;
            c.name = "tiny hybrid kv scale-norm, CE, layer recomputation";
            c.student = &hybrid, c.obj = ce, c.recompute = true;
            cases.push_back(c);
        }
        {
            Case c;
            c.name = "tiny hybrid kv hymba, KL only";
            c.student = &hybrid_hymba, c.teacher = &teacher, c.obj.ce_weight = 0.0, c.obj.kl_weight = 1.0;
            cases.push_back(c);
        }
        {
            Case c;
            c.name = "tiny hybrid kv la-only, q/k/v biases, untied head, CE";
            c.student = &hybrid_bias, c.obj = ce;
            cases.push_back(c);
        }
        // stage 1 (align): teacher-forced layers against the teacher each hybrid was converted from
        std::vector<Case> align;
        {
            Case c;
            c.name = "tiny hybrid kv scale-norm, align, trainable *.linear_attn.* *.fusion.*";
            c.student = &hybrid, c.teacher = &teacher, c.trainable = kAlignTrainable;
            align.push_back(c);
        }
        {
            Case c;
            c.name = "tiny hybrid kv scale-norm, align, every tensor of the layers with LA heads";
            c.student = &hybrid, c.teacher = &teacher, c.trainable = la_layer_globs(hybrid);
            align.push_back(c);
        }
        {
            Case c;
            c.name = "tiny hybrid kv hymba, align, trainable *.linear_attn.* *.fusion.*, recompute";
            c.student = &hybrid_hymba, c.teacher = &teacher, c.trainable = kAlignTrainable, c.recompute = true;
            align.push_back(c);
        }
        {
            Case c;
            c.name = "tiny hybrid kv la-only, q/k/v biases, align, every tensor of the layers with LA heads";
            c.student = &hybrid_bias, c.teacher = &teacher_bias, c.trainable = la_layer_globs(hybrid_bias);
            align.push_back(c);
        }
        if (tiny_cases) {
            for (const Case& c : cases) record(c.name, run_case(c, stream));
            record("engine (tiny)", run_engine(hybrid, teacher, 2, 130));
            if (align_cases) {
                for (const Case& c : align) record(c.name, run_align_case(c, stream));
                record("engine (tiny, align)", run_engine(hybrid, teacher, 2, 130, true));
            }
        }

        // ---- SmolLM2-135M shapes, random weights ----
        std::unique_ptr<LlamaModel> s_teacher, s_hybrid;
        if (smollm) {
            const ModelConfig sc = bench::smollm2_135m_config();
            s_teacher = std::make_unique<LlamaModel>(sc);
            bench::randomise(*s_teacher, 21);
            const HybridPlan sp = build_plan(sc, bench::plan_request(sc, "7:1", "kv", FusionKind::ScaleNorm, 1));
            ConversionOptions sconv;
            s_hybrid = convert_to_hybrid(*s_teacher, sp, sconv);
            Case a;
            a.name = "SmolLM2-135M shape teacher (random weights), CE";
            a.student = s_teacher.get(), a.obj = ce, a.B = 1, a.T = smollm_T;
            record(a.name, run_case(a, stream));
            Case b;
            b.name = "SmolLM2-135M shape 7:1 hybrid kv (random weights), CE";
            b.student = s_hybrid.get(), b.obj = ce, b.B = 1, b.T = smollm_T;
            record(b.name, run_case(b, stream));
            if (align_cases) {
                Case c;
                c.name = "SmolLM2-135M shape 7:1 hybrid kv (random weights), align, trainable *.linear_attn.* *.fusion.*";
                c.student = s_hybrid.get(), c.teacher = s_teacher.get(), c.trainable = kAlignTrainable, c.B = 1,
                c.T = smollm_T;
                record(c.name, run_align_case(c, stream));
            }
        }
        // ---- the real model ----
        if (!model_path.empty()) {
            LoadedModel lm = load_model(model_path);
            const LlamaModel& t = *lm.model;
            const HybridPlan hp =
                build_plan(t.config(), bench::plan_request(t.config(), "7:1", "kv", FusionKind::ScaleNorm, 1));
            ConversionOptions co;
            co.seed = 1;
            std::unique_ptr<LlamaModel> h = convert_to_hybrid(t, hp, co);
            Case a;
            a.name = "SmolLM2-135M teacher (" + model_path + "), CE";
            a.student = &t, a.obj = ce, a.B = 1, a.T = smollm_T;
            record(a.name, run_case(a, stream));
            Case b;
            b.name = "SmolLM2-135M 7:1 random-kv conversion, KL against the teacher";
            b.student = h.get(), b.teacher = &t, b.obj.ce_weight = 0.0, b.obj.kl_weight = 1.0, b.B = 1, b.T = smollm_T;
            record(b.name, run_case(b, stream));
            if (align_cases) {
                Case c;
                c.name = "SmolLM2-135M 7:1 random-kv conversion, align against the teacher, trainable *.linear_attn.* "
                         "*.fusion.*";
                c.student = h.get(), c.teacher = &t, c.trainable = kAlignTrainable, c.B = 1, c.T = smollm_T;
                record(c.name, run_align_case(c, stream));
            }
        }

        int failed = 0;
        double worst = 0;
        fmt::print("== summary\n");
        for (size_t i = 0; i < names.size(); ++i) {
            fmt::print("{:<100} {} (worst {:.2e})\n", names[i], outcomes[i].fails ? "FAIL" : "PASS", outcomes[i].worst);
            failed += outcomes[i].fails ? 1 : 0;
            worst = std::max(worst, outcomes[i].worst);
        }
        fmt::print("{} of {} cases passed; worst relative error {:.2e}\n", int(names.size()) - failed, names.size(), worst);
        CUDA_CHECK(cudaStreamDestroy(stream));
        if (failed == 0) return 0;
        return worst < kGross ? 1 : 2;
    } catch (const std::exception& e) {
        fmt::print(stderr, "gpu_train_parity: {}\n", e.what());
        return 3;
    }
}
