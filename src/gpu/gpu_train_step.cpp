// GPU training step (see gpu_train_step.h): the CPU reference's forward and backward (train/model_step.cpp,
// train/decoder_layer.cpp) over the ops of ops/cuda.
#include "gpu/gpu_train_step.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "gpu/align_loss.h"
#include "gpu/head_rmsnorm.h"
#include "gpu/kv_group_reduce.h"
#include "model/fusion.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/fusion.h"
#include "ops/cuda/gated_rmsnorm.h"
#include "ops/cuda/gdn_gates.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"
#include "ops/cuda/short_conv.h"
#include "ops/cuda/swiglu.h"

namespace hydra::gpu {

namespace {

using cuda::BlasContext;

int64_t offset_of(const ParamArena& a, const std::string& name) { return a.has(name) ? a.entry(name).offset : -1; }

// dst (rows, width) with row pitch dst_ld <- src (rows, width) with row pitch src_ld, bf16, on the device.
void copy_rows(bf16* dst, int64_t dst_ld, const bf16* src, int64_t src_ld, int64_t width, int64_t rows,
               cudaStream_t stream) {
    if (rows == 0 || width == 0) return;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_ld) * sizeof(bf16), src, size_t(src_ld) * sizeof(bf16),
                                 size_t(width) * sizeof(bf16), size_t(rows), cudaMemcpyDeviceToDevice, stream));
}

// ---- GEMMs in HF layout with leading dimensions (row-major; W (out, in) contiguous) ----
// Y (N, out) = X (N, in) @ W^T, bf16 out.
void mm_fwd(BlasContext& b, const bf16* X, int64_t ldx, const bf16* W, int64_t N, int64_t in, int64_t out, bf16* Y,
            int64_t ldy) {
    cuda::gemm_bf16(b, false, true, N, out, in, 1.f, X, ldx, W, in, 0.f, Y, ldy);
}
// Y (N, out) fp32 = R + X @ W^T (the residual stream; R may be Y): the GEMM reads the residual R and
// writes the sum to Y, so the residual is never copied.
void mm_fwd_add(BlasContext& b, const bf16* X, int64_t ldx, const bf16* W, int64_t N, int64_t in, int64_t out,
                const float* R, float* Y, int64_t ldy) {
    cuda::gemm_bf16(b, false, true, N, out, in, 1.f, X, ldx, W, in, 1.f, R, Y, ldy);
}
// dX (N, in) = beta dX + dY (N, out) @ W, fp32.
void mm_dx(BlasContext& b, const bf16* dY, int64_t ldy, const bf16* W, int64_t N, int64_t in, int64_t out, float* dX,
           int64_t ldx, float beta) {
    cuda::gemm_bf16(b, false, false, N, in, out, 1.f, dY, ldy, W, in, beta, dX, ldx);
}
// dX (N, in) = dY @ W, bf16.
void mm_dx16(BlasContext& b, const bf16* dY, int64_t ldy, const bf16* W, int64_t N, int64_t in, int64_t out, bf16* dX,
             int64_t ldx) {
    cuda::gemm_bf16(b, false, false, N, in, out, 1.f, dY, ldy, W, in, 0.f, dX, ldx);
}
// dW (out, in) += dY^T (out, N) @ X (N, in), fp32.
void mm_dw(BlasContext& b, const bf16* dY, int64_t ldy, const bf16* X, int64_t ldx, int64_t N, int64_t in, int64_t out,
           float* dW) {
    cuda::gemm_bf16(b, true, false, out, in, N, 1.f, dY, ldy, X, ldx, 1.f, dW, in);
}

// A group of projections reading the same input, written side by side into one output row: one GEMM
// when their weights are adjacent in the arena (q|k|v of the LA heads, a|b, gate|up), else one each.
struct Part {
    int64_t w = -1, bias = -1, rows = 0;
};

bool adjacent(const std::vector<Part>& parts, int64_t in) {
    for (size_t i = 1; i < parts.size(); ++i)
        if (parts[i].w != parts[i - 1].w + parts[i - 1].rows * in) return false;
    return true;
}

int64_t total_rows(const std::vector<Part>& parts) {
    int64_t n = 0;
    for (const Part& p : parts) n += p.rows;
    return n;
}

void proj_forward(const GpuTrainModel& m, BlasContext& b, cudaStream_t st, const bf16* X, int64_t N, int64_t in,
                  const std::vector<Part>& parts, bf16* Y, int64_t ldy) {
    if (adjacent(parts, in)) {
        mm_fwd(b, X, in, m.p16(parts[0].w), N, in, total_rows(parts), Y, ldy);
    } else {
        int64_t col = 0;
        for (const Part& p : parts) {
            mm_fwd(b, X, in, m.p16(p.w), N, in, p.rows, Y + col, ldy);
            col += p.rows;
        }
    }
    int64_t col = 0;
    for (const Part& p : parts) {
        if (p.bias >= 0) cuda::bias_add(Y + col, m.p32(p.bias), N, p.rows, ldy, st);
        col += p.rows;
    }
}

// dX (N, in) fp32 (first: =, else +=) of the group's dY (N, rows) columns, and the weight / bias grads.
void proj_backward(const GpuTrainModel& m, BlasContext& b, cudaStream_t st, const bf16* dY, int64_t ldy,
                   const bf16* X, int64_t N, int64_t in, const std::vector<Part>& parts, float* dX,
                   bool& first, StepProfiler& prof) {
    prof.section("gemm_dx");
    const bool adj = adjacent(parts, in);
    if (adj) {
        mm_dx(b, dY, ldy, m.p16(parts[0].w), N, in, total_rows(parts), dX, in, first ? 0.f : 1.f);
        first = false;
    } else {
        int64_t col = 0;
        for (const Part& p : parts) {
            mm_dx(b, dY + col, ldy, m.p16(p.w), N, in, p.rows, dX, in, first ? 0.f : 1.f);
            first = false;
            col += p.rows;
        }
    }
    prof.section("gemm_dw");
    bool all_trainable = adj;
    for (const Part& p : parts) all_trainable = all_trainable && m.grad(p.w) != nullptr;
    int64_t col = 0;
    if (all_trainable) mm_dw(b, dY, ldy, X, in, N, in, total_rows(parts), m.grad(parts[0].w));
    for (const Part& p : parts) {
        if (!all_trainable)
            if (float* g = m.grad(p.w)) mm_dw(b, dY + col, ldy, X, in, N, in, p.rows, g);
        if (float* gb = m.grad(p.bias)) cuda::bias_backward(gb, dY + col, N, p.rows, ldy, st);
        col += p.rows;
    }
}

cuda::FusionScales fusion_scales(const GpuTrainModel& m, const TrainLayerOffsets& o) {
    cuda::FusionScales f;
    f.head_scale = m.p32(o.head_scale), f.fa_scale = m.p32(o.fa_scale), f.la_scale = m.p32(o.la_scale);
    return f;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// GpuTrainModel

GpuTrainModel::GpuTrainModel(const LlamaModel& model, bool with_grads, cudaStream_t stream)
    : config_(model.config()), plan_(model.plan()), entries_(model.params().entries()) {
    const ModelConfig& c = config_;
    const ParamArena& a = model.params();
    HYDRA_CHECK(c.head_dim == 64 || c.head_dim == 128, "GPU training: head dim {} is not supported (64 or 128)",
                c.head_dim);
    HYDRA_CHECK(c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim, "GPU training: rope_dim {} is not supported",
                c.rope_dim);
    HYDRA_CHECK(c.num_heads * c.head_dim == c.q_dim(), "GPU training: unexpected head layout");
    HYDRA_CHECK(plan_.total_la_heads() == 0 || plan_.gdn.chunk_size == 64,
                "GPU training: GDN chunk size {} (the CUDA kernels use 64)", plan_.gdn.chunk_size);
    HYDRA_CHECK(plan_.total_la_heads() == 0 || (plan_.gdn.conv_size >= 1 && plan_.gdn.conv_size <= 8),
                "GPU training: GDN conv width {} (1..8 supported)", plan_.gdn.conv_size);
    n_ = a.numel();
    n_params_ = a.parameter_count();
    layers_.resize(size_t(c.num_layers));
    std::vector<int32_t> kv_index;  // every layer's map, uploaded below
    std::vector<int64_t> kv_index_at(size_t(c.num_layers), -1);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        TrainLayerOffsets& o = layers_[size_t(l)];
        auto at = [&](const char* suffix) { return offset_of(a, LlamaModel::layer_name(l, suffix)); };
        const LayerPlan& lp = plan_.layers[size_t(l)];
        o.n_fa = lp.num_fa();
        o.n_la = lp.num_la();
        o.n_kv = int64_t(plan_.fa_kv_groups(c, l).size());
        if (o.n_fa > 0) {
            const std::vector<int32_t> idx = plan_.fa_kv_index(c, l);
            HYDRA_CHECK(int64_t(idx.size()) == o.n_fa, "GPU training: layer {} maps {} FA heads, has {}", l,
                        idx.size(), o.n_fa);
            for (const int32_t g : idx)
                HYDRA_CHECK(g >= 0 && g < o.n_kv, "GPU training: layer {}: KV slot {} outside 0..{}", l, g,
                            o.n_kv - 1);
            o.uniform_groups = o.n_fa % o.n_kv == 0;
            for (int64_t h = 0; o.uniform_groups && h < o.n_fa; ++h)
                o.uniform_groups = idx[size_t(h)] == h / (o.n_fa / o.n_kv);
            kv_index_at[size_t(l)] = int64_t(kv_index.size());
            kv_index.insert(kv_index.end(), idx.begin(), idx.end());
        }
        o.attn_norm = at("input_layernorm.weight");
        o.wq = at("self_attn.q_proj.weight");
        o.wk = at("self_attn.k_proj.weight");
        o.wv = at("self_attn.v_proj.weight");
        o.wo = at("self_attn.o_proj.weight");
        o.bq = at("self_attn.q_proj.bias");
        o.bk = at("self_attn.k_proj.bias");
        o.bv = at("self_attn.v_proj.bias");
        o.q_norm = at("self_attn.q_norm.weight");
        o.k_norm = at("self_attn.k_norm.weight");
        HYDRA_CHECK(o.n_fa == 0 || !c.qk_norm || (o.q_norm >= 0 && o.k_norm >= 0),
                    "GPU training: layer {} of a q/k-norm model has no q_norm / k_norm weights", l);
        o.la_wq = at("linear_attn.q_proj.weight");
        o.la_wk = at("linear_attn.k_proj.weight");
        o.la_wv = at("linear_attn.v_proj.weight");
        o.la_bq = at("linear_attn.q_proj.bias");
        o.la_bk = at("linear_attn.k_proj.bias");
        o.la_bv = at("linear_attn.v_proj.bias");
        o.la_wa = at("linear_attn.a_proj.weight");
        o.la_wb = at("linear_attn.b_proj.weight");
        o.la_wg = at("linear_attn.g_proj.weight");
        o.conv_q = at("linear_attn.q_conv1d.weight");
        o.conv_k = at("linear_attn.k_conv1d.weight");
        o.conv_v = at("linear_attn.v_conv1d.weight");
        o.A_log = at("linear_attn.A_log");
        o.dt_bias = at("linear_attn.dt_bias");
        o.o_norm = at("linear_attn.o_norm.weight");
        o.head_scale = at("fusion.head_scale");
        o.fa_scale = at("fusion.fa_scale");
        o.la_scale = at("fusion.la_scale");
        o.ffn_norm = at("post_attention_layernorm.weight");
        o.w_gate = at("mlp.gate_proj.weight");
        o.w_up = at("mlp.up_proj.weight");
        o.w_down = at("mlp.down_proj.weight");
    }
    embed_ = a.entry("model.embed_tokens.weight").offset;
    final_norm_ = a.entry("model.norm.weight").offset;
    lm_head_ = c.tie_word_embeddings ? embed_ : a.entry("lm_head.weight").offset;

    master_ = cuda::DeviceBuffer<float>(n_);
    mirror_ = cuda::DeviceBuffer<bf16>(n_);
    upload(a.data(), stream);
    if (!kv_index.empty()) {
        kv_index_ = cuda::DeviceBuffer<int32_t>(int64_t(kv_index.size()));
        kv_index_.upload(kv_index.data(), stream);  // `kv_index` outlives the copy: synchronised below
        for (int64_t l = 0; l < c.num_layers; ++l)
            if (kv_index_at[size_t(l)] >= 0)
                layers_[size_t(l)].kv_index = kv_index_.data() + kv_index_at[size_t(l)];
    }
    if (with_grads) {
        grads_ = cuda::DeviceBuffer<float>(n_);
        grads_.zero(stream);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

float* GpuTrainModel::grad(int64_t offset) const {
    if (offset < 0 || grads_.size() == 0 || frozen_.count(offset)) return nullptr;
    return grads_.data() + offset;
}

void GpuTrainModel::set_trainable(const std::vector<char>& per_entry) {
    HYDRA_ASSERT(per_entry.empty() || per_entry.size() == entries_.size(), "trainable mask has {} entries, arena {}",
                 per_entry.size(), entries_.size());
    frozen_.clear();
    for (size_t i = 0; i < per_entry.size(); ++i)
        if (!per_entry[i]) frozen_.insert(entries_[i].offset);
}

void GpuTrainModel::upload(const float* host, cudaStream_t stream) {
    cuda::upload(master_.data(), host, n_, stream);
    cuda::cast_f32_to_bf16(mirror_.data(), master_.data(), n_, stream);
}

void GpuTrainModel::download_params(float* host, cudaStream_t stream) const {
    cuda::download(host, master_.data(), n_, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

void GpuTrainModel::download_grads(float* host, cudaStream_t stream) const {
    HYDRA_ASSERT(grads_.size() == n_, "model has no gradients");
    cuda::download(host, grads_.data(), n_, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

void GpuTrainModel::zero_grads(cudaStream_t stream) {
    if (grads_.size()) grads_.zero(stream);
}

// ---------------------------------------------------------------------------------------------------
// GpuTrainStep

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
    totals_ = cuda::DeviceBuffer<cuda::LossTotals>(2);
    const char* attn_env = std::getenv("HYDRA_ATTENTION");
    if (opt_.cudnn_attention && !(attn_env && std::string(attn_env) == "own"))
        cudnn_attn_ = std::make_unique<cuda::CudnnAttention>();
}

bool GpuTrainStep::use_cudnn_attention(const cuda::AttnShape& as) {
    if (!cudnn_attn_) return false;
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
    if (o.n_fa == 0 || !o.uniform_groups) return false;
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
    return *attn_ws_.emplace(key, std::make_unique<cuda::AttnWorkspace>(as)).first->second;
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
    if (with_targets) {
        if (targets_.size() < N) targets_.resize(N);
        CUDA_CHECK(cudaMemcpyAsync(targets_.data(), batch.targets, size_t(N) * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   stream_));
    }
}

namespace {

// The activation buffers of one layer, in allocation order: `alloc(bytes)` returns arena memory (or, for
// the size estimate, nothing).
template <class Alloc>
void layout_acts(const GpuTrainModel& m, int64_t l, int64_t N, GpuTrainStep::LayerActs& a, Alloc&& alloc,
                 bool fused_qkv = false) {
    const ModelConfig& c = m.config();
    const TrainLayerOffsets& o = m.layer(l);
    const int64_t C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim, HD = c.num_heads * Dh;
    const int64_t Dfa = o.n_fa * Dh, Dkv = o.n_kv * Dh, Dla = o.n_la * Dh;
    auto b16 = [&](int64_t n) { return static_cast<bf16*>(alloc(size_t(n) * 2)); };
    auto f32 = [&](int64_t n) { return static_cast<float*>(alloc(size_t(n) * 4)); };
    a = GpuTrainStep::LayerActs();
    a.xn1 = b16(N * C);
    a.rstd1 = f32(N);
    a.heads = b16(N * HD);
    if (o.n_fa > 0 && fused_qkv) {
        a.ld_qkv = Dfa + 2 * Dkv;
        a.q = b16(N * a.ld_qkv);
        a.k = a.q + Dfa;
        a.v = a.k + Dkv;
    } else if (o.n_fa > 0) {
        a.q = b16(N * Dfa);
        a.k = b16(N * Dkv);
        a.v = b16(N * Dkv);
    }
    if (o.n_fa > 0) {
        a.o = o.n_la == 0 ? a.heads : b16(N * Dfa);
        a.lse = f32(N * o.n_fa);
        if (c.qk_norm) {
            a.qk_pre = b16(N * (Dfa + Dkv));
            a.rstd_q = f32(N * o.n_fa);
            a.rstd_k = f32(N * o.n_kv);
        }
        if (!o.uniform_groups) {
            a.kdup = b16(N * Dfa);
            a.vdup = b16(N * Dfa);
        }
    }
    if (o.n_la > 0) {
        a.lqkv = b16(N * 3 * Dla);
        a.lz = b16(N * Dla);
        a.lab = b16(N * 2 * o.n_la);
        a.lq = b16(N * Dla);
        a.lk = b16(N * Dla);
        a.lv = b16(N * Dla);
        a.g = f32(N * o.n_la);
        a.beta = f32(N * o.n_la);
        a.lo = b16(N * Dla);
        a.gn_rstd = f32(N * o.n_la);
        a.gn_out = o.n_fa == 0 ? a.heads : b16(N * Dla);
    }
    a.mixed = fusion_active(m.plan().fusion, o.n_la) ? b16(N * HD) : a.heads;
    a.x_mid = f32(N * C);
    a.xn2 = b16(N * C);
    a.rstd2 = f32(N);
    a.gu = b16(N * 2 * F);
    a.act = b16(N * F);
}

// Bytes (256-aligned) of one layer's activations, and of its backward's scratch (layer_backward).
size_t acts_bytes(const GpuTrainModel& m, int64_t l, int64_t N) {
    size_t n = 0;
    GpuTrainStep::LayerActs a;
    layout_acts(m, l, N, a, [&](size_t b) -> void* {
        n += cuda::align_up(b);
        return nullptr;
    });
    return n;
}

size_t backward_scratch_bytes(const GpuTrainModel& m, int64_t l, int64_t N) {
    const ModelConfig& c = m.config();
    const TrainLayerOffsets& o = m.layer(l);
    const int64_t C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim, HD = c.num_heads * Dh;
    const int64_t Dfa = o.n_fa * Dh, Dkv = o.n_kv * Dh, Dla = o.n_la * Dh;
    size_t n = 0;
    auto add = [&](int64_t elems, int64_t bytes) { n += cuda::align_up(size_t(elems) * size_t(bytes)); };
    add(N * C, 2), add(N * F, 2), add(N * 2 * F, 2), add(N * C, 4), add(N * HD, 2);
    if (o.n_fa > 0) add(N * Dfa, 2), add(N * Dfa, 2), add(N * Dkv, 2), add(N * Dkv, 2);
    if (o.n_fa > 0 && !o.uniform_groups) add(N * Dfa, 2), add(N * Dfa, 2);  // per-head dK, dV
    if (o.n_la > 0) {
        for (int i = 0; i < 6; ++i) add(N * Dla, 2);
        add(N * o.n_la, 4), add(N * o.n_la, 4), add(N * 2 * o.n_la, 2), add(N * 3 * Dla, 2);
    }
    return n;
}

}  // namespace

void GpuTrainStep::alloc_acts(const GpuTrainModel& m, int64_t l, const Shape& s, LayerActs& a) {
    cuda::DeviceArena& ar = *arena_;
    const bool fused = fused_qkv(m, l, s);
    layout_acts(
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
            const size_t a = acts_bytes(m, l, N);
            layer_max = std::max(layer_max, a);
            layer_sum += a;
            if (keep) bwd_max = std::max(bwd_max, backward_scratch_bytes(m, l, N));
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
        teacher_layer = std::max(teacher_layer, acts_bytes(*teacher_, l, N));
    for (int64_t l = 0; l < L; ++l)
        student_layer = std::max(student_layer, acts_bytes(student_, l, N) + backward_scratch_bytes(student_, l, N));
    n += std::max(rope(teacher_->config()) + teacher_layer, rope(c) + student_layer);
    return n + n / 16 + (size_t(64) << 20);
}

void GpuTrainStep::layer_forward(const GpuTrainModel& m, int64_t l, const Shape& s, const float* x_in, float* x_out,
                                 LayerActs& a, bool save, const float* rope_cos, const float* rope_sin) {
    const ModelConfig& c = m.config();
    const HybridPlan& plan = m.plan();
    const TrainLayerOffsets& o = m.layer(l);
    const int64_t B = s.B, T = s.T, N = s.N(), C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim;
    const int64_t H = c.num_heads, HD = H * Dh, n_fa = o.n_fa, n_kv = o.n_kv, n_la = o.n_la;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const float eps = c.rms_norm_eps, scale = float(1.0 / std::sqrt(double(Dh)));
    cudaStream_t st = stream_;
    BlasContext& b = *blas_;
    a.x_in = x_in;

    prof_.section("rmsnorm");
    cuda::rmsnorm_forward(a.xn1, a.rstd1, x_in, m.p32(o.attn_norm), N, C, eps, st);
    if (n_fa > 0) {
        prof_.section("gemm_fwd");
        if (a.ld_qkv) {  // one GEMM (when the weights are adjacent) into q|k|v columns
            proj_forward(m, b, st, a.xn1, N, C, {{o.wq, o.bq, Dfa}, {o.wk, o.bk, Dkv}, {o.wv, o.bv, Dkv}},
                         a.q, a.ld_qkv);
        } else {
            proj_forward(m, b, st, a.xn1, N, C, {{o.wq, o.bq, Dfa}}, a.q, Dfa);
            proj_forward(m, b, st, a.xn1, N, C, {{o.wk, o.bk, Dkv}}, a.k, Dkv);
            proj_forward(m, b, st, a.xn1, N, C, {{o.wv, o.bv, Dkv}}, a.v, Dkv);
        }
        const int64_t ldq = a.ld_qkv ? a.ld_qkv : Dfa, ldk = a.ld_qkv ? a.ld_qkv : Dkv;
        if (c.qk_norm) {  // per-head RMSNorm before RoPE; the backward reads the input and statistics
            prof_.section("rmsnorm");
            const bool keep = save && a.qk_pre;
            bf16* pre = keep ? a.qk_pre : nullptr;
            head_rmsnorm_forward(a.q, ldq, pre, Dfa + Dkv, keep ? a.rstd_q : nullptr, m.p32(o.q_norm), N,
                                 n_fa, Dh, eps, st);
            head_rmsnorm_forward(a.k, ldk, keep ? pre + Dfa : nullptr, Dfa + Dkv, keep ? a.rstd_k : nullptr,
                                 m.p32(o.k_norm), N, n_kv, Dh, eps, st);
        }
        prof_.section("rope");
        if (c.rope_dim > 0 && a.ld_qkv) {  // q's and k's heads adjacent in the row: one launch
            cuda::rope_forward_strided(a.q, a.ld_qkv, B, T, n_fa + n_kv, Dh, c.rope_dim, rope_cos, rope_sin,
                                       st);
        } else if (c.rope_dim > 0) {
            cuda::rope_forward(a.q, B, T, n_fa, Dh, c.rope_dim, rope_cos, rope_sin, st);
            cuda::rope_forward(a.k, B, T, n_kv, Dh, c.rope_dim, rope_cos, rope_sin, st);
        }
        const bf16* kk = a.k;
        const bf16* vv = a.v;
        int64_t hkv = n_kv;
        if (!o.uniform_groups) {  // head granularity: each FA head gets its own copy of its group's K / V
            prof_.section("copies");
            cuda::gather_heads(a.kdup, a.k, o.kv_index, N, n_kv, n_fa, Dh, st);
            cuda::gather_heads(a.vdup, a.v, o.kv_index, N, n_kv, n_fa, Dh, st);
            kk = a.kdup, vv = a.vdup, hkv = n_fa;
        }
        cuda::AttnShape as;
        as.B = int(B), as.T = int(T), as.H = int(n_fa), as.Hkv = int(hkv), as.D = int(Dh);
        as.ld_qkv = int(a.ld_qkv);
        prof_.section("attention");
        if (use_cudnn_attention(as))
            cudnn_attn_->forward(as, a.q, kk, vv, a.o, a.lse, scale, st);
        else
            cuda::attention_forward(as, a.q, kk, vv, a.o, a.lse, scale, st);
        prof_.section("copies");
        if (n_la > 0) copy_rows(a.heads, HD, a.o, Dfa, Dfa, N, st);
    }
    if (n_la > 0) {
        const int64_t W = plan.gdn.conv_size;
        prof_.section("gemm_fwd");
        proj_forward(m, b, st, a.xn1, N, C, {{o.la_wq, o.la_bq, Dla}, {o.la_wk, o.la_bk, Dla}, {o.la_wv, o.la_bv, Dla}},
                     a.lqkv, 3 * Dla);
        proj_forward(m, b, st, a.xn1, N, C, {{o.la_wg, -1, Dla}}, a.lz, Dla);
        proj_forward(m, b, st, a.xn1, N, C, {{o.la_wa, -1, n_la}, {o.la_wb, -1, n_la}}, a.lab, 2 * n_la);
        prof_.section("la_conv");
        cuda::short_conv_forward(a.lq, nullptr, a.lqkv, 3 * Dla, m.p32(o.conv_q), nullptr, B, T, Dla, W, st);
        cuda::short_conv_forward(a.lk, nullptr, a.lqkv + Dla, 3 * Dla, m.p32(o.conv_k), nullptr, B, T, Dla, W, st);
        cuda::short_conv_forward(a.lv, nullptr, a.lqkv + 2 * Dla, 3 * Dla, m.p32(o.conv_v), nullptr, B, T, Dla, W, st);
        prof_.section("la_gates");
        cuda::gdn_gates_forward(a.g, a.beta, a.lab, a.lab + n_la, 2 * n_la, m.p32(o.A_log), m.p32(o.dt_bias), N, n_la,
                                plan.gdn.allow_neg_eigval, st);
        cuda::GdnShape gs;
        gs.B = int(B), gs.T = int(T), gs.H = int(n_la), gs.HV = int(n_la), gs.D = int(Dh);
        const bool student = &m == &student_;
        cuda::GdnWorkspace& ws = gdn_ws(l, n_la, Dh, s, save && student, student);
        prof_.section("gdn");
        cuda::gdn_chunk_forward(gs, a.lq, a.lk, a.lv, a.g, a.beta, nullptr, a.lo, nullptr, scale, true,
                                save && student, ws, st);
        prof_.section("la_gated_norm");
        cuda::gated_rmsnorm_forward(a.gn_out, a.gn_rstd, a.lo, a.lz, 0, m.p32(o.o_norm), N, n_la, Dh,
                                    plan.gdn.norm_eps, st);
        if (n_fa > 0) copy_rows(a.heads + Dfa, HD, a.gn_out, Dla, Dla, N, st);
    }
    prof_.section("fusion_residual");
    if (a.mixed != a.heads)
        cuda::fusion_forward(a.mixed, a.heads, N, n_fa, n_la, Dh, plan.fusion, fusion_scales(m, o), eps, st);
    prof_.section("gemm_fwd");
    mm_fwd_add(b, a.mixed, HD, m.p16(o.wo), N, HD, C, x_in, a.x_mid, C);  // x_mid = x_in + mixed @ Wo^T

    prof_.section("rmsnorm");
    cuda::rmsnorm_forward(a.xn2, a.rstd2, a.x_mid, m.p32(o.ffn_norm), N, C, eps, st);
    prof_.section("gemm_fwd");
    proj_forward(m, b, st, a.xn2, N, C, {{o.w_gate, -1, F}, {o.w_up, -1, F}}, a.gu, 2 * F);
    prof_.section("swiglu");
    cuda::swiglu_forward(a.act, a.gu, a.gu + F, N, F, 2 * F, st);
    prof_.section("gemm_fwd");
    mm_fwd_add(b, a.act, F, m.p16(o.w_down), N, F, C, a.x_mid, x_out, C);  // x_out = x_mid + act @ Wdown^T
    prof_.section("other");
}

void GpuTrainStep::layer_backward(int64_t l, const Shape& s, float* dx, LayerActs& a, bf16* dx_bf16) {
    const GpuTrainModel& m = student_;
    const ModelConfig& c = m.config();
    const HybridPlan& plan = m.plan();
    const TrainLayerOffsets& o = m.layer(l);
    const int64_t B = s.B, T = s.T, N = s.N(), C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim;
    const int64_t H = c.num_heads, HD = H * Dh, n_fa = o.n_fa, n_kv = o.n_kv, n_la = o.n_la;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const float eps = c.rms_norm_eps, scale = float(1.0 / std::sqrt(double(Dh)));
    cudaStream_t st = stream_;
    BlasContext& b = *blas_;
    cuda::DeviceArena& ar = *arena_;
    const size_t mark = ar.mark();

    // x_out = x_mid + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_mid)
    prof_.section("casts");
    bf16* dxb = dx_bf16;  // bf16(dx): written with dx by the norm backward that produced it, or cast here
    if (!dxb) {
        dxb = ar.alloc<bf16>(N * C);
        cuda::cast_f32_to_bf16(dxb, dx, N * C, st);
    }
    bf16* dact = ar.alloc<bf16>(N * F);
    prof_.section("gemm_dx");
    mm_dx16(b, dxb, C, m.p16(o.w_down), N, F, C, dact, F);
    prof_.section("gemm_dw");
    if (float* g = m.grad(o.w_down)) mm_dw(b, dxb, C, a.act, F, N, F, C, g);
    prof_.section("swiglu");
    bf16* dgu = ar.alloc<bf16>(N * 2 * F);
    cuda::swiglu_backward(dgu, dgu + F, dact, a.gu, a.gu + F, N, F, 2 * F, 2 * F, st);
    float* dxn = ar.alloc<float>(N * C);
    bool first = true;
    prof_.section("gemm_dx");
    proj_backward(m, b, st, dgu, 2 * F, a.xn2, N, C, {{o.w_gate, -1, F}, {o.w_up, -1, F}}, dxn, first, prof_);
    prof_.section("rmsnorm");
    cuda::rmsnorm_backward(dx, dxb, m.grad(o.ffn_norm), dxn, a.x_mid, m.p32(o.ffn_norm), a.rstd2, N, C,
                           st);  // d x_mid, and its bf16 copy for the o-projection GEMMs

    // x_mid = x_in + o_proj(fusion(heads))
    bf16* dheads = ar.alloc<bf16>(N * HD);
    prof_.section("gemm_dx");
    mm_dx16(b, dxb, C, m.p16(o.wo), N, HD, C, dheads, HD);
    prof_.section("gemm_dw");
    if (float* g = m.grad(o.wo)) mm_dw(b, dxb, C, a.mixed, HD, N, HD, C, g);
    prof_.section("fusion_residual");
    if (a.mixed != a.heads) {
        cuda::FusionScaleGrads fg;
        fg.head_scale = m.grad(o.head_scale), fg.fa_scale = m.grad(o.fa_scale), fg.la_scale = m.grad(o.la_scale);
        cuda::fusion_backward(dheads, fg, dheads, a.heads, N, n_fa, n_la, Dh, plan.fusion, fusion_scales(m, o), eps, st);
    }
    first = true;
    if (n_fa > 0) {
        bf16* d_o = dheads;
        if (n_la > 0) {
            d_o = ar.alloc<bf16>(N * Dfa);
            copy_rows(d_o, Dfa, dheads, HD, Dfa, N, st);
        }
        const int64_t ld = a.ld_qkv;  // dq|dk|dv in the layout of q|k|v
        bf16 *dq, *dk, *dv;
        if (ld) {
            dq = ar.alloc<bf16>(N * ld);
            dk = dq + Dfa;
            dv = dk + Dkv;
        } else {
            dq = ar.alloc<bf16>(N * Dfa);
            dk = ar.alloc<bf16>(N * Dkv);
            dv = ar.alloc<bf16>(N * Dkv);
        }
        // head granularity: attention ran on per-head copies of K / V; their gradients are summed per group
        const bool dup = !o.uniform_groups;
        const int64_t hkv = dup ? n_fa : n_kv;
        bf16* dk_att = dup ? ar.alloc<bf16>(N * Dfa) : dk;
        bf16* dv_att = dup ? ar.alloc<bf16>(N * Dfa) : dv;
        const bf16* kk = dup ? a.kdup : a.k;
        const bf16* vv = dup ? a.vdup : a.v;
        cuda::AttnShape as;
        as.B = int(B), as.T = int(T), as.H = int(n_fa), as.Hkv = int(hkv), as.D = int(Dh);
        as.ld_qkv = int(ld);
        prof_.section("attention");
        if (use_cudnn_attention(as))
            cudnn_attn_->backward(as, a.q, kk, vv, a.o, a.lse, d_o, dq, dk_att, dv_att, scale,
                                  attn_ws(n_fa, hkv, s), st);
        else
            cuda::attention_backward(as, a.q, kk, vv, a.o, a.lse, d_o, dq, dk_att, dv_att, scale,
                                     attn_ws(n_fa, hkv, s), st);
        if (dup) {
            prof_.section("copies");
            reduce_heads_by_group(dk, dk_att, o.kv_index, N, n_fa, n_kv, Dh, st);
            reduce_heads_by_group(dv, dv_att, o.kv_index, N, n_fa, n_kv, Dh, st);
        }
        prof_.section("rope");
        if (c.rope_dim > 0 && ld) {
            cuda::rope_backward_strided(dq, ld, B, T, n_fa + n_kv, Dh, c.rope_dim, rope_cos_, rope_sin_, st);
        } else if (c.rope_dim > 0) {
            cuda::rope_backward(dq, B, T, n_fa, Dh, c.rope_dim, rope_cos_, rope_sin_, st);
            cuda::rope_backward(dk, B, T, n_kv, Dh, c.rope_dim, rope_cos_, rope_sin_, st);
        }
        if (c.qk_norm) {  // d q / d k before the per-head norm, in place
            prof_.section("rmsnorm");
            const int64_t ldq = ld ? ld : Dfa, ldk = ld ? ld : Dkv;
            head_rmsnorm_backward(dq, ldq, m.grad(o.q_norm), a.qk_pre, Dfa + Dkv, m.p32(o.q_norm), a.rstd_q,
                                  N, n_fa, Dh, st);
            head_rmsnorm_backward(dk, ldk, m.grad(o.k_norm), a.qk_pre + Dfa, Dfa + Dkv, m.p32(o.k_norm),
                                  a.rstd_k, N, n_kv, Dh, st);
        }
        prof_.section("gemm_dx");
        if (ld) {
            proj_backward(m, b, st, dq, ld, a.xn1, N, C,
                          {{o.wq, o.bq, Dfa}, {o.wk, o.bk, Dkv}, {o.wv, o.bv, Dkv}}, dxn, first, prof_);
        } else {
            proj_backward(m, b, st, dq, Dfa, a.xn1, N, C, {{o.wq, o.bq, Dfa}}, dxn, first, prof_);
            proj_backward(m, b, st, dk, Dkv, a.xn1, N, C, {{o.wk, o.bk, Dkv}}, dxn, first, prof_);
            proj_backward(m, b, st, dv, Dkv, a.xn1, N, C, {{o.wv, o.bv, Dkv}}, dxn, first, prof_);
        }
    }
    if (n_la > 0) {
        const int64_t W = plan.gdn.conv_size;
        prof_.section("la_gated_norm");
        bf16* dgn = dheads;
        if (n_fa > 0) {
            dgn = ar.alloc<bf16>(N * Dla);
            copy_rows(dgn, Dla, dheads + Dfa, HD, Dla, N, st);
        }
        bf16* dlo = ar.alloc<bf16>(N * Dla);
        bf16* dz = ar.alloc<bf16>(N * Dla);
        cuda::gated_rmsnorm_backward(dlo, dz, 0, m.grad(o.o_norm), dgn, a.lo, a.lz, 0, m.p32(o.o_norm), a.gn_rstd, N,
                                     n_la, Dh, st);
        bf16* dlq = ar.alloc<bf16>(N * Dla);
        bf16* dlk = ar.alloc<bf16>(N * Dla);
        bf16* dlv = ar.alloc<bf16>(N * Dla);
        float* dg = ar.alloc<float>(N * n_la);
        float* dbeta = ar.alloc<float>(N * n_la);
        cuda::GdnShape gs;
        gs.B = int(B), gs.T = int(T), gs.H = int(n_la), gs.HV = int(n_la), gs.D = int(Dh);
        prof_.section("gdn");
        cuda::gdn_chunk_backward(gs, a.lq, a.lk, a.lv, a.g, a.beta, dlo, nullptr, dlq, dlk, dlv, dg, dbeta, nullptr,
                                 scale, true, gdn_ws(l, n_la, Dh, s, true, true), st);
        prof_.section("la_gates");
        bf16* dlab = ar.alloc<bf16>(N * 2 * n_la);
        cuda::gdn_gates_backward(dlab, dlab + n_la, 2 * n_la, m.grad(o.A_log), m.grad(o.dt_bias), dg, dbeta, a.lab,
                                 a.lab + n_la, 2 * n_la, m.p32(o.A_log), m.p32(o.dt_bias), N, n_la,
                                 plan.gdn.allow_neg_eigval, st);
        bf16* dlqkv = ar.alloc<bf16>(N * 3 * Dla);
        prof_.section("la_conv");
        cuda::short_conv_backward(dlqkv, 3 * Dla, m.grad(o.conv_q), nullptr, dlq, nullptr, a.lqkv, 3 * Dla,
                                  m.p32(o.conv_q), nullptr, B, T, Dla, W, st);
        cuda::short_conv_backward(dlqkv + Dla, 3 * Dla, m.grad(o.conv_k), nullptr, dlk, nullptr, a.lqkv + Dla, 3 * Dla,
                                  m.p32(o.conv_k), nullptr, B, T, Dla, W, st);
        cuda::short_conv_backward(dlqkv + 2 * Dla, 3 * Dla, m.grad(o.conv_v), nullptr, dlv, nullptr, a.lqkv + 2 * Dla,
                                  3 * Dla, m.p32(o.conv_v), nullptr, B, T, Dla, W, st);
        prof_.section("gemm_dx");
        proj_backward(m, b, st, dlqkv, 3 * Dla, a.xn1, N, C,
                      {{o.la_wq, o.la_bq, Dla}, {o.la_wk, o.la_bk, Dla}, {o.la_wv, o.la_bv, Dla}}, dxn, first,
                      prof_);
        proj_backward(m, b, st, dz, Dla, a.xn1, N, C, {{o.la_wg, -1, Dla}}, dxn, first, prof_);
        proj_backward(m, b, st, dlab, 2 * n_la, a.xn1, N, C, {{o.la_wa, -1, n_la}, {o.la_wb, -1, n_la}}, dxn,
                      first, prof_);
    }
    prof_.section("rmsnorm");
    if (first) CUDA_CHECK(cudaMemsetAsync(dxn, 0, size_t(N * C) * sizeof(float), st));  // no mixer heads (not reached)
    // d x_in, and (dx_bf16 not null) its bf16 copy for the next (lower) layer's first GEMMs
    cuda::rmsnorm_backward(dx, dx_bf16, m.grad(o.attn_norm), dxn, a.x_in, m.p32(o.attn_norm), a.rstd1, N, C,
                           st);
    ar.reset(mark);
}

std::pair<float*, float*> GpuTrainStep::rope_tables(const ModelConfig& c, int64_t T) {
    const int64_t half = std::max<int64_t>(1, c.rope_dim / 2);
    float* cosv = arena_->alloc<float>(T * half);  // (T, rope_dim / 2)
    float* sinv = arena_->alloc<float>(T * half);
    if (c.rope_dim > 0) cuda::rope_table(cosv, sinv, T, c.rope_dim, 0, double(c.rope_theta), stream_);
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
        }
        if (float* g = student_.grad(student_.embed_offset()))
            cuda::embedding_backward(g, dx, ids_.data(), N, V, C, st);
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
                                  double(cudnn_attn_ ? cudnn_attn_->workspace_bytes() : 0)};
    if (kl_mask || prof_.enabled() || !run_step_graph(key, body)) body();

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
