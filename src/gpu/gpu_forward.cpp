// GPU forward pass (see gpu_forward.h): the layer loop over the ops of ops/cuda and gpu/.
#include "gpu/gpu_forward.h"

#include <cmath>

#include "core/error.h"
#include "gpu/argmax.h"
#include "gpu/decode_attention.h"
#include "gpu/head_rmsnorm.h"
#include "model/fusion.h"
#include "ops/cuda/attention.h"
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

template <typename T>
void grow(cuda::DeviceBuffer<T>& b, int64_t n) {
    if (b.size() < n) b.resize(n);
}

// dst (rows, width) with row pitch dst_ld <- src (rows, width) with row pitch src_ld, bf16, on the device.
void copy_rows(bf16* dst, int64_t dst_ld, const bf16* src, int64_t src_ld, int64_t width, int64_t rows,
               cudaStream_t stream) {
    CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_ld) * sizeof(bf16), src, size_t(src_ld) * sizeof(bf16),
                                 size_t(width) * sizeof(bf16), size_t(rows), cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

GpuForward::GpuForward(const GpuModel& model) : model_(model) {
    CUDA_CHECK(cudaStreamCreate(&stream_));
    blas_ = std::make_unique<cuda::BlasContext>(stream_);
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_token_), sizeof(int32_t)));
    argmax_ = cuda::DeviceBuffer<int32_t>(1);
}

GpuForward::~GpuForward() {
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
        grow(proj_, T * model_.max_proj_cols());
        grow(qbuf_, T * HD);
        grow(attn_, T * HD);
        grow(lse_, T * H);
        grow(la_qkv_, 3 * T * HD);
        grow(gates_, 2 * T * H);
        grow(la_o_, T * HD);
        grow(heads_, T * HD);
        grow(gu_, T * 2 * F);
        grow(act_, T * F);
        grow(rope_, 2 * T * std::max<int64_t>(1, c.rope_dim / 2));
        bool any_head_granular = false;
        for (int64_t l = 0; l < c.num_layers; ++l)
            any_head_granular |= model_.layer(l).n_fa > 0 && !model_.layer(l).uniform_groups;
        if (any_head_granular) {
            grow(kdup_, T * HD);
            grow(vdup_, T * HD);
        }
        cap_T_ = T;
    }
    if (n_logits > cap_logits_) {
        grow(logits_, n_logits * c.vocab_size);
        grow(xn_, n_logits * C);
        cap_logits_ = n_logits;
    }
    if (kv_len > cap_kv_) {
        grow(partials_, int64_t(decode_attention_workspace_floats(H, c.head_dim, kv_len)));
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

void GpuForward::layer(int64_t l, GpuCache& cache, int64_t T, int64_t pos0) {
    const ModelConfig& c = model_.config();
    const HybridPlan& plan = model_.plan();
    const GpuLayer& g = model_.layer(l);
    const int64_t C = c.hidden_size, Dh = c.head_dim, H = c.num_heads, F = c.intermediate_size, HD = H * Dh;
    const int64_t P = g.proj_cols, n_fa = g.n_fa, n_kv = g.n_kv, n_la = g.n_la;
    const float eps = c.rms_norm_eps, scale = float(1.0 / std::sqrt(double(Dh)));
    cudaStream_t st = stream_;
    float* x = x_.data();
    bf16* xn = xn_.data();
    bf16* proj = proj_.data();
    bf16* heads = heads_.data();

    cuda::rmsnorm_forward(xn, nullptr, x, g.attn_norm, T, C, eps, st);
    cuda::linear_forward(*blas_, xn, g.w_proj, T, C, P, proj);  // (T, P) bf16
    if (g.b_proj) cuda::bias_add(proj, g.b_proj, T, P, 0, st);

    if (n_fa > 0) {
        bf16* q = proj + g.off_q;
        bf16* k = proj + g.off_k;
        const bf16* v = proj + g.off_v;
        if (g.q_norm) head_rmsnorm_inplace(q, P, g.q_norm, T, n_fa, Dh, eps, st);
        if (g.k_norm) head_rmsnorm_inplace(k, P, g.k_norm, T, n_kv, Dh, eps, st);
        if (T == 1) {
            cuda::rope_forward(q, 1, 1, n_fa, Dh, c.rope_dim, pos0, double(c.rope_theta), st);
            cuda::rope_forward(k, 1, 1, n_kv, Dh, c.rope_dim, pos0, double(c.rope_theta), st);
        } else {
            const int64_t half = c.rope_dim / 2;
            const float* cosv = rope_.data();
            const float* sinv = rope_.data() + T * half;
            cuda::rope_forward_strided(q, P, 1, T, n_fa, Dh, c.rope_dim, cosv, sinv, st);
            cuda::rope_forward_strided(k, P, 1, T, n_kv, Dh, c.rope_dim, cosv, sinv, st);
        }
        const int64_t kvw = n_kv * Dh;
        copy_rows(cache.k(l) + pos0 * kvw, kvw, k, P, kvw, T, st);
        copy_rows(cache.v(l) + pos0 * kvw, kvw, v, P, kvw, T, st);
        bf16* fa_out = n_la == 0 ? heads : attn_.data();  // (T, n_fa, Dh)
        if (T == 1) {
            decode_attention(fa_out, q, cache.k(l), cache.v(l), g.kv_index, n_fa, n_kv, Dh, pos0 + 1, scale,
                             partials_.data(), st);
        } else {
            HYDRA_ASSERT(pos0 == 0, "GPU prefill of {} tokens at position {} (only from 0)", T, pos0);
            bf16* qc = qbuf_.data();
            copy_rows(qc, n_fa * Dh, q, P, n_fa * Dh, T, st);
            const bf16* kk = cache.k(l);
            const bf16* vv = cache.v(l);
            int64_t hkv = n_kv;
            if (!g.uniform_groups) {  // head granularity: each FA head gets its own copy of its group's K/V
                cuda::gather_heads(kdup_.data(), cache.k(l), g.kv_index, T, n_kv, n_fa, Dh, st);
                cuda::gather_heads(vdup_.data(), cache.v(l), g.kv_index, T, n_kv, n_fa, Dh, st);
                kk = kdup_.data(), vv = vdup_.data(), hkv = n_fa;
            }
            cuda::AttnShape s;
            s.B = 1, s.T = int(T), s.H = int(n_fa), s.Hkv = int(hkv), s.D = int(Dh);
            cuda::attention_forward(s, qc, kk, vv, fa_out, lse_.data(), scale, st);
        }
        if (n_la > 0) copy_rows(heads, HD, fa_out, n_fa * Dh, n_fa * Dh, T, st);
    }

    if (n_la > 0) {
        const int64_t Dla = n_la * Dh, W = plan.gdn.conv_size;
        bf16* lq = la_qkv_.data();
        bf16* lk = lq + T * Dla;
        bf16* lv = lk + T * Dla;
        cuda::short_conv_forward(lq, cache.conv_q(l), proj + g.off_lq, P, g.conv_q, cache.conv_q(l), 1, T, Dla, W, st);
        cuda::short_conv_forward(lk, cache.conv_k(l), proj + g.off_lk, P, g.conv_k, cache.conv_k(l), 1, T, Dla, W, st);
        cuda::short_conv_forward(lv, cache.conv_v(l), proj + g.off_lv, P, g.conv_v, cache.conv_v(l), 1, T, Dla, W, st);
        float* gg = gates_.data();
        float* beta = gg + T * n_la;
        cuda::gdn_gates_forward(gg, beta, proj + g.off_la, proj + g.off_lb, P, g.A_log, g.dt_bias, T, n_la,
                                plan.gdn.allow_neg_eigval, st);
        bf16* o = la_o_.data();  // (T, n_la, Dh)
        if (T == 1) {
            cuda::gdn_decode_step(1, int(n_la), int(n_la), int(Dh), lq, lk, lv, gg, beta, cache.state(l),
                                  cache.state(l), o, scale, true, st);
        } else {
            cuda::GdnShape s;
            s.B = 1, s.T = int(T), s.H = int(n_la), s.HV = int(n_la), s.D = int(Dh);
            cuda::gdn_chunk_forward(s, lq, lk, lv, gg, beta, cache.state(l), o, cache.state(l), scale, true, false,
                                    gdn_workspace(T, n_la), st);
        }
        bf16* dst = n_fa == 0 ? heads : o;
        cuda::gated_rmsnorm_forward(dst, nullptr, o, proj + g.off_lz, P, g.o_norm, T, n_la, Dh, plan.gdn.norm_eps, st);
        if (n_fa > 0) copy_rows(heads + n_fa * Dh, HD, o, Dla, Dla, T, st);
    }

    if (fusion_active(plan.fusion, n_la)) {
        cuda::FusionScales fs;
        fs.head_scale = g.fusion_head_scale, fs.fa_scale = g.fusion_fa_scale, fs.la_scale = g.fusion_la_scale;
        cuda::fusion_forward(heads, heads, T, n_fa, n_la, Dh, plan.fusion, fs, eps, st);
    }
    cuda::linear_forward(*blas_, heads, g.w_o, T, HD, C, x, 1.f);  // x += heads @ Wo^T

    cuda::rmsnorm_forward(xn, nullptr, x, g.ffn_norm, T, C, eps, st);
    bf16* gu = gu_.data();
    cuda::linear_forward(*blas_, xn, g.w_gate_up, T, C, 2 * F, gu);  // (T, 2F) = [gate | up]
    cuda::swiglu_forward(act_.data(), gu, gu + F, T, F, 2 * F, st);
    cuda::linear_forward(*blas_, act_.data(), g.w_down, T, F, C, x, 1.f);  // x += act @ Wdown^T
}

void GpuForward::run_segment(GpuCache& cache, std::span<const int32_t> tokens, int64_t n_logits) {
    const ModelConfig& c = model_.config();
    const int64_t T = int64_t(tokens.size()), pos0 = cache.pos(), C = c.hidden_size, V = c.vocab_size;
    HYDRA_CHECK(T > 0, "GPU forward: no tokens");
    HYDRA_CHECK(pos0 + T <= cache.capacity(), "context overflow: {} cached + {} new tokens exceed the GPU cache of {}",
                pos0, T, cache.capacity());
    HYDRA_ASSERT(n_logits >= 1 && n_logits <= T, "GPU forward: {} logits rows of {} tokens", n_logits, T);
    for (int64_t t = 0; t < T; ++t)
        HYDRA_CHECK(tokens[size_t(t)] >= 0 && tokens[size_t(t)] < V,
                    "token id {} at position {} is outside the vocabulary (0..{})", tokens[size_t(t)], t, V - 1);
    ensure(T, n_logits, pos0 + T);
    CUDA_CHECK(cudaMemcpyAsync(ids_.data(), tokens.data(), size_t(T) * sizeof(int32_t), cudaMemcpyHostToDevice,
                               stream_));
    cuda::embedding_forward(x_.data(), ids_.data(), model_.embedding(), T, V, C, stream_);
    if (T > 1 && c.rope_dim > 0) {
        const int64_t half = c.rope_dim / 2;
        cuda::rope_table(rope_.data(), rope_.data() + T * half, T, c.rope_dim, pos0, double(c.rope_theta), stream_);
    }
    for (int64_t l = 0; l < c.num_layers; ++l) layer(l, cache, T, pos0);
    cache.advance(T);
    // final norm (bf16, the LM head GEMM's operand) of the last n_logits rows, then the logits in fp32
    cuda::rmsnorm_forward(xn_.data(), nullptr, x_.data() + (T - n_logits) * C, model_.final_norm(), n_logits, C,
                          c.rms_norm_eps, stream_);
    cuda::linear_forward(*blas_, xn_.data(), model_.lm_head(), n_logits, C, V, logits_.data(), 0.f);
}

void GpuForward::run(GpuCache& cache, std::span<const int32_t> tokens, int64_t n_logits) {
    run_segment(cache, tokens, n_logits);
}

std::vector<float> GpuForward::forward_last_logits(GpuCache& cache, std::span<const int32_t> tokens) {
    const int64_t V = model_.config().vocab_size;
    if (tokens.size() > 1 && cache.pos() > 0) {  // continued prompt: single-token steps
        for (size_t t = 0; t + 1 < tokens.size(); ++t) run(cache, tokens.subspan(t, 1), 1);
        tokens = tokens.subspan(tokens.size() - 1);
    }
    run(cache, tokens, 1);
    std::vector<float> out(static_cast<size_t>(V));
    CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_.data(), size_t(V) * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
}

std::vector<float> GpuForward::forward_all_logits(GpuCache& cache, std::span<const int32_t> tokens) {
    const int64_t V = model_.config().vocab_size, T = int64_t(tokens.size());
    std::vector<float> out(size_t(T * V));
    if (T > 1 && cache.pos() > 0) {
        for (int64_t t = 0; t < T; ++t) {
            run(cache, tokens.subspan(size_t(t), 1), 1);
            CUDA_CHECK(cudaMemcpyAsync(out.data() + t * V, logits_.data(), size_t(V) * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
        }
    } else {
        run(cache, tokens, T);
        CUDA_CHECK(cudaMemcpyAsync(out.data(), logits_.data(), size_t(T * V) * sizeof(float), cudaMemcpyDeviceToHost,
                                   stream_));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return out;
}

int32_t GpuForward::forward_argmax(GpuCache& cache, std::span<const int32_t> tokens) {
    if (tokens.size() > 1 && cache.pos() > 0) {
        for (size_t t = 0; t + 1 < tokens.size(); ++t) run(cache, tokens.subspan(t, 1), 1);
        tokens = tokens.subspan(tokens.size() - 1);
    }
    run(cache, tokens, 1);
    argmax_f32(argmax_.data(), logits_.data(), model_.config().vocab_size, stream_);
    CUDA_CHECK(cudaMemcpyAsync(host_token_, argmax_.data(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return *host_token_;
}

}  // namespace hydra::gpu
