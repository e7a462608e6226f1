// GPU training step (see gpu_train_step.h): the CPU reference's model step and align step
// (train/model_step.cpp, train/align_step.cpp) over gpu/gpu_decoder_layer.h and the ops of ops/cuda.
#include "gpu/gpu_train_step.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "core/error.h"
#include "gpu/align_loss.h"
#include "gpu/gpu_rope.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"
#include "train/token_groups.h"

namespace hydra::gpu {

using cuda::BlasContext;

GpuTrainStep::GpuTrainStep(GpuTrainModel& student, const GpuTrainModel* teacher, const GpuStepOptions& options,
                           cudaStream_t stream)
    : student_(student), teacher_(teacher), opt_(options), stream_(stream) {
    HYDRA_CHECK(student.grads() != nullptr, "GPU training: the student model was uploaded without gradients");
    if (teacher_) {
        HYDRA_CHECK(teacher_->config().vocab_size == student.config().vocab_size,
                    "GPU training: teacher vocabulary {} differs from the student's {}", teacher_->config().vocab_size,
                    student.config().vocab_size);
    }
    blas_ = std::make_unique<BlasContext>(stream_);
    student_res_.step = this, student_res_.student = true;
    teacher_res_.step = this, teacher_res_.student = false;
    totals_ = cuda::DeviceBuffer<cuda::LossTotals>(2);
    if (const char* e = std::getenv("HYDRA_DETERMINISTIC"); e && *e)
        opt_.deterministic = std::string(e) == "1";
    const char* attn_env = std::getenv("HYDRA_ATTENTION");
    if (opt_.cudnn_attention && !(attn_env && std::string(attn_env) == "own"))
        cudnn_attn_ = std::make_unique<cuda::CudnnAttention>(opt_.deterministic);
}

bool GpuTrainStep::use_cudnn_attention(const cuda::AttnShape& as) {
    if (!cudnn_attn_ || as.window) return false;  // sliding windows with sinks: our kernels only
    if (cudnn_attn_->supports(as)) {
        static bool told = false;  // one line per process, so a run's log says which attention it used
        if (!told) {
            told = true;
            std::fprintf(stderr,
                         "[hydra] causal attention through cuDNN %ld's fused engines (HYDRA_ATTENTION=own: ours)\n",
                         cuda::cudnn_library().version);
        }
        return cudnn_used_ = true;
    }
    static bool said = false;  // one line per process: the fallback is correct, only slower
    if (!said) {
        said = true;
        std::fprintf(stderr, "[hydra] cuDNN attention not used (%s); using our attention kernels\n",
                     cudnn_attn_->reason().c_str());
    }
    return false;
}

bool GpuTrainStep::fused_qkv(const GpuTrainModel& m, int64_t l, const Shape& s) {
    const TrainLayerOffsets& o = m.layer(l);
    // non-uniform groups: K / V are gathered per head from packed buffers, and attention reads packed q
    // sliding windows run on our kernels, which read packed q, k, v
    if (o.n_fa == 0 || !o.uniform_groups || o.fa_window) return false;
    static const bool off = [] {
        const char* e = std::getenv("HYDRA_FUSED_QKV");
        return e && std::string(e) == "0";
    }();
    if (off) return false;
    cuda::AttnShape as;
    as.B = int(s.B), as.T = int(s.T), as.H = int(o.n_fa), as.Hkv = int(o.n_kv),
    as.D = int(m.config().head_dim);
    as.ld_qkv = int((o.n_fa + 2 * o.n_kv) * m.config().head_dim);
    // asked directly (not through use_cudnn_attention): a strided shape cuDNN declines falls back to the
    // packed layout, which may still run on cuDNN, so no "not used" line for it
    return cudnn_attn_ && cudnn_attn_->supports(as);
}

GpuTrainStep::~GpuTrainStep() {
    (void)cudaStreamSynchronize(stream_);
    if (graph_.exec) (void)cudaGraphExecDestroy(graph_.exec);
}

size_t GpuTrainStep::workspace_bytes() const {
    size_t n = loss_ws_ ? loss_ws_->bytes : 0;
    for (const auto& w : gdn_layer_ws_)
        if (w) n += w->bytes;
    for (const auto& [k, w] : gdn_shared_ws_) n += w->bytes;
    for (const auto& [k, w] : gdn_eval_ws_) n += w->bytes;
    for (const auto& [k, w] : attn_ws_) n += w->bytes;
    if (cudnn_attn_) n += cudnn_attn_->workspace_bytes();
    return n;
}

cuda::GdnWorkspace& GpuTrainStep::gdn_ws(int64_t l, int64_t n_la, int64_t Dh, const Shape& s, bool save,
                                          bool student) {
    cuda::GdnShape gs;
    gs.B = int(s.B), gs.T = int(s.T), gs.H = int(n_la), gs.HV = int(n_la), gs.D = int(Dh);
    // A forward without saving may borrow the student's training workspace of its shape: between steps and
    // in the first pass of recomputation no saved chunk state is live.
    if (!save && student && s.B == train_shape_.B && s.T == train_shape_.T) {
        if (opt_.recompute) {
            auto it = gdn_shared_ws_.find(n_la);
            if (it != gdn_shared_ws_.end()) return *it->second;
        } else if (size_t(l) < gdn_layer_ws_.size() && gdn_layer_ws_[size_t(l)]) {
            return *gdn_layer_ws_[size_t(l)];
        }
    }
    if (save) {
        HYDRA_ASSERT(student, "only the student saves GDN state");
        HYDRA_ASSERT(s.B == train_shape_.B && s.T == train_shape_.T, "GDN training workspace for another shape");
        std::unique_ptr<cuda::GdnWorkspace>* slot;
        if (opt_.recompute) {
            slot = &gdn_shared_ws_[n_la];
        } else {
            if (gdn_layer_ws_.size() < size_t(student_.config().num_layers))
                gdn_layer_ws_.resize(size_t(student_.config().num_layers));
            slot = &gdn_layer_ws_[size_t(l)];
        }
        if (!*slot) *slot = std::make_unique<cuda::GdnWorkspace>(gs, true);
        return **slot;
    }
    const auto key = std::make_tuple(s.B, s.T, n_la, Dh);
    auto it = gdn_eval_ws_.find(key);
    if (it != gdn_eval_ws_.end()) return *it->second;
    if (gdn_eval_ws_.size() >= 8) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        gdn_eval_ws_.clear();
        ++ws_generation_;
    }
    return *gdn_eval_ws_.emplace(key, std::make_unique<cuda::GdnWorkspace>(gs, false)).first->second;
}

cuda::AttnWorkspace& GpuTrainStep::attn_ws(int64_t n_fa, int64_t n_kv, const Shape& s) {
    const auto key = std::make_tuple(s.B, s.T, n_fa, n_kv);
    auto it = attn_ws_.find(key);
    if (it != attn_ws_.end()) return *it->second;
    cuda::AttnShape as;
    as.B = int(s.B), as.T = int(s.T), as.H = int(n_fa), as.Hkv = int(n_kv), as.D = int(student_.config().head_dim);
    auto ws = std::make_unique<cuda::AttnWorkspace>(as);
    ws->deterministic = opt_.deterministic;  // our backward's dQ in key-block order (no atomics)
    return *attn_ws_.emplace(key, std::move(ws)).first->second;
}

void GpuTrainStep::ensure_arena(size_t need) {
    if (opt_.arena_bytes > 0) need = std::max(need, opt_.arena_bytes);
    if (arena_ && arena_->capacity_bytes() >= need) return;
    // Between steps the arena holds nothing: a larger one replaces it.
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (arena_) peak_carry_ = std::max(peak_carry_, arena_->peak_bytes());
    arena_.reset();
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    HYDRA_CHECK(free_b > opt_.reserve_bytes && need <= free_b - opt_.reserve_bytes,
                "GPU training: the step needs about {} MiB of activations, {} MiB of device memory are free (keeping "
                "{} MiB for workspaces); use a smaller batch or run.recompute = true",
                need >> 20, free_b >> 20, opt_.reserve_bytes >> 20);
    arena_ = std::make_unique<cuda::DeviceArena>(need);
    ++ws_generation_;
}

cuda::LmHeadChunking GpuTrainStep::loss_chunking() const {
    cuda::LmHeadChunking ck = opt_.chunking;
    const int64_t V = student_.config().vocab_size;
    size_t budget = opt_.resident_vocab_bytes;
    if (opt_.lm_row_block_auto) {
        size_t free_b = 0, total_b = 0;
        CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
        budget = std::min(budget, total_b / 32);
        for (int64_t rb : {int64_t(8192), int64_t(4096)})
            if (rb > ck.row_block && size_t(rb) * size_t(V) * sizeof(float) <= budget) {
                ck.row_block = rb;
                break;
            }
    }
    const size_t tile = size_t(ck.row_block) * size_t(V) * sizeof(float);
    if (ck.vocab_chunk < V && tile <= budget) ck.vocab_chunk = V;
    return ck;
}

// Training workspaces for a batch shape (before the arena takes the free memory): the GDN chunk
// workspaces of the student's LA layers, the attention backward workspaces, the LM-head loss scratch.
void GpuTrainStep::ensure_shape(const Shape& s, bool align) {
    if (!loss_ws_)
        loss_ws_ = std::make_unique<cuda::LmHeadLossWorkspace>(loss_chunking(), teacher_ != nullptr, 0);
    if (s.B != train_shape_.B || s.T != train_shape_.T) {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        gdn_layer_ws_.clear();
        gdn_shared_ws_.clear();
        attn_ws_.clear();
        ++ws_generation_;  // a captured step graph points at the old workspaces
        train_shape_ = s;
        const ModelConfig& c = student_.config();
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const TrainLayerOffsets& o = student_.layer(l);
            if (o.n_la > 0) gdn_ws(l, o.n_la, c.head_dim, s, true, true);
            if (o.n_fa > 0) attn_ws(o.n_fa, o.uniform_groups ? o.n_kv : o.n_fa, s);
        }
    }
    ensure_arena(align ? align_arena_estimate(s) : arena_estimate(s, true));
}

void GpuTrainStep::upload_batch(const TrainBatch& batch, bool with_targets) {
    const int64_t N = batch.batch * batch.seq_len;
    if (ids_.size() < N) ids_.resize(N);
    CUDA_CHECK(cudaMemcpyAsync(ids_.data(), batch.inputs, size_t(N) * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    if (opt_.deterministic) {
        group_tokens(std::span<const int32_t>(batch.inputs, size_t(N)), student_.config().vocab_size,
                     token_groups_host_, token_group_counts_);
        if (token_groups_.size() < token_groups_host_.size()) token_groups_.resize(token_groups_host_.size());
        // pageable source: the copy has read it when the call returns, so the next batch may regroup at once
        CUDA_CHECK(cudaMemcpyAsync(token_groups_.data(), token_groups_host_.data(),
                                   token_groups_host_.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   stream_));
    }
    if (with_targets) {
        if (targets_.size() < N) targets_.resize(N);
        CUDA_CHECK(cudaMemcpyAsync(targets_.data(), batch.targets, size_t(N) * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   stream_));
    }
}

void GpuTrainStep::alloc_acts(const GpuTrainModel& m, int64_t l, const Shape& s, LayerActs& a) {
    cuda::DeviceArena& ar = *arena_;
    const bool fused = fused_qkv(m, l, s);
    layout_layer_acts(
        m, l, s.N(), a, [&](size_t b) { return ar.alloc_bytes(b); }, fused);
}

size_t GpuTrainStep::arena_estimate(const Shape& s, bool training) const {
    const int64_t N = s.N(), T = s.T;
    auto model_bytes = [&](const GpuTrainModel& m, bool keep) {
        const ModelConfig& c = m.config();
        const int64_t C = c.hidden_size, L = c.num_layers;
        size_t n = 2 * cuda::align_up(size_t(T) * size_t(std::max<int64_t>(1, c.rope_dim / 2)) * 4);  // rope
        n += cuda::align_up(size_t(N) * size_t(C) * 2) + cuda::align_up(size_t(N) * 4);                // h, rstd
        size_t layer_max = 0, layer_sum = 0, bwd_max = 0;
        for (int64_t l = 0; l < L; ++l) {
            const size_t a = layer_acts_bytes(m, l, N);
            layer_max = std::max(layer_max, a);
            layer_sum += a;
            if (keep) bwd_max = std::max(bwd_max, layer_backward_scratch_bytes(m, l, N));
        }
        const size_t row = cuda::align_up(size_t(N) * size_t(C) * 4);
        if (!keep) return n + row + layer_max;
        n += size_t(L + 1) * row + 2 * row;              // residuals, dh, dx
        n += cuda::align_up(size_t(N) * size_t(C) * 2);  // bf16(dx)
        if (opt_.recompute) return n + layer_max + row + bwd_max;
        return n + layer_sum + bwd_max;
    };
    size_t n = 0;
    if (training && teacher_) n += model_bytes(*teacher_, false);
    n += model_bytes(student_, training);
    return n + n / 16 + (size_t(64) << 20);
}

// The allocations of align_forward_backward, in its order: boundaries, y, dy, partials, sums (live for
// the whole step); then the teacher's forward (RoPE tables + one layer's activations, released), then
// the student's RoPE tables and one layer's activations + its backward scratch (released per layer).
size_t GpuTrainStep::align_arena_estimate(const Shape& s) const {
    HYDRA_ASSERT(teacher_ != nullptr, "align needs a teacher");
    const int64_t N = s.N(), T = s.T;
    const ModelConfig& c = student_.config();
    const int64_t C = c.hidden_size, L = c.num_layers;
    const size_t row = cuda::align_up(size_t(N) * size_t(C) * 4);
    size_t n = cuda::align_up(size_t(L + 1) * size_t(N) * size_t(C) * 4) + 2 * row;
    n += cuda::align_up(size_t(align_sums_workspace_doubles()) * 8) + cuda::align_up(size_t(2 * L) * 8);
    auto rope = [&](const ModelConfig& mc) {
        return 2 * cuda::align_up(size_t(T) * size_t(std::max<int64_t>(1, mc.rope_dim / 2)) * 4);
    };
    size_t teacher_layer = 0, student_layer = 0;
    for (int64_t l = 0; l < teacher_->config().num_layers; ++l)
        teacher_layer = std::max(teacher_layer, layer_acts_bytes(*teacher_, l, N));
    for (int64_t l = 0; l < L; ++l)
        student_layer = std::max(
            student_layer, layer_acts_bytes(student_, l, N) + layer_backward_scratch_bytes(student_, l, N));
    n += std::max(rope(teacher_->config()) + teacher_layer, rope(c) + student_layer);
    return n + n / 16 + (size_t(64) << 20);
}

void GpuTrainStep::layer_forward(const GpuTrainModel& m, int64_t l, const Shape& s, const float* x_in, float* x_out,
                                 LayerActs& a, bool save, const float* rope_cos, const float* rope_sin) {
    gpu_layer_forward(m.config(), m.plan(), layer_weights(m, l), l, s, x_in, x_out, a, save,
                      layer_env(m, rope_cos, rope_sin));
}

void GpuTrainStep::layer_backward(int64_t l, const Shape& s, float* dx, LayerActs& a, bf16* dx_bf16) {
    const GpuTrainModel& m = student_;
    gpu_layer_backward(m.config(), m.plan(), layer_weights(m, l), layer_grads(m, l), l, s, dx, a, dx_bf16,
                       layer_env(m, rope_cos_, rope_sin_));
}

GpuLayerEnv GpuTrainStep::layer_env(const GpuTrainModel& m, const float* rope_cos, const float* rope_sin) {
    GpuLayerEnv e;
    e.stream = stream_, e.blas = blas_.get(), e.arena = arena_.get(), e.prof = &prof_;
    e.res = &m == &student_ ? &student_res_ : &teacher_res_;
    e.rope_cos = rope_cos, e.rope_sin = rope_sin;
    return e;
}

cuda::CudnnAttention* GpuTrainStep::LayerResources::cudnn_attention(const cuda::AttnShape& as) {
    return step->use_cudnn_attention(as) ? step->cudnn_attn_.get() : nullptr;
}

cuda::AttnWorkspace& GpuTrainStep::LayerResources::attn_workspace(int64_t n_fa, int64_t n_kv,
                                                                  const Shape& s) {
    return step->attn_ws(n_fa, n_kv, s);
}

cuda::GdnWorkspace& GpuTrainStep::LayerResources::gdn_workspace(int64_t l, int64_t n_la, const Shape& s,
                                                                bool save) {
    // only the student saves GDN state (gdn_ws asserts it)
    const int64_t Dh = (student ? step->student_ : *step->teacher_).config().head_dim;
    return step->gdn_ws(l, n_la, Dh, s, save, student);
}

std::pair<float*, float*> GpuTrainStep::rope_tables(const ModelConfig& c, int64_t T) {
    const int64_t half = std::max<int64_t>(1, c.rope_dim / 2);
    float* cosv = arena_->alloc<float>(T * half);  // (T, rope_dim / 2)
    float* sinv = arena_->alloc<float>(T * half);
    if (fa_rotates(c)) cuda::rope_table(cosv, sinv, T, c.rope_dim, 0, gpu_rope_freqs(c), stream_);
    return {cosv, sinv};
}

void GpuTrainStep::forward_model(const GpuTrainModel& m, const Shape& s, bf16* h, float* rstd_f, bool keep) {
    const ModelConfig& c = m.config();
    const int64_t N = s.N(), C = c.hidden_size, V = c.vocab_size, L = c.num_layers;
    cuda::DeviceArena& ar = *arena_;
    const size_t mark0 = ar.mark();
    const auto [cosv, sinv] = rope_tables(c, s.T);
    if (keep) {
        HYDRA_ASSERT(&m == &student_, "only the student keeps its activations");
        rope_cos_ = cosv, rope_sin_ = sinv;
        resid_.assign(size_t(L + 1), nullptr);
        for (auto& r : resid_) r = ar.alloc<float>(N * C);
        acts_.assign(size_t(L), LayerActs());
        cuda::embedding_forward(resid_[0], ids_.data(), m.p32(m.embed_offset()), N, V, C, stream_);
        for (int64_t l = 0; l < L; ++l) {
            if (opt_.recompute) {
                const size_t mk = ar.mark();
                LayerActs a;
                alloc_acts(m, l, s, a);
                layer_forward(m, l, s, resid_[size_t(l)], resid_[size_t(l + 1)], a, false, cosv, sinv);
                ar.reset(mk);
            } else {
                alloc_acts(m, l, s, acts_[size_t(l)]);
                layer_forward(m, l, s, resid_[size_t(l)], resid_[size_t(l + 1)], acts_[size_t(l)], true, cosv, sinv);
            }
        }
        cuda::rmsnorm_forward(h, rstd_f, resid_[size_t(L)], m.p32(m.final_norm_offset()), N, C, c.rms_norm_eps,
                              stream_);
        return;
    }
    float* x = ar.alloc<float>(N * C);
    cuda::embedding_forward(x, ids_.data(), m.p32(m.embed_offset()), N, V, C, stream_);
    for (int64_t l = 0; l < L; ++l) {
        const size_t mk = ar.mark();
        LayerActs a;
        alloc_acts(m, l, s, a);
        layer_forward(m, l, s, x, x, a, false, cosv, sinv);
        ar.reset(mk);
    }
    cuda::rmsnorm_forward(h, rstd_f, x, m.p32(m.final_norm_offset()), N, C, c.rms_norm_eps, stream_);
    ar.reset(mark0);
}

void GpuTrainStep::forward_boundaries(const GpuTrainModel& m, const Shape& s, float* states) {
    const ModelConfig& c = m.config();
    const int64_t N = s.N(), C = c.hidden_size, V = c.vocab_size, L = c.num_layers;
    cuda::DeviceArena& ar = *arena_;
    const size_t mark0 = ar.mark();
    const auto [cosv, sinv] = rope_tables(c, s.T);
    cuda::embedding_forward(states, ids_.data(), m.p32(m.embed_offset()), N, V, C, stream_);
    for (int64_t l = 0; l < L; ++l) {
        const size_t mk = ar.mark();
        LayerActs a;
        alloc_acts(m, l, s, a);
        // out of place: entry l stays the input of layer l (the student's teacher-forced input)
        layer_forward(m, l, s, states + l * N * C, states + (l + 1) * N * C, a, false, cosv, sinv);
        ar.reset(mk);
    }
    ar.reset(mark0);
}

namespace {

int64_t validate_batch(const TrainBatch& batch, int64_t V, bool with_targets) {
    const int64_t N = batch.batch * batch.seq_len;
    HYDRA_CHECK(batch.batch > 0 && batch.seq_len > 0, "train step: empty batch ({} x {})", batch.batch, batch.seq_len);
    int64_t scored = 0;
    for (int64_t i = 0; i < N; ++i) {
        HYDRA_CHECK(batch.inputs[i] >= 0 && batch.inputs[i] < V, "train step: input token {} at {} outside 0..{}",
                    batch.inputs[i], i, V - 1);
        if (!with_targets) continue;
        HYDRA_CHECK(batch.targets[i] >= -1 && batch.targets[i] < V, "train step: target {} at {} outside -1..{}",
                    batch.targets[i], i, V - 1);
        scored += batch.targets[i] >= 0;
    }
    return scored;
}

}  // namespace

// Replays the training step as one CUDA graph (GpuStepOptions::cuda_graph): a step whose key equals the
// previous eager step's is captured (the first eager run tuned the GEMMs and built every workspace, cuDNN
// plan and scratch pool, so the capture only records kernels), and later steps with the same key launch the
// graph. False: run `body` eagerly (graphs off, a new key, or a capture that failed, after which the step
// stays eager for the rest of the process).
bool GpuTrainStep::run_step_graph(const std::vector<double>& key, const std::function<void()>& body) {
    static const int env = [] {
        const char* e = std::getenv("HYDRA_STEP_GRAPH");
        return e && *e ? (std::string(e) == "0" ? 0 : 1) : -1;
    }();
    if (!(env == 1 || (env == -1 && opt_.cuda_graph)) || graph_.broken) return false;
    if (graph_.exec && graph_.key == key) {
        CUDA_CHECK(cudaGraphLaunch(graph_.exec, stream_));
        return true;
    }
    if (graph_.seen != key) {  // a new step: run it eagerly first
        graph_.seen = key;
        return false;
    }
    if (graph_.exec) {
        CUDA_CHECK(cudaGraphExecDestroy(graph_.exec));
        graph_.exec = nullptr;
    }
    CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    std::string why;
    try {
        body();
    } catch (const std::exception& e) {
        why = e.what();
    }
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    if (why.empty() && end != cudaSuccess) why = cudaGetErrorString(end);
    cudaGraphExec_t exec = nullptr;
    if (why.empty()) {
        // per-node priorities, as src/gpu/cuda_graph.cpp instantiates (the GDN forward's high-priority scan)
        const cudaError_t inst =
            cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
        if (inst != cudaSuccess) why = cudaGetErrorString(inst);
    }
    if (graph) (void)cudaGraphDestroy(graph);
    if (!why.empty()) {
        (void)cudaGetLastError();
        graph_.broken = true;
        std::fprintf(stderr, "[hydra] training step not captured as a CUDA graph (%s); running it eagerly\n",
                     why.c_str());
        return false;  // nothing ran: the caller runs the body eagerly
    }
    graph_.exec = exec;
    graph_.key = key;
    CUDA_CHECK(cudaGraphLaunch(graph_.exec, stream_));
    return true;
}

GpuStepLosses GpuTrainStep::forward_backward(const TrainBatch& batch, const GpuObjective& obj) {
    const ModelConfig& c = student_.config();
    const Shape s{batch.batch, batch.seq_len};
    const int64_t N = s.N(), C = c.hidden_size, V = c.vocab_size, L = c.num_layers;
    const int64_t scored = validate_batch(batch, V, true);
    HYDRA_CHECK(obj.ce_weight >= 0 && obj.kl_weight >= 0 && obj.ce_weight + obj.kl_weight > 0,
                "GPU training: loss weights ce {} kl {}", obj.ce_weight, obj.kl_weight);
    HYDRA_CHECK(obj.kl_weight == 0 || teacher_ != nullptr, "GPU training: the KL objective needs a teacher");
    ensure_shape(s);
    upload_batch(batch, true);
    cuda::DeviceArena& ar = *arena_;
    const size_t mark0 = ar.mark();
    cudaStream_t st = stream_;
    const bool kl_mask = obj.kl_weight > 0 && obj.kl_max_position > 0 && obj.kl_max_position < s.T;

    // Everything from here to the loss totals runs on the stream without host synchronisation (but for the
    // KL row mask's upload), so it can be captured as one CUDA graph and replayed (run_step_graph).
    auto body = [&] {
        // teacher: final hidden states (N, Ct) bf16 for the KL, and the row mask of kl_max_position
        const bf16* th = nullptr;
        const uint8_t* mask = nullptr;
        int64_t kept = N;
        if (obj.kl_weight > 0) {
            const int64_t Ct = teacher_->config().hidden_size;
            bf16* t_hidden = ar.alloc<bf16>(N * Ct);
            float* t_rstd = ar.alloc<float>(N);
            forward_model(*teacher_, s, t_hidden, t_rstd, false);
            th = t_hidden;
            if (obj.kl_max_position > 0 && obj.kl_max_position < s.T) {
                std::vector<uint8_t> host(static_cast<size_t>(N));
                kept = 0;
                for (int64_t i = 0; i < N; ++i) kept += host[size_t(i)] = (i % s.T) < obj.kl_max_position;
                if (kl_mask_.size() < N) kl_mask_.resize(N);
                CUDA_CHECK(
                    cudaMemcpyAsync(kl_mask_.data(), host.data(), size_t(N), cudaMemcpyHostToDevice, st));
                CUDA_CHECK(cudaStreamSynchronize(st));  // `host` goes out of scope
                mask = kl_mask_.data();
            }
        }

        // student forward (kept for the backward)
        bf16* h = ar.alloc<bf16>(N * C);
        float* rstd_f = ar.alloc<float>(N);
        forward_model(student_, s, h, rstd_f, true);

        // losses through the LM head: dh (N, C) fp32
        float* dh = ar.alloc<float>(N * C);
        prof_.section("lm_head_loss");
        cuda::zero_totals(totals_.data(), st);
        cuda::zero_totals(totals_.data() + 1, st);
        const bf16* W = student_.p16(student_.lm_head_offset());
        float* dW = student_.grad(student_.lm_head_offset());
        if (obj.ce_weight > 0) {
            cuda::LmHeadGrads g;
            g.dh_f32 = dh;
            g.dW = dW;
            g.grad_scale = scored ? float(obj.ce_weight / double(scored)) : 0.f;
            cuda::cross_entropy_lm_head(*blas_, h, W, targets_.data(), N, C, V, g, totals_.data(), *loss_ws_);
        }
        if (obj.kl_weight > 0) {
            cuda::LmHeadGrads g;
            g.dh_f32 = dh;
            g.accumulate_dh = obj.ce_weight > 0;
            g.dW = dW;
            g.grad_scale = kept ? float(obj.kl_weight / double(kept)) : 0.f;
            cuda::kl_lm_head(*blas_, h, W, C, th, teacher_->p16(teacher_->lm_head_offset()),
                             teacher_->config().hidden_size, mask, N, V, obj.temperature, g,
                             totals_.data() + 1, *loss_ws_);
        }

        // backward
        prof_.section("other");
        float* dx = ar.alloc<float>(N * C);
        bf16* dxb = ar.alloc<bf16>(N * C);  // bf16(dx), kept current by every norm backward below
        CUDA_CHECK(cudaMemsetAsync(dx, 0, size_t(N * C) * sizeof(float), st));
        cuda::rmsnorm_backward(dx, dxb, student_.grad(student_.final_norm_offset()), dh, resid_[size_t(L)],
                               student_.p32(student_.final_norm_offset()), rstd_f, N, C, st);
        grads_done(grad_event_head());
        for (int64_t l = L - 1; l >= 0; --l) {
            if (opt_.recompute) {
                const size_t mk = ar.mark();
                LayerActs a;
                alloc_acts(student_, l, s, a);
                float* scratch = ar.alloc<float>(N * C);
                layer_forward(student_, l, s, resid_[size_t(l)], scratch, a, true, rope_cos_, rope_sin_);
                layer_backward(l, s, dx, a, dxb);
                ar.reset(mk);
            } else {
                layer_backward(l, s, dx, acts_[size_t(l)], dxb);
            }
            grads_done(grad_event_layer(l, L));
        }
        if (float* g = student_.grad(student_.embed_offset())) {
            if (opt_.deterministic)
                cuda::embedding_backward_grouped(g, dx, token_groups_.data(), N, C, st);
            else
                cuda::embedding_backward(g, dx, ids_.data(), N, V, C, st);
        }
        grads_done(grad_event_embedding(L));
        prof_.stop();
    };  // body

    // what the captured kernels bake in: shapes, the objective, the loss scales, the arena and teacher
    const std::vector<double> key{double(s.B),
                                  double(s.T),
                                  obj.ce_weight,
                                  obj.kl_weight,
                                  double(obj.temperature),
                                  double(obj.kl_max_position),
                                  double(scored),
                                  double(reinterpret_cast<uintptr_t>(arena_.get())),
                                  double(ar.mark()),
                                  double(reinterpret_cast<uintptr_t>(teacher_)),
                                  double(opt_.recompute),
                                  double(ws_generation_),
                                  double(reinterpret_cast<uintptr_t>(ids_.data())),
                                  double(reinterpret_cast<uintptr_t>(targets_.data())),
                                  double(reinterpret_cast<uintptr_t>(token_groups_.data())),
                                  double(cudnn_attn_ ? cudnn_attn_->workspace_bytes() : 0)};
    // a gradient hook launches work on other streams from the host as the backward is issued: eager only
    if (kl_mask || prof_.enabled() || grad_hook_ || !run_step_graph(key, body)) body();

    GpuStepLosses r;
    const cuda::LossTotals ce = cuda::read_totals(totals_.data(), st);
    const cuda::LossTotals kl = cuda::read_totals(totals_.data() + 1, st);
    r.ce_sum = ce.loss, r.ce_count = ce.count, r.kl_sum = kl.loss, r.kl_count = kl.count;
    acts_.clear();
    resid_.clear();
    ar.reset(mark0);
    return r;
}

GpuAlignResult GpuTrainStep::align_forward_backward(const TrainBatch& batch) {
    HYDRA_CHECK(teacher_ != nullptr, "GPU align: the stage needs a teacher (stage.teacher)");
    const ModelConfig& c = student_.config();
    const ModelConfig& tc = teacher_->config();
    HYDRA_CHECK(tc.num_layers == c.num_layers && tc.hidden_size == c.hidden_size,
                "GPU align: the teacher ({} layers, hidden size {}) must have the student's number of layers and "
                "hidden size ({} layers, hidden size {})",
                tc.num_layers, tc.hidden_size, c.num_layers, c.hidden_size);
    const Shape s{batch.batch, batch.seq_len};
    const int64_t N = s.N(), C = c.hidden_size, L = c.num_layers, NC = N * C;
    validate_batch(batch, c.vocab_size, false);
    ensure_shape(s, true);
    upload_batch(batch, false);
    cuda::DeviceArena& ar = *arena_;
    const size_t mark0 = ar.mark();
    cudaStream_t st = stream_;

    // live for the whole step (align_arena_estimate's order)
    float* states = ar.alloc<float>((L + 1) * NC);  // (L + 1, N, C) teacher boundaries t_0..t_L
    float* y = ar.alloc<float>(NC);                 // (N, C) the student layer's output
    float* dy = ar.alloc<float>(NC);                // (N, C) d loss / d y in, d loss / d t_l out (discarded)
    double* partial = ar.alloc<double>(align_sums_workspace_doubles());
    double* sums = ar.alloc<double>(2 * L);  // per layer {err, clamped update}
    forward_boundaries(*teacher_, s, states);

    // the student's RoPE tables: layer_forward takes them, layer_backward reads rope_cos_ / rope_sin_
    const auto [cosv, sinv] = rope_tables(c, s.T);
    rope_cos_ = cosv, rope_sin_ = sinv;

    // Layers are independent given the teacher's states: forward on t_l, loss against t_{l+1}, backward,
    // one layer's activations at a time (the dy scale is read on the device: no host sync per layer).
    for (int64_t l = 0; l < L; ++l) {
        const float* x = states + l * NC;
        const float* t = states + (l + 1) * NC;
        const size_t mk = ar.mark();
        LayerActs a;
        alloc_acts(student_, l, s, a);
        layer_forward(student_, l, s, x, y, a, true, cosv, sinv);
        align_layer_sums(sums + 2 * l, y, t, x, NC, partial, st);
        align_layer_grad(dy, y, t, sums + 2 * l, L, NC, st);
        layer_backward(l, s, dy, a);  // parameter grads += (frozen skipped); dy becomes d loss / d t_l
        grads_done(grad_event_layer(l, L));
        ar.reset(mk);
    }

    std::vector<double> host(static_cast<size_t>(2 * L));
    CUDA_CHECK(cudaMemcpyAsync(host.data(), sums, host.size() * sizeof(double), cudaMemcpyDeviceToHost, st));
    CUDA_CHECK(cudaStreamSynchronize(st));
    rope_cos_ = rope_sin_ = nullptr;
    ar.reset(mark0);
    GpuAlignResult r;
    for (int64_t l = 0; l < L; ++l) {
        const double err = host[size_t(2 * l)], update = host[size_t(2 * l + 1)];
        r.layer_loss.push_back(err / update);
        r.loss += err / update / double(L);  // the CPU's order of operations
    }
    return r;
}

GpuStepLosses GpuTrainStep::eval_ce(const TrainBatch& batch) {
    const ModelConfig& c = student_.config();
    const Shape s{batch.batch, batch.seq_len};
    const int64_t N = s.N(), C = c.hidden_size, V = c.vocab_size;
    validate_batch(batch, V, true);
    if (!loss_ws_)
        loss_ws_ = std::make_unique<cuda::LmHeadLossWorkspace>(loss_chunking(), teacher_ != nullptr, 0);
    ensure_arena(arena_estimate(s, false));
    upload_batch(batch, true);
    cuda::DeviceArena& ar = *arena_;
    const size_t mark0 = ar.mark();
    bf16* h = ar.alloc<bf16>(N * C);
    float* rstd_f = ar.alloc<float>(N);
    forward_model(student_, s, h, rstd_f, false);
    cuda::zero_totals(totals_.data(), stream_);
    cuda::cross_entropy_lm_head(*blas_, h, student_.p16(student_.lm_head_offset()), targets_.data(), N, C, V,
                                cuda::LmHeadGrads{}, totals_.data(), *loss_ws_);
    const cuda::LossTotals t = cuda::read_totals(totals_.data(), stream_);
    ar.reset(mark0);
    GpuStepLosses r;
    r.ce_sum = t.loss, r.ce_count = t.count;
    return r;
}

std::vector<float> GpuTrainStep::final_hidden(const TrainBatch& batch, bool of_teacher) {
    const GpuTrainModel& m = of_teacher ? *teacher_ : student_;
    HYDRA_CHECK(!of_teacher || teacher_, "final_hidden: no teacher");
    const Shape s{batch.batch, batch.seq_len};
    const int64_t N = s.N(), C = m.config().hidden_size;
    validate_batch(batch, m.config().vocab_size, false);
    ensure_arena(arena_estimate(s, true));
    upload_batch(batch, false);
    cuda::DeviceArena& ar = *arena_;
    const size_t mark0 = ar.mark();
    bf16* h = ar.alloc<bf16>(N * C);
    float* rstd_f = ar.alloc<float>(N);
    forward_model(m, s, h, rstd_f, false);
    std::vector<float> out = cuda::download_bf16_as_f32(h, N * C, stream_);
    ar.reset(mark0);
    return out;
}

}  // namespace hydra::gpu
