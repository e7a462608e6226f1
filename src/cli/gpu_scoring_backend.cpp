// Head scoring's primitives on the GPU (see gpu_scoring_backend.h).
#include "cli/gpu_scoring_backend.h"

#ifdef HYDRA_WITH_CUDA

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/half.h"
#include "gpu/argmax.h"
#include "gpu/cuda_device.h"
#include "gpu/head_taps.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"

namespace hydra::gpu {

namespace {

// bf16 device values -> floats (synchronous).
void download_bf16(float* host, const bf16* d, int64_t n, cudaStream_t st) {
    std::vector<uint16_t> tmp(static_cast<size_t>(n));
    cuda::download(reinterpret_cast<bf16*>(tmp.data()), d, n, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
    for (int64_t i = 0; i < n; ++i) host[i] = bf16_to_f32(tmp[size_t(i)]);
}

void download_f32(float* host, const float* d, int64_t n, cudaStream_t st) {
    cuda::download(host, d, n, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
}

// The arena back to where it was when the scope began, also when a check throws (stream order keeps
// later kernels behind the ones that used the memory).
struct ArenaScope {
    cuda::DeviceArena& arena;
    size_t mark = arena.mark();
    ~ArenaScope() { arena.reset(mark); }
};

}  // namespace

// A run's device copy: what the sweeps, the mixer and the head gradients read.
struct GpuScoringBackend::Run {
    int64_t T = 0;
    std::vector<int32_t> tokens;
    cuda::DeviceBuffer<bf16> k, v;        // (L, T, n_kv, Dh) after RoPE
    cuda::DeviceBuffer<float> x_in_last;  // (L, C) each layer's input at the answer position
    cuda::DeviceBuffer<bf16> heads_last;  // (L, H, Dh) each layer's head outputs there
};

GpuScoringBackend::GpuScoringBackend(const LlamaModel& model) : ScoringBackend(model) {
    require_cuda_device();  // a clear error before the first CUDA call
    CUDA_CHECK(cudaStreamCreate(&stream_));
    model_ = std::make_unique<GpuTrainModel>(model, false, stream_);
    const ModelConfig& c = model_->config();
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const TrainLayerOffsets& o = model_->layer(l);
        HYDRA_CHECK(o.n_la == 0 && o.n_fa == c.num_heads && o.n_kv == c.num_kv_heads,
                    "GPU head scoring: layer {} is not a teacher layer (score the all-FA teacher)", l);
        weights_.push_back(layer_weights(*model_, l));
    }
    blas_ = std::make_unique<cuda::BlasContext>(stream_);
    res_.b = this;
}

GpuScoringBackend::~GpuScoringBackend() {
    if (stream_) (void)cudaStreamSynchronize(stream_);
    attn_ws_.clear();
    arena_.reset();
    blas_.reset();
    model_.reset();
    if (stream_) (void)cudaStreamDestroy(stream_);
}

cuda::AttnWorkspace& GpuScoringBackend::Resources::attn_workspace(int64_t n_fa, int64_t n_kv,
                                                                  const GpuLayerShape& s) {
    const auto key = std::make_tuple(s.B, s.T, n_fa, n_kv);
    auto it = b->attn_ws_.find(key);
    if (it != b->attn_ws_.end()) return *it->second;
    if (b->attn_ws_.size() >= 8) {  // prompts of many lengths: start over rather than hoard memory
        CUDA_CHECK(cudaStreamSynchronize(b->stream_));
        b->attn_ws_.clear();
    }
    cuda::AttnShape as;
    as.B = int(s.B), as.T = int(s.T), as.H = int(n_fa), as.Hkv = int(n_kv),
    as.D = int(b->model_->config().head_dim);
    return *b->attn_ws_.emplace(key, std::make_unique<cuda::AttnWorkspace>(as)).first->second;
}

cuda::GdnWorkspace& GpuScoringBackend::Resources::gdn_workspace(int64_t, int64_t, const GpuLayerShape&,
                                                                bool) {
    fail("GPU head scoring: the teacher has no LA heads");
}

const GpuScoringBackend::Run& GpuScoringBackend::run_of(const FaRun<float>& r) const {
    HYDRA_CHECK(r.device != nullptr, "GPU head scoring: the run was not made by the GPU backend");
    return *static_cast<const Run*>(r.device.get());
}

void GpuScoringBackend::ensure_arena(size_t bytes) {
    bytes += bytes / 16 + (size_t(64) << 20);
    if (arena_ && arena_->capacity_bytes() >= bytes) return;
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // nothing in flight uses the old arena
    arena_.reset();
    arena_ = std::make_unique<cuda::DeviceArena>(bytes);
}

size_t GpuScoringBackend::prompt_bytes(int64_t T, bool save) const {
    const ModelConfig& c = model_->config();
    const int64_t L = c.num_layers, C = c.hidden_size, HD = c.num_heads * c.head_dim;
    size_t n = 2 * cuda::align_up(size_t(T) * size_t(std::max<int64_t>(1, c.rope_dim / 2)) * 4);  // RoPE
    n += cuda::align_up(size_t(T) * 4);                                                           // ids
    const size_t row = cuda::align_up(size_t(T) * size_t(C) * 4);
    size_t acts = 0, scratch = 0;
    for (int64_t l = 0; l < L; ++l) {
        acts =
            save ? acts + layer_acts_bytes(*model_, l, T) : std::max(acts, layer_acts_bytes(*model_, l, T));
        scratch = std::max(scratch, layer_backward_scratch_bytes(*model_, l, T));
    }
    n += acts + cuda::align_up(size_t(T) * size_t(HD) * 2);  // + captured heads / d heads
    if (!save) return n + row;
    return n + size_t(L + 1) * row + row + scratch;  // residuals, dx, backward scratch
}

size_t GpuScoringBackend::rows_bytes(int64_t B) const {
    const ModelConfig& c = model_->config();
    const int64_t HD = c.num_heads * c.head_dim;
    return layer_acts_bytes(*model_, 0, B) + cuda::align_up(size_t(B) * size_t(c.hidden_size) * 4) +
           cuda::align_up(size_t(B) * size_t(HD) * 2) + 4096;
}

GpuLayerEnv GpuScoringBackend::env(const float* rope_cos, const float* rope_sin) const {
    GpuLayerEnv e;
    e.stream = stream_, e.blas = blas_.get(), e.arena = arena_.get(), e.prof = &prof_;
    e.res = const_cast<Resources*>(&res_);
    e.rope_cos = rope_cos, e.rope_sin = rope_sin;
    return e;
}

GpuScoringBackend::PromptPass GpuScoringBackend::prompt_pass(std::span<const int32_t> tokens, bool save,
                                                             const KvDst* kv, float* x_in_last,
                                                             bf16* heads_last, FaRun<float>* host) {
    const ModelConfig& c = model_->config();
    const int64_t T = int64_t(tokens.size()), L = c.num_layers, C = c.hidden_size, V = c.vocab_size;
    const int64_t HD = c.num_heads * c.head_dim;
    for (int64_t t = 0; t < T; ++t)
        HYDRA_CHECK(tokens[size_t(t)] >= 0 && tokens[size_t(t)] < V,
                    "token id {} at position {} is outside the vocabulary (0..{})", tokens[size_t(t)], t,
                    V - 1);
    cuda::DeviceArena& ar = *arena_;
    PromptPass p;
    const int64_t half = std::max<int64_t>(1, c.rope_dim / 2);
    p.rope_cos = ar.alloc<float>(T * half);
    p.rope_sin = ar.alloc<float>(T * half);
    if (c.rope_dim > 0)
        cuda::rope_table(p.rope_cos, p.rope_sin, T, c.rope_dim, 0, double(c.rope_theta), stream_);
    int32_t* ids = ar.alloc<int32_t>(T);
    cuda::upload(ids, tokens.data(), T, stream_);
    // the residual stream: one buffer, or (save) every layer's input kept for the backward
    std::vector<float*> x(size_t(save ? L + 1 : 1));
    for (float*& r : x) r = ar.alloc<float>(T * C);
    cuda::embedding_forward(x[0], ids, model_->p32(model_->embed_offset()), T, V, C, stream_);
    auto alloc = [&](size_t b) { return ar.alloc_bytes(b); };
    GpuLayerActs shared;
    if (!save) layout_layer_acts(*model_, 0, T, shared, alloc);
    bf16* cap = host ? ar.alloc<bf16>(T * HD) : nullptr;
    if (host) {
        host->x_in.assign(size_t(L), std::vector<float>(size_t(T * C)));
        host->heads.assign(size_t(L), std::vector<float>(size_t(T * HD)));
    }
    if (save) p.acts.resize(size_t(L));
    for (int64_t l = 0; l < L; ++l) {
        float* xin = x[save ? size_t(l) : 0];
        float* xout = x[save ? size_t(l + 1) : 0];
        if (x_in_last)
            CUDA_CHECK(cudaMemcpyAsync(x_in_last + l * C, xin + (T - 1) * C, size_t(C) * 4,
                                       cudaMemcpyDeviceToDevice, stream_));
        if (host) download_f32(host->x_in[size_t(l)].data(), xin, T * C, stream_);
        GpuLayerActs* a = &shared;
        if (save) {
            layout_layer_acts(*model_, l, T, p.acts[size_t(l)], alloc);
            a = &p.acts[size_t(l)];
        }
        if (kv) a->k = kv->k + l * kv->stride, a->v = kv->v + l * kv->stride;  // (T, n_kv, Dh) straight there
        GpuHeadTaps taps;
        if (host) {
            taps.capture = cap, taps.capture_row0 = 0, taps.capture_rows = T;
        } else if (heads_last) {
            taps.capture = heads_last + l * HD, taps.capture_row0 = T - 1, taps.capture_rows = 1;
        }
        GpuLayerEnv e = env(p.rope_cos, p.rope_sin);
        e.taps = &taps;
        GpuLayerShape s;
        s.B = 1, s.T = T;
        gpu_layer_forward(c, model_->plan(), weights_[size_t(l)], l, s, xin, xout, *a, save, e);
        if (host) {
            download_bf16(host->heads[size_t(l)].data(), cap, T * HD, stream_);
            if (heads_last)
                CUDA_CHECK(cudaMemcpyAsync(heads_last + l * HD, cap + (T - 1) * HD, size_t(HD) * 2,
                                           cudaMemcpyDeviceToDevice, stream_));
        }
    }
    p.x_final = x.back();
    counters_.prompt_tokens += T;
    return p;
}

FaRun<float> GpuScoringBackend::forward(std::span<const int32_t> tokens, bool save_all_positions,
                                        const FaRun<float>*, std::span<const int32_t>) {
    const ModelConfig& c = model_->config();
    const int64_t T = int64_t(tokens.size()), L = c.num_layers, C = c.hidden_size,
                  HD = c.num_heads * c.head_dim;
    HYDRA_CHECK(T > 0, "head scoring: empty prompt");
    auto run = std::make_shared<Run>();
    run->T = T;
    run->tokens.assign(tokens.begin(), tokens.end());
    const int64_t kvd = c.num_kv_heads * c.head_dim;
    run->k.resize(L * T * kvd);
    run->v.resize(L * T * kvd);
    run->x_in_last.resize(L * C);
    run->heads_last.resize(L * HD);
    ensure_arena(prompt_bytes(T, false));
    const ArenaScope scope{*arena_};
    FaRun<float> out;
    out.num_tokens = T;
    out.saved_from = save_all_positions ? 0 : T - 1;
    const KvDst kv{run->k.data(), run->v.data(), T * kvd};
    const PromptPass p = prompt_pass(tokens, false, &kv, run->x_in_last.data(), run->heads_last.data(),
                                     save_all_positions ? &out : nullptr);
    out.x_final.resize(size_t(out.saved_rows() * C));
    download_f32(out.x_final.data(), p.x_final + out.saved_from * C, out.saved_rows() * C, stream_);
    if (!save_all_positions) {
        out.x_in.assign(size_t(L), std::vector<float>(size_t(C)));
        out.heads.assign(size_t(L), std::vector<float>(size_t(HD)));
        std::vector<float> xs(size_t(L * C)), hs(size_t(L * HD));
        download_f32(xs.data(), run->x_in_last.data(), L * C, stream_);
        download_bf16(hs.data(), run->heads_last.data(), L * HD, stream_);
        for (int64_t l = 0; l < L; ++l) {
            std::memcpy(out.x_in[size_t(l)].data(), xs.data() + l * C, size_t(C) * 4);
            std::memcpy(out.heads[size_t(l)].data(), hs.data() + l * HD, size_t(HD) * 4);
        }
    }
    out.device = std::move(run);
    return out;
}

void GpuScoringBackend::prefix_layer(const Run& r, int64_t l, int64_t B, float* X, GpuLayerActs& a,
                                     const GpuHeadTaps* taps) {
    const ModelConfig& c = model_->config();
    const int64_t kvd = c.num_kv_heads * c.head_dim;
    GpuLayerPrefix px;
    px.k = r.k.data() + l * r.T * kvd;
    px.v = r.v.data() + l * r.T * kvd;
    px.pos = r.T - 1;
    GpuLayerEnv e = env();
    e.prefix = &px;
    e.taps = taps;
    GpuLayerShape s;
    s.B = B, s.T = 1;
    gpu_layer_forward(c, model_->plan(), weights_[size_t(l)], l, s, X, X, a, false, e);
    counters_.patched_rows += B;
}

std::vector<float> GpuScoringBackend::sweep(const FaRun<float>& base,
                                            std::span<const PatchedCopy<float>> copies, int64_t max_batch) {
    const Run& r = run_of(base);
    const ModelConfig& c = model_->config();
    const int64_t L = c.num_layers, C = c.hidden_size, H = c.num_heads, Dh = c.head_dim, HD = H * Dh;
    HYDRA_CHECK(max_batch > 0, "patching batch size must be positive");
    const int64_t N = int64_t(copies.size());
    std::vector<int64_t> start;
    const std::vector<int64_t> order = copies_by_first_layer(copies, L, H, start);
    std::vector<float> out(static_cast<size_t>(N * C));
    const int64_t Bmax = std::min(max_batch, std::max<int64_t>(N, 1));
    ensure_arena(rows_bytes(Bmax));
    // Consecutive copies of the sorted order per batch: a batch of late-starting copies skips the early
    // layers.
    for (int64_t c0 = 0; c0 < N; c0 += max_batch) {
        const int64_t B = std::min(max_batch, N - c0);
        const int64_t* ids = order.data() + c0;
        const int64_t l0 = start[size_t(ids[0])];
        // Every layer's writes (one per patched head; the last patch of a head wins, as on the CPU) and the
        // patch values, uploaded once per batch.
        std::vector<uint16_t> values;
        std::vector<GpuHeadWrite> writes;
        std::vector<int64_t> value_of;  // per write: its row in `values`
        std::vector<int64_t> layer_begin(size_t(L + 1), 0);
        for (int64_t l = 0; l < L; ++l) {
            layer_begin[size_t(l)] = int64_t(writes.size());
            if (l < l0) continue;
            for (int64_t b = 0; b < B; ++b) {
                std::map<int64_t, const float*> last;  // head -> value
                for (const auto& p : copies[size_t(ids[b])].patches)
                    if (p.layer == l) last[p.head] = p.value;
                for (const auto& [h, val] : last) {
                    GpuHeadWrite w;
                    w.row = int32_t(b), w.head = int32_t(h), w.count = 1;
                    writes.push_back(w);
                    value_of.push_back(int64_t(values.size()) / Dh);
                    for (int64_t d = 0; d < Dh; ++d) values.push_back(f32_to_bf16(val[d]));
                }
            }
        }
        layer_begin[size_t(L)] = int64_t(writes.size());
        const ArenaScope scope{*arena_};
        bf16* dvals = arena_->alloc<bf16>(int64_t(values.size()));
        GpuHeadWrite* dwrites = arena_->alloc<GpuHeadWrite>(int64_t(writes.size()));
        for (size_t i = 0; i < writes.size(); ++i) writes[i].src = dvals + value_of[i] * Dh;
        if (!values.empty())
            cuda::upload(dvals, reinterpret_cast<const bf16*>(values.data()), int64_t(values.size()),
                         stream_);
        if (!writes.empty()) cuda::upload(dwrites, writes.data(), int64_t(writes.size()), stream_);
        float* X = arena_->alloc<float>(B * C);
        GpuLayerActs a;
        layout_layer_acts(*model_, 0, B, a, [&](size_t bytes) { return arena_->alloc_bytes(bytes); });
        int64_t active = 0;
        for (int64_t l = l0; l < L; ++l) {
            const int64_t before = active;
            while (active < B && start[size_t(ids[active])] == l) ++active;
            if (active == 0) continue;
            // copies joining at l: the base run's layer input, and its head outputs (not recomputed)
            if (active > before)
                broadcast_rows(X + before * C, r.x_in_last.data() + l * C, active - before, C, stream_);
            GpuHeadTaps taps;
            taps.fill = r.heads_last.data() + l * HD, taps.fill_row0 = before,
            taps.fill_rows = active - before;
            taps.writes = dwrites + layer_begin[size_t(l)];
            taps.n_writes = layer_begin[size_t(l + 1)] - layer_begin[size_t(l)];
            prefix_layer(r, l, active, X, a, &taps);
        }
        std::vector<float> xs(size_t(active * C));
        if (active > 0) download_f32(xs.data(), X, active * C, stream_);
        for (int64_t b = 0; b < B; ++b) {
            const float* src = b < active ? xs.data() + b * C : base.x_final_last(C);
            std::memcpy(out.data() + ids[b] * C, src, size_t(C) * sizeof(float));
        }
    }
    return out;
}

void GpuScoringBackend::answer_mixer(const FaRun<float>& base, int64_t layer, const float* X, int64_t n,
                                     float* heads, int64_t max_batch) {
    const Run& r = run_of(base);
    const ModelConfig& c = model_->config();
    const int64_t C = c.hidden_size, HD = c.num_heads * c.head_dim;
    HYDRA_CHECK(layer >= 0 && layer < c.num_layers, "layer {} is outside the model", layer);
    HYDRA_CHECK(max_batch > 0, "patching batch size must be positive");
    const int64_t Bmax = std::min(max_batch, std::max<int64_t>(n, 1));
    ensure_arena(rows_bytes(Bmax) + cuda::align_up(size_t(Bmax) * size_t(HD) * 2));
    for (int64_t c0 = 0; c0 < n; c0 += max_batch) {
        const int64_t B = std::min(max_batch, n - c0);
        const ArenaScope scope{*arena_};
        float* dX = arena_->alloc<float>(B * C);
        bf16* cap = arena_->alloc<bf16>(B * HD);
        cuda::upload(dX, X + c0 * C, B * C, stream_);
        GpuLayerActs a;
        layout_layer_acts(*model_, 0, B, a, [&](size_t bytes) { return arena_->alloc_bytes(bytes); });
        GpuHeadTaps taps;
        taps.capture = cap, taps.capture_row0 = 0, taps.capture_rows = B;
        prefix_layer(r, layer, B, dX, a, &taps);  // the rest of the layer runs too: cheap, and not read
        download_bf16(heads + c0 * HD, cap, B * HD, stream_);
    }
}

void GpuScoringBackend::head_grad(const FaRun<float>& run, const LogitDiff<float>& ld,
                                  const std::function<void(int64_t, const bf16*)>& sink) {
    const Run& r = run_of(run);
    const ModelConfig& c = model_->config();
    const int64_t T = r.T, L = c.num_layers, C = c.hidden_size, HD = c.num_heads * c.head_dim;
    ensure_arena(prompt_bytes(T, true));
    const ArenaScope scope{*arena_};
    PromptPass p = prompt_pass(r.tokens, true, nullptr, nullptr, nullptr, nullptr);
    float* dx = arena_->alloc<float>(T * C);
    bf16* dh = arena_->alloc<bf16>(T * HD);
    CUDA_CHECK(cudaMemsetAsync(dx, 0, size_t(T * C) * sizeof(float), stream_));
    // d LD / d x_final at the answer row, on the host from the run's final residual (as on the CPU)
    std::vector<float> g(static_cast<size_t>(C));
    ld.backward(run.x_final_last(C), g.data());
    cuda::upload(dx + (T - 1) * C, g.data(), C, stream_);
    GpuHeadTaps taps;
    taps.d_heads = dh;
    GpuLayerEnv e = env(p.rope_cos, p.rope_sin);
    e.taps = &taps;
    GpuLayerShape s;
    s.B = 1, s.T = T;
    for (int64_t l = L - 1; l >= 0; --l) {
        gpu_layer_backward(c, model_->plan(), weights_[size_t(l)], layer_grads(*model_, l), l, s, dx,
                           p.acts[size_t(l)], nullptr, e);
        sink(l, dh);
    }
    counters_.backward_tokens += T;
    CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::vector<float> GpuScoringBackend::answer_head_grad(const FaRun<float>& run, const LogitDiff<float>& ld) {
    const ModelConfig& c = model_->config();
    const int64_t HD = c.num_heads * c.head_dim, T = run_of(run).T;
    std::vector<float> out(static_cast<size_t>(c.num_layers * HD));
    head_grad(run, ld, [&](int64_t l, const bf16* dh) {
        download_bf16(out.data() + l * HD, dh + (T - 1) * HD, HD, stream_);
    });
    return out;
}

std::vector<std::vector<float>> GpuScoringBackend::all_head_grad(const FaRun<float>& run,
                                                                 const LogitDiff<float>& ld) {
    const ModelConfig& c = model_->config();
    const int64_t HD = c.num_heads * c.head_dim, T = run_of(run).T;
    HYDRA_CHECK(run.saved_from == 0, "attribution over all positions needs a run that kept every position");
    std::vector<std::vector<float>> out(size_t(c.num_layers), std::vector<float>(size_t(T * HD)));
    head_grad(run, ld,
              [&](int64_t l, const bf16* dh) { download_bf16(out[size_t(l)].data(), dh, T * HD, stream_); });
    return out;
}

// Retrieval decode on the device (see the file comment of gpu_scoring_backend.h).
class GpuScoringBackend::Decoder final : public RetrievalDecoder {
  public:
    explicit Decoder(GpuScoringBackend& b) : b_(b) {}

    void start(std::span<const int32_t> prefix, int64_t capacity) override {
        const ModelConfig& c = b_.model_->config();
        HYDRA_CHECK(capacity > int64_t(prefix.size()),
                    "retrieval decode: a cache of {} positions for {} tokens", capacity, prefix.size());
        const int64_t L = c.num_layers, kvd = c.num_kv_heads * c.head_dim;
        if (capacity > cap_) {
            k_.resize(L * capacity * kvd);
            v_.resize(L * capacity * kvd);
            cap_ = capacity;
        }
        if (top_.size() == 0) {
            top_.resize(L * c.num_heads);
            token_.resize(1);
            logits_.resize(c.vocab_size);
        }
        pos_ = int64_t(prefix.size());
        if (pos_ == 0) return;
        b_.ensure_arena(b_.prompt_bytes(pos_, false));
        const ArenaScope scope{*b_.arena_};
        const KvDst kv{k_.data(), v_.data(), cap_ * kvd};
        b_.prompt_pass(prefix, false, &kv, nullptr, nullptr, nullptr);
        CUDA_CHECK(cudaStreamSynchronize(b_.stream_));
    }

    int32_t step(int32_t token, std::vector<int64_t>& top) override {
        const ModelConfig& c = b_.model_->config();
        const int64_t L = c.num_layers, C = c.hidden_size, H = c.num_heads, V = c.vocab_size;
        const int64_t kvd = c.num_kv_heads * c.head_dim;
        HYDRA_CHECK(pos_ < cap_, "retrieval decode: the cache of {} positions is full", cap_);
        HYDRA_CHECK(token >= 0 && token < V, "token id {} is outside the vocabulary (0..{})", token, V - 1);
        cudaStream_t st = b_.stream_;
        b_.ensure_arena(b_.rows_bytes(1) + cuda::align_up(size_t(C) * 2));
        const ArenaScope scope{*b_.arena_};
        float* x = b_.arena_->alloc<float>(C);
        bf16* xn = b_.arena_->alloc<bf16>(C);
        cuda::upload(token_.data(), &token, 1, st);
        cuda::embedding_forward(x, token_.data(), b_.model_->p32(b_.model_->embed_offset()), 1, V, C, st);
        GpuLayerActs a;
        layout_layer_acts(*b_.model_, 0, 1, a, [&](size_t bytes) { return b_.arena_->alloc_bytes(bytes); });
        for (int64_t l = 0; l < L; ++l) {
            bf16* kl = k_.data() + l * cap_ * kvd;
            bf16* vl = v_.data() + l * cap_ * kvd;
            a.k = kl + pos_ * kvd, a.v = vl + pos_ * kvd;  // the step's own key / value land in the cache
            GpuLayerPrefix px;
            px.k = kl, px.v = vl, px.pos = pos_, px.top = top_.data() + l * H;
            GpuLayerEnv e = b_.env();
            e.prefix = &px;
            GpuLayerShape s;
            s.B = 1, s.T = 1;
            gpu_layer_forward(c, b_.model_->plan(), b_.weights_[size_t(l)], l, s, x, x, a, false, e);
        }
        cuda::rmsnorm_forward(xn, nullptr, x, b_.model_->p32(b_.model_->final_norm_offset()), 1, C,
                              c.rms_norm_eps, st);
        cuda::linear_forward(*b_.blas_, xn, b_.model_->p16(b_.model_->lm_head_offset()), 1, C, V,
                             logits_.data(), 0.f);
        argmax_f32(token_.data(), logits_.data(), V, st);
        std::vector<int32_t> t32(size_t(L * H));
        int32_t next = 0;
        cuda::download(t32.data(), top_.data(), L * H, st);
        cuda::download(&next, token_.data(), 1, st);
        CUDA_CHECK(cudaStreamSynchronize(st));
        top.assign(t32.begin(), t32.end());
        ++pos_;
        ++b_.counters_.decode_steps;
        return next;
    }

  private:
    GpuScoringBackend& b_;
    cuda::DeviceBuffer<bf16> k_, v_;  // (L, cap_, n_kv, Dh)
    cuda::DeviceBuffer<int32_t> top_, token_;
    cuda::DeviceBuffer<float> logits_;
    int64_t cap_ = 0, pos_ = 0;
};

std::unique_ptr<RetrievalDecoder> GpuScoringBackend::decoder() {
    return std::make_unique<Decoder>(*this);
}

}  // namespace hydra::gpu

#endif  // HYDRA_WITH_CUDA
