// GPU forward pass (see gpu_forward.h): the layer loop over the ops of ops/cuda and gpu/, run eagerly or
// captured into CUDA graphs for single-token steps.
#include "gpu/gpu_forward.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "gpu/argmax.h"
#include "gpu/decode_attention.h"
#include "gpu/decode_graph_policy.h"
#include "gpu/gpu_rope.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/rmsnorm.h"
#include "ops/cuda/rope.h"

namespace hydra::gpu {

namespace {

template <typename T>
void grow(cuda::DeviceBuffer<T>& b, int64_t n) {
    if (b.size() < n) b.resize(n);
}

template <typename T>
T* data_or_null(const cuda::DeviceBuffer<T>& b) {
    return b.size() > 0 ? b.data() : nullptr;
}

}  // namespace

GpuForward::GpuForward(const GpuTrainModel& model)
    : model_(model), rope_freqs_(gpu_rope_freqs(model.config())) {
    for (int64_t l = 0; l < model.config().num_layers; ++l) weights_.push_back(inference_weights(model, l));
    res_.fwd = this;
    CUDA_CHECK(cudaStreamCreate(&stream_));
    blas_ = std::make_unique<cuda::BlasContext>(stream_);
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_token_), sizeof(int32_t)));
    argmax_ = cuda::DeviceBuffer<int32_t>(1);
    graphs_on_ = cuda_graphs_from_env(std::getenv("HYDRA_CUDA_GRAPHS"));
    if (const char* e = std::getenv("HYDRA_GPU_CONTINUE"); e && *e) {
        const std::string v(e);
        HYDRA_CHECK(v == "pass" || v == "steps", "HYDRA_GPU_CONTINUE='{}': expected pass or steps", v);
        continue_in_one_pass_ = v == "pass";
    }
}

GpuForward::~GpuForward() {
    if (stream_) (void)cudaStreamSynchronize(stream_);  // no replay may still use what is freed below
    graphs_.clear();
    gdn_ws_.clear();
    blas_.reset();
    if (host_token_) (void)cudaFreeHost(host_token_);
    if (stream_) (void)cudaStreamDestroy(stream_);
}

void GpuForward::ensure(int64_t T, int64_t n_logits, int64_t kv_len) {
    const ModelConfig& c = model_.config();
    const int64_t C = c.hidden_size, HD = c.num_heads * c.head_dim, H = c.num_heads, F = c.intermediate_size;
    if (T > cap_T_) {
        grow(ids_, T);
        grow(x_, T * C);
        grow(xn_, T * C);
        grow(proj_, T * model_.layout().max_proj_cols());
        grow(attn_, T * HD);
        grow(la_qkv_, 3 * T * HD);
        grow(gates_, 2 * T * H);
        grow(la_o_, T * HD);
        grow(heads_, T * HD);
        grow(gu_, T * 2 * F);
        grow(act_, T * F);
        grow(rope_, 2 * T * std::max<int64_t>(1, c.rope_dim / 2));
        cap_T_ = T;
    }
    if (n_logits > cap_logits_) {
        grow(logits_, n_logits * c.vocab_size);
        grow(xn_, n_logits * C);
        cap_logits_ = n_logits;
    }
    if (kv_len > cap_kv_) {
        ensure_decode_attention_workspace(
            partials_, int64_t(decode_attention_workspace_floats(H, c.head_dim, kv_len)), stream_);
        cap_kv_ = kv_len;
    }
}

cuda::GdnWorkspace& GpuForward::gdn_workspace(int64_t T, int64_t n_la) {
    auto key = std::make_pair(T, n_la);
    auto it = gdn_ws_.find(key);
    if (it != gdn_ws_.end()) return *it->second;
    if (gdn_ws_.size() >= 16) {  // prompts of many different lengths: start over rather than hoard memory
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        gdn_ws_.clear();
    }
    cuda::GdnShape s;
    s.B = 1, s.T = int(T), s.H = int(n_la), s.HV = int(n_la), s.D = int(model_.config().head_dim);
    auto ws = std::make_unique<cuda::GdnWorkspace>(s, false);
    return *gdn_ws_.emplace(key, std::move(ws)).first->second;
}

GpuForward::Work GpuForward::eager_work() {
    Work w;
    w.ids = ids_.data(), w.x = x_.data(), w.gates = data_or_null(gates_);
    w.rope = data_or_null(rope_), w.partials = data_or_null(partials_), w.logits = logits_.data();
    w.xn = xn_.data(), w.proj = proj_.data(), w.attn = data_or_null(attn_), w.la_qkv = data_or_null(la_qkv_);
    w.la_o = data_or_null(la_o_), w.heads = heads_.data(), w.gu = gu_.data(), w.act = act_.data();
    return w;
}

// One layer through gpu/gpu_decoder_layer.h's cache mode: the activations are the Work buffers (every
// projection in the fused (T, proj_cols) row, the residual x updated in place).
void GpuForward::layer(int64_t l, GpuCache& cache, int64_t T, int64_t pos0, const Work& w) {
    const ModelConfig& c = model_.config();
    const TrainLayerOffsets& g = model_.layer(l);
    const DeviceProjBlock& pb = model_.layout().proj(l);  // row offsets of the parts in the fused row
    const int64_t Dla = g.n_la * c.head_dim, P = pb.proj_cols;
    GpuLayerActs a;
    a.xn1 = w.xn;
    a.proj = w.proj, a.ld_proj = P;
    a.q = w.proj + pb.q, a.k = w.proj + pb.k, a.v = w.proj + pb.v, a.ld_qkv = P;
    // FA output straight into the heads when the layer has no LA heads, or for one token (its heads row is
    // [FA heads | LA heads], so the FA part is a (1, Dfa) row at its start)
    a.o = g.n_la == 0 || T == 1 ? w.heads : w.attn;
    a.lqkv = w.proj + pb.la_q, a.ld_lqkv = P;  // la_k, la_v follow la_q in the row
    a.lz = w.proj + pb.la_g, a.ld_lz = P;
    a.lab = w.proj + pb.la_a, a.ld_lab = P;  // la_b follows la_a
    a.lq = w.la_qkv, a.lk = w.la_qkv ? w.la_qkv + T * Dla : nullptr,
    a.lv = w.la_qkv ? w.la_qkv + 2 * T * Dla : nullptr;
    a.g = w.gates, a.beta = w.gates ? w.gates + T * g.n_la : nullptr;
    a.lo = w.la_o;
    // the gated norm into the heads (a pure-LA layer, or one token: the LA part of its heads row), else in
    // place over the GDN output, copied into the heads after
    a.gn_out = g.n_fa == 0 ? w.heads : T == 1 ? w.heads + g.n_fa * c.head_dim : w.la_o;
    a.heads = w.heads, a.mixed = w.heads;       // fusion in place
    a.x_mid = w.x, a.xn2 = w.xn, a.gu = w.gu, a.act = w.act;

    GpuLayerCache kc;
    kc.cache = &cache, kc.pos0 = pos0, kc.step = w.step, kc.max_splits = w.max_splits,
    kc.partials = w.partials;
    kc.rope = &rope_freqs_;
    kc.prefill = &prefill_;  // T > 1 at any pos0
    GpuLayerEnv env;
    env.stream = stream_, env.blas = blas_.get(), env.prof = &prof_, env.res = &res_, env.cache = &kc;
    if (T > 1) env.rope_cos = w.rope, env.rope_sin = w.rope + T * (c.rope_dim / 2);  // forward_pass's table
    GpuLayerShape s;
    s.B = 1, s.T = T;
    gpu_layer_forward(c, model_.plan(), weights_[size_t(l)], l, s, w.x, w.x, a, false, env);
}

cuda::CudnnAttention* GpuForward::LayerResources::cudnn_attention(const cuda::AttnShape&) {
    return nullptr;
}

cuda::AttnWorkspace& GpuForward::LayerResources::attn_workspace(int64_t, int64_t, const GpuLayerShape&) {
    fail("GPU inference: no attention backward");
}

cuda::GdnWorkspace& GpuForward::LayerResources::gdn_workspace(int64_t, int64_t n_la, const GpuLayerShape& s,
                                                              bool save) {
    HYDRA_ASSERT(!save, "GPU inference keeps no GDN state for a backward");
    return fwd->gdn_workspace(s.T, n_la);
}

void GpuForward::check_tokens(const GpuCache& cache, std::span<const int32_t> tokens) const {
    const int64_t T = int64_t(tokens.size()), pos0 = cache.pos(), V = model_.config().vocab_size;
    HYDRA_CHECK(T > 0, "GPU forward: no tokens");
    HYDRA_CHECK(pos0 + T <= cache.capacity(),
                "context overflow: {} cached + {} new tokens exceed the GPU cache of {}", pos0, T,
                cache.capacity());
    for (int64_t t = 0; t < T; ++t)
        HYDRA_CHECK(tokens[size_t(t)] >= 0 && tokens[size_t(t)] < V,
                    "token id {} at position {} is outside the vocabulary (0..{})", tokens[size_t(t)], t,
                    V - 1);
}

void GpuForward::forward_pass(GpuCache& cache, int64_t T, int64_t pos0, int64_t n_logits, const Work& w) {
    const ModelConfig& c = model_.config();
    const int64_t C = c.hidden_size, V = c.vocab_size;
    prof_.section("embedding_rope_table");
    cuda::embedding_forward(w.x, w.ids, model_.p32(model_.embed_offset()), T, V, C, stream_);
    if (T > 1 && fa_rotates(c)) {
        const int64_t half = c.rope_dim / 2;
        cuda::rope_table(w.rope, w.rope + T * half, T, c.rope_dim, pos0, rope_freqs_, stream_);
    }
    for (int64_t l = 0; l < c.num_layers; ++l) layer(l, cache, T, pos0, w);
    // final norm (bf16, the LM head GEMM's operand) of the last n_logits rows, then the logits in fp32
    prof_.section("lm_head");
    cuda::rmsnorm_forward(w.xn, nullptr, w.x + (T - n_logits) * C, model_.p32(model_.final_norm_offset()),
                          n_logits, C, c.rms_norm_eps, stream_);
    cuda::linear_forward(*blas_, w.xn, model_.p16(model_.lm_head_offset()), n_logits, C, V, w.logits, 0.f);
}

void GpuForward::run_segment(GpuCache& cache, std::span<const int32_t> tokens, int64_t n_logits) {
    const int64_t T = int64_t(tokens.size()), pos0 = cache.pos();
    check_tokens(cache, tokens);
    HYDRA_ASSERT(n_logits >= 1 && n_logits <= T, "GPU forward: {} logits rows of {} tokens", n_logits, T);
    ensure(T, n_logits, pos0 + T);
    CUDA_CHECK(cudaMemcpyAsync(ids_.data(), tokens.data(), size_t(T) * sizeof(int32_t),
                               cudaMemcpyHostToDevice, stream_));
    forward_pass(cache, T, pos0, n_logits, eager_work());
    cache.advance(T);
}

void GpuForward::drop_graphs() {
    if (!graphs_.empty()) CUDA_CHECK(cudaStreamSynchronize(stream_));  // no replay in flight uses them
    graphs_.clear();
    graph_cache_id_ = 0;
}

void GpuForward::prepare_graphs(const GpuCache& cache) {
    if (cache.id() == graph_cache_id_) return;
    // Another cache: the graphs hold the old one's addresses (and its capacity's attention grid).
    drop_graphs();
    HYDRA_CHECK(cache.capacity() < int64_t(std::numeric_limits<int32_t>::max()),
                "GPU cache of {} positions: graph decode keeps positions in int32", cache.capacity());
    const ModelConfig& c = model_.config();
    const int64_t C = c.hidden_size, HD = c.num_heads * c.head_dim, H = c.num_heads, F = c.intermediate_size;
    if (dec_.x.size() == 0) {  // sizes depend on the model only: allocated once, never moved
        dec_.ids.resize(1), dec_.argmax.resize(1), dec_.step.resize(1);
        dec_.x.resize(C), dec_.xn.resize(C), dec_.proj.resize(model_.layout().max_proj_cols());
        dec_.attn.resize(HD), dec_.la_qkv.resize(3 * HD), dec_.gates.resize(2 * H), dec_.la_o.resize(HD);
        dec_.heads.resize(HD), dec_.gu.resize(2 * F), dec_.act.resize(F), dec_.logits.resize(c.vocab_size);
    }
    // decode-attention partials for the largest grid this cache can need (graphs were dropped: may move)
    ensure_decode_attention_workspace(
        dec_.partials, int64_t(decode_attention_workspace_floats(H, c.head_dim, cache.capacity())), stream_);
    graph_cache_id_ = cache.id();
}

const float* GpuForward::graph_step(GpuCache& cache, int32_t token, bool argmax) {
    prepare_graphs(cache);
    const ModelConfig& c = model_.config();
    const int64_t pos = cache.pos();
    const int64_t splits = decode_graph_splits(pos + 1, cache.capacity());
    const auto key = std::make_pair(splits, argmax);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
        Work w;
        w.ids = dec_.ids.data(), w.x = dec_.x.data(), w.gates = dec_.gates.data(),
        w.partials = dec_.partials.data();
        w.logits = dec_.logits.data(), w.xn = dec_.xn.data(), w.proj = dec_.proj.data(),
        w.attn = dec_.attn.data();
        w.la_qkv = dec_.la_qkv.data(), w.la_o = dec_.la_o.data(), w.heads = dec_.heads.data(),
        w.gu = dec_.gu.data();
        w.act = dec_.act.data(), w.step = dec_.step.data(), w.max_splits = splits;
        const auto t0 = std::chrono::steady_clock::now();
        try {
            CudaGraph g = CudaGraph::capture(stream_, [&] {
                forward_pass(cache, 1, -1, 1, w);  // pos0 unused: every position comes from w.step
                if (argmax) {
                    argmax_f32(dec_.argmax.data(), w.logits, c.vocab_size, stream_);
                    CUDA_CHECK(cudaMemcpyAsync(host_token_, dec_.argmax.data(), sizeof(int32_t),
                                               cudaMemcpyDeviceToHost, stream_));
                }
            });
            stats_.last_nodes = g.num_nodes();
            it = graphs_.emplace(key, std::move(g)).first;
        } catch (const std::exception& e) {
            // e.g. a driver or cuBLAS that refuses capture: decode stays correct, only slower
            fmt::print(stderr, "warning: CUDA graph capture failed ({}); decoding without CUDA graphs\n",
                       e.what());
            ++stats_.fallbacks;
            graphs_on_ = false;
            drop_graphs();
            return nullptr;
        }
        ++stats_.captures;
        stats_.capture_seconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    set_decode_step(dec_.ids.data(), dec_.step.data(), token, int32_t(pos), stream_);
    it->second.launch(stream_);
    ++stats_.replays;
    cache.advance(1);
    return dec_.logits.data();
}

const float* GpuForward::run(GpuCache& cache, std::span<const int32_t> tokens, int64_t n_logits) {
    if (tokens.size() > 1 && cache.pos() > 0 && !continue_in_one_pass_ && has_la_heads()) {
        // A prompt continued past position 0 with LA heads, as single-token steps (set_continue_in_one_pass).
        const int64_t T = int64_t(tokens.size()), V = model_.config().vocab_size;
        check_tokens(cache, tokens);
        if (continued_logits_.size() < std::max<int64_t>(n_logits, 1) * V)
            continued_logits_.resize(std::max<int64_t>(n_logits, 1) * V);
        for (int64_t t = 0; t < T; ++t) {
            const float* lg = run(cache, tokens.subspan(size_t(t), 1), 1);
            const int64_t row = t - (T - n_logits);
            if (row >= 0)
                CUDA_CHECK(cudaMemcpyAsync(continued_logits_.data() + row * V, lg, size_t(V) * sizeof(float),
                                           cudaMemcpyDeviceToDevice, stream_));
        }
        return continued_logits_.data();
    }
    if (graphs_on_ && tokens.size() == 1) {
        check_tokens(cache, tokens);
        if (const float* lg = graph_step(cache, tokens[0], false)) return lg;
    }
    run_segment(cache, tokens, n_logits);
    return logits_.data();
}

std::vector<float> GpuForward::forward_last_logits(GpuCache& cache, std::span<const int32_t> tokens) {
    const int64_t V = model_.config().vocab_size;
    const float* lg = run(cache, tokens, 1);
    std::vector<float> out(static_cast<size_t>(V));
    CUDA_CHECK(cudaMemcpyAsync(out.data(), lg, size_t(V) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
}

std::vector<float> GpuForward::forward_all_logits(GpuCache& cache, std::span<const int32_t> tokens) {
    const int64_t V = model_.config().vocab_size, T = int64_t(tokens.size());
    std::vector<float> out(size_t(T * V));
    const float* lg = run(cache, tokens, T);
    CUDA_CHECK(
        cudaMemcpyAsync(out.data(), lg, size_t(T * V) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
}

const float* GpuForward::forward_all_logits_device(GpuCache& cache, std::span<const int32_t> tokens) {
    HYDRA_CHECK(
        cache.pos() == 0 || tokens.size() == 1,
        "forward_all_logits_device: {} tokens continuing at position {} (prefill from 0 or one token)",
        tokens.size(), cache.pos());
    return run(cache, tokens, int64_t(tokens.size()));
}

int32_t GpuForward::forward_argmax(GpuCache& cache, std::span<const int32_t> tokens) {
    if (graphs_on_ && tokens.size() == 1) {
        check_tokens(cache, tokens);
        if (graph_step(cache, tokens[0], true)) {  // the argmax and its copy to host_token_ are in the graph
            CUDA_CHECK(cudaStreamSynchronize(stream_));
            return *host_token_;
        }
    }
    const float* lg = run(cache, tokens, 1);
    argmax_f32(argmax_.data(), lg, model_.config().vocab_size, stream_);
    CUDA_CHECK(
        cudaMemcpyAsync(host_token_, argmax_.data(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return *host_token_;
}

bool GpuForward::has_la_heads() const {
    for (int64_t l = 0; l < model_.config().num_layers; ++l)
        if (model_.layer(l).n_la > 0) return true;
    return false;
}

}  // namespace hydra::gpu
