// One GPU decoder layer, forward and backward (see gpu_decoder_layer.h), over the ops of ops/cuda and gpu/.
#include "gpu/gpu_decoder_layer.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "gpu/decode_attention.h"
#include "gpu/gpu_rope.h"
#include "gpu/head_rmsnorm.h"
#include "gpu/kv_group_reduce.h"
#include "gpu/paged_decode_attention.h"
#include "gpu/paged_kv_write.h"
#include "gpu/prefill_attention.h"
#include "gpu/prefix_attention.h"
#include "model/fusion.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise.h"
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

// dst (rows, width) with row pitch dst_ld <- src (rows, width) with row pitch src_ld, bf16, on the device.
void copy_rows(bf16* dst, int64_t dst_ld, const bf16* src, int64_t src_ld, int64_t width, int64_t rows,
               cudaStream_t stream) {
    if (rows == 0 || width == 0) return;
    CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_ld) * sizeof(bf16), src, size_t(src_ld) * sizeof(bf16),
                                 size_t(width) * sizeof(bf16), size_t(rows), cudaMemcpyDeviceToDevice,
                                 stream));
}

// ---- GEMMs in HF layout with leading dimensions (row-major; W (out, in) contiguous) ----
// Y (N, out) = X (N, in) @ W^T, bf16 out.
void mm_fwd(BlasContext& b, const bf16* X, int64_t ldx, const bf16* W, int64_t N, int64_t in, int64_t out,
            bf16* Y, int64_t ldy) {
    cuda::gemm_bf16(b, false, true, N, out, in, 1.f, X, ldx, W, in, 0.f, Y, ldy);
}
// Y (N, out) fp32 = R + X @ W^T (the residual stream; R may be Y): the GEMM reads the residual R and
// writes the sum to Y, so the residual is never copied.
void mm_fwd_add(BlasContext& b, const bf16* X, int64_t ldx, const bf16* W, int64_t N, int64_t in, int64_t out,
                const float* R, float* Y, int64_t ldy) {
    cuda::gemm_bf16(b, false, true, N, out, in, 1.f, X, ldx, W, in, 1.f, R, Y, ldy);
}
// dX (N, in) = beta dX + dY (N, out) @ W, fp32.
void mm_dx(BlasContext& b, const bf16* dY, int64_t ldy, const bf16* W, int64_t N, int64_t in, int64_t out,
           float* dX, int64_t ldx, float beta) {
    cuda::gemm_bf16(b, false, false, N, in, out, 1.f, dY, ldy, W, in, beta, dX, ldx);
}
// dX (N, in) = dY @ W, bf16.
void mm_dx16(BlasContext& b, const bf16* dY, int64_t ldy, const bf16* W, int64_t N, int64_t in, int64_t out,
             bf16* dX, int64_t ldx) {
    cuda::gemm_bf16(b, false, false, N, in, out, 1.f, dY, ldy, W, in, 0.f, dX, ldx);
}
// dW (out, in) += dY^T (out, N) @ X (N, in), fp32.
void mm_dw(BlasContext& b, const bf16* dY, int64_t ldy, const bf16* X, int64_t ldx, int64_t N, int64_t in,
           int64_t out, float* dW) {
    cuda::gemm_bf16(b, true, false, out, in, N, 1.f, dY, ldy, X, ldx, 1.f, dW, in);
}

// A group of projections reading the same input, written side by side into one output row: one GEMM
// when their weights are adjacent in memory (q|k|v of the LA heads, a|b, gate|up in the arena), else one
// each. gw / gb: the weight / bias gradients (null: none).
struct Part {
    const bf16* w = nullptr;
    const float* bias = nullptr;
    int64_t rows = 0;
    float* gw = nullptr;
    float* gb = nullptr;
};

bool adjacent(const std::vector<Part>& parts, int64_t in) {
    for (size_t i = 1; i < parts.size(); ++i)
        if (parts[i].w != parts[i - 1].w + parts[i - 1].rows * in) return false;
    return true;
}

// Every weight gradient present and adjacent like the weights (one dW GEMM for the group).
bool grads_adjacent(const std::vector<Part>& parts, int64_t in) {
    for (size_t i = 0; i < parts.size(); ++i) {
        if (!parts[i].gw) return false;
        if (i > 0 && parts[i].gw != parts[i - 1].gw + parts[i - 1].rows * in) return false;
    }
    return true;
}

int64_t total_rows(const std::vector<Part>& parts) {
    int64_t n = 0;
    for (const Part& p : parts) n += p.rows;
    return n;
}

void proj_forward(BlasContext& b, cudaStream_t st, const bf16* X, int64_t N, int64_t in,
                  const std::vector<Part>& parts, bf16* Y, int64_t ldy) {
    if (adjacent(parts, in)) {
        mm_fwd(b, X, in, parts[0].w, N, in, total_rows(parts), Y, ldy);
    } else {
        int64_t col = 0;
        for (const Part& p : parts) {
            mm_fwd(b, X, in, p.w, N, in, p.rows, Y + col, ldy);
            col += p.rows;
        }
    }
    int64_t col = 0;
    for (const Part& p : parts) {
        if (p.bias) cuda::bias_add(Y + col, p.bias, N, p.rows, ldy, st);
        col += p.rows;
    }
}

// dX (N, in) fp32 (first: =, else +=) of the group's dY (N, rows) columns, and the weight / bias grads.
void proj_backward(BlasContext& b, cudaStream_t st, const bf16* dY, int64_t ldy, const bf16* X, int64_t N,
                   int64_t in, const std::vector<Part>& parts, float* dX, bool& first, StepProfiler& prof) {
    prof.section("gemm_dx");
    const bool adj = adjacent(parts, in);
    if (adj) {
        mm_dx(b, dY, ldy, parts[0].w, N, in, total_rows(parts), dX, in, first ? 0.f : 1.f);
        first = false;
    } else {
        int64_t col = 0;
        for (const Part& p : parts) {
            mm_dx(b, dY + col, ldy, p.w, N, in, p.rows, dX, in, first ? 0.f : 1.f);
            first = false;
            col += p.rows;
        }
    }
    prof.section("gemm_dw");
    const bool all_trainable = adj && grads_adjacent(parts, in);
    int64_t col = 0;
    if (all_trainable) mm_dw(b, dY, ldy, X, in, N, in, total_rows(parts), parts[0].gw);
    for (const Part& p : parts) {
        if (!all_trainable)
            if (p.gw) mm_dw(b, dY + col, ldy, X, in, N, in, p.rows, p.gw);
        if (p.gb) cuda::bias_backward(p.gb, dY + col, N, p.rows, ldy, st);
        col += p.rows;
    }
}

cuda::FusionScales fusion_scales(const GpuLayerWeights& w) {
    cuda::FusionScales f;
    f.head_scale = w.head_scale, f.fa_scale = w.fa_scale, f.la_scale = w.la_scale, f.la_bias = w.la_bias;
    return f;
}

// FA heads with the hybrid cache (one sequence, T new tokens at positions kc.pos0..; q, k, v in the fused
// projection row, a.ld_qkv apart): RoPE at the absolute positions, the new K / V rows into the cache, then
// attention over the cache: the decode kernel for one token (inside a CUDA graph its position is read on
// the device, kc.step), for T > 1 kc.prefill (gpu/prefill_attention.h: cuDNN or our flash kernel, any pos0;
// sliding-window heads always on our kernels).
void cached_attention(const ModelConfig& c, const GpuLayerWeights& w, int64_t l, int64_t T, GpuLayerActs& a,
                      const GpuLayerCache& kc, const float* rope_cos, const float* rope_sin,
                      cudaStream_t st) {
    const int64_t Dh = c.head_dim, n_fa = w.n_fa, n_kv = w.n_kv, P = a.ld_qkv, kvw = n_kv * Dh;
    const int64_t pos0 = kc.pos0;
    const float scale = float(1.0 / std::sqrt(double(Dh)));
    GpuCache& cache = *kc.cache;
    bf16* q = a.q;
    bf16* k = a.k;
    const bf16* v = a.v;
    bf16* fa_out = a.o;  // (T, n_fa, Dh)
    const bool rotate = fa_rotates(c);
    const DecodeWindows windows{w.fa_window, w.window_sinks};
    // the model's frequencies for the on-the-fly angles of one token (the caller's, else computed here)
    const cuda::RopeFreqs freqs = T == 1 && rotate && !kc.rope ? gpu_rope_freqs(c) : cuda::RopeFreqs{};
    const cuda::RopeFreqs& rf = kc.rope ? *kc.rope : freqs;
    if (kc.step) {
        HYDRA_ASSERT(T == 1, "graph decode of {} tokens", T);
        const int32_t* pos = &kc.step->pos;
        if (rotate && k == q + n_fa * Dh) {  // k's heads follow q's in the fused row: one launch rotates both
                                             // and stores the new K / V rows
            cuda::rope_decode_store_kv(q, n_fa, n_kv, Dh, c.rope_dim, pos, rf, v, cache.k(l), cache.v(l), st);
        } else {
            if (rotate) {
                cuda::rope_forward_decode(q, n_fa, Dh, c.rope_dim, pos, rf, st);
                cuda::rope_forward_decode(k, n_kv, Dh, c.rope_dim, pos, rf, st);
            }
            write_kv_row(cache.k(l), cache.v(l), k, v, kvw, kc.step, st);
        }
        decode_attention_dev(fa_out, q, cache.k(l), cache.v(l), w.kv_index, n_fa, n_kv, Dh, &kc.step->kv_len,
                             kc.max_splits, scale, kc.partials, st, windows);
    } else if (T == 1) {
        if (rotate) {
            cuda::rope_forward(q, 1, 1, n_fa, Dh, c.rope_dim, pos0, rf, st);
            cuda::rope_forward(k, 1, 1, n_kv, Dh, c.rope_dim, pos0, rf, st);
        }
        copy_rows(cache.k(l) + pos0 * kvw, kvw, k, P, kvw, T, st);
        copy_rows(cache.v(l) + pos0 * kvw, kvw, v, P, kvw, T, st);
        decode_attention(fa_out, q, cache.k(l), cache.v(l), w.kv_index, n_fa, n_kv, Dh, pos0 + 1, scale,
                         kc.partials, st, windows);
    } else {
        if (rotate) {
            cuda::rope_forward_strided(q, P, 1, T, n_fa, Dh, c.rope_dim, rope_cos, rope_sin, st);
            cuda::rope_forward_strided(k, P, 1, T, n_kv, Dh, c.rope_dim, rope_cos, rope_sin, st);
        }
        copy_rows(cache.k(l) + pos0 * kvw, kvw, k, P, kvw, T, st);
        copy_rows(cache.v(l) + pos0 * kvw, kvw, v, P, kvw, T, st);
        // any pos0: q read in place from the projection row, K / V the cache rows [0, pos0 + T)
        HYDRA_ASSERT(kc.prefill, "GPU layer: a cached prefill of {} tokens without prefill attention", T);
        kc.prefill->forward(fa_out, q, P, cache.k(l), cache.v(l), w.kv_index, w.uniform_groups, T, pos0, n_fa,
                            n_kv, Dh, scale, st, windows);
    }
}

// FA heads of a batched decode step (B rows, each its own sequence; q, k, v in the fused projection row,
// a.ld_qkv apart): RoPE at each row's position, the new K / V rows into their blocks, paged attention over
// each row's keys. The single-token cache path's ops in their per-row forms.
void batched_attention(const ModelConfig& c, const GpuLayerWeights& w, int64_t B, GpuLayerActs& a,
                       const GpuLayerBatch& kb, cudaStream_t st) {
    const int64_t Dh = c.head_dim, n_fa = w.n_fa, n_kv = w.n_kv, P = a.ld_qkv, kvw = n_kv * Dh;
    const float scale = float(1.0 / std::sqrt(double(Dh)));
    HYDRA_ASSERT(P > 0 && kb.rope && kb.k_pool && kb.v_pool,
                 "GPU layer: batched decode needs the fused q|k|v row");
    if (fa_rotates(c)) {
        if (a.k == a.q + n_fa * Dh) {  // k's heads follow q's in the row: one launch rotates both
            cuda::rope_forward_rows(a.q, P, B, n_fa + n_kv, Dh, c.rope_dim, kb.pos, *kb.rope, st);
        } else {
            cuda::rope_forward_rows(a.q, P, B, n_fa, Dh, c.rope_dim, kb.pos, *kb.rope, st);
            cuda::rope_forward_rows(a.k, P, B, n_kv, Dh, c.rope_dim, kb.pos, *kb.rope, st);
        }
    }
    write_kv_paged(kb.k_pool, kb.v_pool, a.k, a.v, P, kvw, B, kb.pos, kb.slots, kb.block_table, kb.max_blocks,
                   kb.block_size, st);
    PagedKv kv;
    kv.k_pool = kb.k_pool, kv.v_pool = kb.v_pool, kv.block_table = kb.block_table;
    kv.max_blocks = kb.max_blocks, kv.block_size = kb.block_size;
    // straight into the heads rows (their FA part) when the caller points a.o there
    const int64_t ldo = a.o == a.heads ? c.num_heads * Dh : n_fa * Dh;
    paged_decode_attention(a.o, ldo, a.q, P, kv, w.kv_index, n_fa, n_kv, Dh, B, kb.pos, kb.slots,
                           kb.max_splits, scale, kb.partials, st);
}

}  // namespace

GpuLayerWeights layer_weights(const GpuTrainModel& m, int64_t l) {
    const TrainLayerOffsets& o = m.layer(l);
    GpuLayerWeights w;
    w.n_fa = o.n_fa, w.n_kv = o.n_kv, w.n_la = o.n_la;
    w.uniform_groups = o.uniform_groups, w.kv_index = o.kv_index;
    w.fa_window = o.fa_window, w.window_sinks = o.window_sinks;
    w.wq = m.p16(o.wq);
    w.wk = m.p16(o.wk);
    w.wv = m.p16(o.wv);
    w.wo = m.p16(o.wo);
    w.la_wq = m.p16(o.la_wq);
    w.la_wk = m.p16(o.la_wk);
    w.la_wv = m.p16(o.la_wv);
    w.la_wa = m.p16(o.la_wa);
    w.la_wb = m.p16(o.la_wb);
    w.la_wg = m.p16(o.la_wg);
    w.w_gate = m.p16(o.w_gate);
    w.w_up = m.p16(o.w_up);
    w.w_down = m.p16(o.w_down);
    w.attn_norm = m.p32(o.attn_norm);
    w.bq = m.p32(o.bq);
    w.bk = m.p32(o.bk);
    w.bv = m.p32(o.bv);
    w.q_norm = m.p32(o.q_norm);
    w.k_norm = m.p32(o.k_norm);
    w.la_bq = m.p32(o.la_bq);
    w.la_bk = m.p32(o.la_bk);
    w.la_bv = m.p32(o.la_bv);
    w.conv_q = m.p32(o.conv_q);
    w.conv_k = m.p32(o.conv_k);
    w.conv_v = m.p32(o.conv_v);
    w.A_log = m.p32(o.A_log);
    w.dt_bias = m.p32(o.dt_bias);
    w.o_norm = m.p32(o.o_norm);
    w.head_scale = m.p32(o.head_scale);
    w.fa_scale = m.p32(o.fa_scale);
    w.la_scale = m.p32(o.la_scale);
    w.la_bias = m.p32(o.la_bias);
    w.ffn_norm = m.p32(o.ffn_norm);
    return w;
}

GpuLayerWeights inference_weights(const GpuTrainModel& m, int64_t l) {
    GpuLayerWeights w = layer_weights(m, l);
    const DeviceProjBlock& pb = m.layout().proj(l);
    w.w_proj = m.p16(pb.offset);
    w.b_proj = m.p32(pb.bias);
    w.proj_cols = pb.proj_cols;
    return w;
}

GpuLayerGrads layer_grads(const GpuTrainModel& m, int64_t l) {
    const TrainLayerOffsets& o = m.layer(l);
    GpuLayerGrads g;
    g.wq = m.grad(o.wq);
    g.wk = m.grad(o.wk);
    g.wv = m.grad(o.wv);
    g.wo = m.grad(o.wo);
    g.la_wq = m.grad(o.la_wq);
    g.la_wk = m.grad(o.la_wk);
    g.la_wv = m.grad(o.la_wv);
    g.la_wa = m.grad(o.la_wa);
    g.la_wb = m.grad(o.la_wb);
    g.la_wg = m.grad(o.la_wg);
    g.w_gate = m.grad(o.w_gate);
    g.w_up = m.grad(o.w_up);
    g.w_down = m.grad(o.w_down);
    g.attn_norm = m.grad(o.attn_norm);
    g.bq = m.grad(o.bq);
    g.bk = m.grad(o.bk);
    g.bv = m.grad(o.bv);
    g.q_norm = m.grad(o.q_norm);
    g.k_norm = m.grad(o.k_norm);
    g.la_bq = m.grad(o.la_bq);
    g.la_bk = m.grad(o.la_bk);
    g.la_bv = m.grad(o.la_bv);
    g.conv_q = m.grad(o.conv_q);
    g.conv_k = m.grad(o.conv_k);
    g.conv_v = m.grad(o.conv_v);
    g.A_log = m.grad(o.A_log);
    g.dt_bias = m.grad(o.dt_bias);
    g.o_norm = m.grad(o.o_norm);
    g.head_scale = m.grad(o.head_scale);
    g.fa_scale = m.grad(o.fa_scale);
    g.la_scale = m.grad(o.la_scale);
    g.la_bias = m.grad(o.la_bias);
    g.ffn_norm = m.grad(o.ffn_norm);
    return g;
}

void layout_layer_acts(const GpuTrainModel& m, int64_t l, int64_t N, GpuLayerActs& a,
                       const std::function<void*(size_t)>& alloc, bool fused_qkv) {
    const ModelConfig& c = m.config();
    const TrainLayerOffsets& o = m.layer(l);
    const int64_t C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim, HD = c.num_heads * Dh;
    const int64_t Dfa = o.n_fa * Dh, Dkv = o.n_kv * Dh, Dla = o.n_la * Dh;
    auto b16 = [&](int64_t n) { return static_cast<bf16*>(alloc(size_t(n) * 2)); };
    auto f32 = [&](int64_t n) { return static_cast<float*>(alloc(size_t(n) * 4)); };
    a = GpuLayerActs();
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

size_t layer_acts_bytes(const GpuTrainModel& m, int64_t l, int64_t N) {
    size_t n = 0;
    GpuLayerActs a;
    layout_layer_acts(m, l, N, a, [&](size_t b) -> void* {
        n += cuda::align_up(b);
        return nullptr;
    });
    return n;
}

size_t layer_backward_scratch_bytes(const GpuTrainModel& m, int64_t l, int64_t N) {
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

void gpu_layer_forward(const ModelConfig& c, const HybridPlan& plan, const GpuLayerWeights& w, int64_t l,
                       const GpuLayerShape& s, const float* x_in, float* x_out, GpuLayerActs& a, bool save,
                       const GpuLayerEnv& env) {
    const int64_t B = s.B, T = s.T, N = s.N(), C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim;
    const int64_t H = c.num_heads, HD = H * Dh, n_fa = w.n_fa, n_kv = w.n_kv, n_la = w.n_la;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const float eps = c.rms_norm_eps, scale = float(1.0 / std::sqrt(double(Dh)));
    cudaStream_t st = env.stream;
    BlasContext& b = *env.blas;
    StepProfiler& prof = *env.prof;
    const float *rope_cos = env.rope_cos, *rope_sin = env.rope_sin;
    a.x_in = x_in;

    const GpuLayerCache* kc = env.cache;
    const GpuLayerPrefix* px = env.prefix;
    const GpuLayerBatch* kb = env.batch;
    HYDRA_ASSERT(!kb || (T == 1 && !save && !kc && !px && w.w_proj),
                 "GPU layer: batched decode runs single-token rows, forward only, with the fused projection");
    HYDRA_ASSERT(!kc || (B == 1 && !save), "GPU layer: the cache mode runs one sequence, forward only");
    HYDRA_ASSERT(
        !px || (!kc && !save && T == 1 && n_la == 0 && !a.ld_qkv && !w.w_proj),
        "GPU layer: the shared-prefix mode runs single-token rows of FA-only layers, forward only, on "
        "packed q / k / v");
    HYDRA_CHECK(
        !w.fa_window || (!kb && !px),
        "GPU layer: sliding-window heads run in training and the one-sequence cache, not in batched serving "
        "or the shared-prefix mode (head scoring)");
    prof.section("rmsnorm");
    cuda::rmsnorm_forward(a.xn1, a.rstd1, x_in, w.attn_norm, N, C, eps, st);
    if (w.w_proj) {  // every projection of the layer in one GEMM (the layout's proj block)
        prof.section("gemm_fwd");
        mm_fwd(b, a.xn1, C, w.w_proj, N, C, w.proj_cols, a.proj, a.ld_proj);  // (N, proj_cols) bf16
        if (w.b_proj) cuda::bias_add(a.proj, w.b_proj, N, w.proj_cols, 0, st);
    }
    if (n_fa > 0) {
        prof.section("gemm_fwd");
        if (w.w_proj) {
            // projected above
        } else if (a.ld_qkv) {  // one GEMM (when the weights are adjacent) into q|k|v columns
            proj_forward(b, st, a.xn1, N, C, {{w.wq, w.bq, Dfa}, {w.wk, w.bk, Dkv}, {w.wv, w.bv, Dkv}}, a.q,
                         a.ld_qkv);
        } else {
            proj_forward(b, st, a.xn1, N, C, {{w.wq, w.bq, Dfa}}, a.q, Dfa);
            proj_forward(b, st, a.xn1, N, C, {{w.wk, w.bk, Dkv}}, a.k, Dkv);
            proj_forward(b, st, a.xn1, N, C, {{w.wv, w.bv, Dkv}}, a.v, Dkv);
        }
        const int64_t ldq = a.ld_qkv ? a.ld_qkv : Dfa, ldk = a.ld_qkv ? a.ld_qkv : Dkv;
        if (c.qk_norm) {  // per-head RMSNorm before RoPE; the backward reads the input and statistics
            prof.section("rmsnorm");
            const bool keep = save && a.qk_pre;
            bf16* pre = keep ? a.qk_pre : nullptr;
            head_rmsnorm_forward(a.q, ldq, pre, Dfa + Dkv, keep ? a.rstd_q : nullptr, w.q_norm, N, n_fa, Dh,
                                 eps, st);
            head_rmsnorm_forward(a.k, ldk, keep ? pre + Dfa : nullptr, Dfa + Dkv, keep ? a.rstd_k : nullptr,
                                 w.k_norm, N, n_kv, Dh, eps, st);
        }
        if (kc) {
            prof.section("attention");  // RoPE, the cache write and the attention
            cached_attention(c, w, l, T, a, *kc, rope_cos, rope_sin, st);
        } else if (kb) {
            prof.section("attention");
            batched_attention(c, w, B, a, *kb, st);
        } else if (px) {  // B copies at position px->pos over the shared prefix
            prof.section("rope");
            if (c.rope_dim > 0) {
                cuda::rope_forward(a.q, B, 1, n_fa, Dh, c.rope_dim, px->pos, double(c.rope_theta), st);
                cuda::rope_forward(a.k, B, 1, n_kv, Dh, c.rope_dim, px->pos, double(c.rope_theta), st);
            }
            prof.section("attention");
            prefix_attention(a.o, px->top, a.q, a.k, a.v, px->k, px->v, w.kv_index, B, px->pos, n_fa, n_kv,
                             Dh, scale, st);
        } else {
            prof.section("rope");
            if (fa_rotates(c) && a.ld_qkv) {  // q's and k's heads adjacent in the row: one launch
                cuda::rope_forward_strided(a.q, a.ld_qkv, B, T, n_fa + n_kv, Dh, c.rope_dim, rope_cos,
                                           rope_sin, st);
            } else if (fa_rotates(c)) {
                cuda::rope_forward(a.q, B, T, n_fa, Dh, c.rope_dim, rope_cos, rope_sin, st);
                cuda::rope_forward(a.k, B, T, n_kv, Dh, c.rope_dim, rope_cos, rope_sin, st);
            }
            const bf16* kk = a.k;
            const bf16* vv = a.v;
            int64_t hkv = n_kv;
            if (!w.uniform_groups) {  // head granularity: each FA head gets its own copy of its group's K / V
                prof.section("copies");
                cuda::gather_heads(a.kdup, a.k, w.kv_index, N, n_kv, n_fa, Dh, st);
                cuda::gather_heads(a.vdup, a.v, w.kv_index, N, n_kv, n_fa, Dh, st);
                kk = a.kdup, vv = a.vdup, hkv = n_fa;
            }
            cuda::AttnShape as;
            as.B = int(B), as.T = int(T), as.H = int(n_fa), as.Hkv = int(hkv), as.D = int(Dh);
            as.ld_qkv = int(a.ld_qkv);
            as.window = w.fa_window,
            as.sinks = int(w.window_sinks);  // windows: our kernels (cuDNN has no sinks)
            prof.section("attention");
            if (cuda::CudnnAttention* dnn = env.res->cudnn_attention(as))
                dnn->forward(as, a.q, kk, vv, a.o, a.lse, scale, st);
            else
                cuda::attention_forward(as, a.q, kk, vv, a.o, a.lse, scale, st);
        }
        prof.section("copies");
        if (n_la > 0 && a.o != a.heads) copy_rows(a.heads, HD, a.o, Dfa, Dfa, N, st);
    }
    if (n_la > 0) {
        const int64_t W = plan.gdn.conv_size;
        // row strides of the projections (the fused image's row, or their own buffers)
        const int64_t ld_lqkv = a.ld_lqkv ? a.ld_lqkv : 3 * Dla, ld_lab = a.ld_lab ? a.ld_lab : 2 * n_la;
        if (!w.w_proj) {
            prof.section("gemm_fwd");
            proj_forward(b, st, a.xn1, N, C,
                         {{w.la_wq, w.la_bq, Dla}, {w.la_wk, w.la_bk, Dla}, {w.la_wv, w.la_bv, Dla}}, a.lqkv,
                         3 * Dla);
            proj_forward(b, st, a.xn1, N, C, {{w.la_wg, nullptr, Dla}}, a.lz, Dla);
            proj_forward(b, st, a.xn1, N, C, {{w.la_wa, nullptr, n_la}, {w.la_wb, nullptr, n_la}}, a.lab,
                         2 * n_la);
        }
        // the cache's conv windows: the last W - 1 raw projections before this call, updated in place
        float* win_q = kc ? kc->cache->conv_q(l) : nullptr;
        float* win_k = kc ? kc->cache->conv_k(l) : nullptr;
        float* win_v = kc ? kc->cache->conv_v(l) : nullptr;
        prof.section("la_conv");
        if (T == 1 && (kb || kc)) {  // decode: q, k, v in one launch, windows shifted in place
            cuda::ConvDecodeGroups cg;
            cg.out[0] = a.lq, cg.out[1] = a.lk, cg.out[2] = a.lv;
            cg.w[0] = w.conv_q, cg.w[1] = w.conv_k, cg.w[2] = w.conv_v;
            cg.windows[0] = kb ? kb->conv_q : win_q, cg.windows[1] = kb ? kb->conv_k : win_k;
            cg.windows[2] = kb ? kb->conv_v : win_v;
            cuda::short_conv_decode_qkv(cg, a.lqkv, ld_lqkv, kb ? kb->slots : nullptr,
                                        kb ? kb->slot_stride : 0, B, Dla, W, st);
        } else if (kb) {  // each row's windows in its slot
            cuda::short_conv_forward_slots(a.lq, kb->conv_q, kb->slots, kb->slot_stride, a.lqkv, ld_lqkv,
                                           w.conv_q, B, T, Dla, W, st);
            cuda::short_conv_forward_slots(a.lk, kb->conv_k, kb->slots, kb->slot_stride, a.lqkv + Dla,
                                           ld_lqkv, w.conv_k, B, T, Dla, W, st);
            cuda::short_conv_forward_slots(a.lv, kb->conv_v, kb->slots, kb->slot_stride, a.lqkv + 2 * Dla,
                                           ld_lqkv, w.conv_v, B, T, Dla, W, st);
        } else {
            cuda::short_conv_forward(a.lq, win_q, a.lqkv, ld_lqkv, w.conv_q, win_q, B, T, Dla, W, st);
            cuda::short_conv_forward(a.lk, win_k, a.lqkv + Dla, ld_lqkv, w.conv_k, win_k, B, T, Dla, W, st);
            cuda::short_conv_forward(a.lv, win_v, a.lqkv + 2 * Dla, ld_lqkv, w.conv_v, win_v, B, T, Dla, W,
                                     st);
        }
        float* state = kc ? kc->cache->state(l) : nullptr;  // (n_la, Dh, Dh): h0 in, ht out
        if (kb || (kc && T == 1)) {  // a decode step: the gates computed in the step, the state in place
            prof.section("gdn");
            cuda::GdnGateInputs gi;
            gi.a = a.lab, gi.b = a.lab + n_la, gi.ab_stride = ld_lab, gi.A_log = w.A_log,
            gi.dt_bias = w.dt_bias;
            gi.allow_neg_eigval = plan.gdn.allow_neg_eigval;
            cuda::gdn_decode_step_gated(int(B), int(n_la), int(n_la), int(Dh), a.lq, a.lk, a.lv, gi,
                                        kb ? kb->state : state, kb ? kb->slots : nullptr,
                                        kb ? kb->slot_stride : 0, a.lo, scale, true, st);
        } else {
            prof.section("la_gates");
            cuda::gdn_gates_forward(a.g, a.beta, a.lab, a.lab + n_la, ld_lab, w.A_log, w.dt_bias, N, n_la,
                                    plan.gdn.allow_neg_eigval, st);
            prof.section("gdn");
            cuda::GdnShape gs;
            gs.B = int(B), gs.T = int(T), gs.H = int(n_la), gs.HV = int(n_la), gs.D = int(Dh);
            cuda::GdnWorkspace& ws = env.res->gdn_workspace(l, n_la, s, save);
            cuda::gdn_chunk_forward(gs, a.lq, a.lk, a.lv, a.g, a.beta, state, a.lo, state, scale, true, save,
                                    ws, st);
        }
        prof.section("la_gated_norm");
        cuda::gated_rmsnorm_forward(a.gn_out, a.gn_rstd, a.lo, a.lz, a.ld_lz, w.o_norm, N, n_la, Dh,
                                    plan.gdn.norm_eps, st);
        if (n_fa > 0 && a.gn_out != a.heads + Dfa) copy_rows(a.heads + Dfa, HD, a.gn_out, Dla, Dla, N, st);
    }
    if (const GpuHeadTaps* tp = env.taps) {
        prof.section("copies");
        if (tp->capture && tp->capture_rows > 0)
            CUDA_CHECK(cudaMemcpyAsync(tp->capture, a.heads + tp->capture_row0 * HD,
                                       size_t(tp->capture_rows * HD) * sizeof(bf16), cudaMemcpyDeviceToDevice,
                                       st));
        if (tp->fill && tp->fill_rows > 0)
            broadcast_rows(a.heads + tp->fill_row0 * HD, tp->fill, tp->fill_rows, HD, st);
        apply_head_writes(a.heads, H, Dh, tp->writes, tp->n_writes, st);
    }
    prof.section("fusion_residual");
    if (fusion_active(plan.fusion, n_la))  // into a.mixed (training) or in place (a.mixed == a.heads)
        cuda::fusion_forward(a.mixed, a.heads, N, n_fa, n_la, Dh, plan.fusion, fusion_scales(w), eps, st);
    prof.section("gemm_fwd");
    mm_fwd_add(b, a.mixed, HD, w.wo, N, HD, C, x_in, a.x_mid, C);  // x_mid = x_in + mixed @ Wo^T

    prof.section("rmsnorm");
    cuda::rmsnorm_forward(a.xn2, a.rstd2, a.x_mid, w.ffn_norm, N, C, eps, st);
    prof.section("gemm_fwd");
    proj_forward(b, st, a.xn2, N, C, {{w.w_gate, nullptr, F}, {w.w_up, nullptr, F}}, a.gu, 2 * F);
    prof.section("swiglu");
    cuda::swiglu_forward(a.act, a.gu, a.gu + F, N, F, 2 * F, st);
    prof.section("gemm_fwd");
    mm_fwd_add(b, a.act, F, w.w_down, N, F, C, a.x_mid, x_out, C);  // x_out = x_mid + act @ Wdown^T
    prof.section("other");
}

void gpu_layer_backward(const ModelConfig& c, const HybridPlan& plan, const GpuLayerWeights& w,
                        const GpuLayerGrads& g, int64_t l, const GpuLayerShape& s, float* dx, GpuLayerActs& a,
                        bf16* dx_bf16, const GpuLayerEnv& env) {
    const int64_t B = s.B, T = s.T, N = s.N(), C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim;
    const int64_t H = c.num_heads, HD = H * Dh, n_fa = w.n_fa, n_kv = w.n_kv, n_la = w.n_la;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const float eps = c.rms_norm_eps, scale = float(1.0 / std::sqrt(double(Dh)));
    cudaStream_t st = env.stream;
    BlasContext& b = *env.blas;
    cuda::DeviceArena& ar = *env.arena;
    StepProfiler& prof = *env.prof;
    const float *rope_cos = env.rope_cos, *rope_sin = env.rope_sin;
    const size_t mark = ar.mark();

    // x_out = x_mid + down(swiglu(gate(n2), up(n2))), n2 = rmsnorm(x_mid)
    prof.section("casts");
    bf16* dxb = dx_bf16;  // bf16(dx): written with dx by the norm backward that produced it, or cast here
    if (!dxb) {
        dxb = ar.alloc<bf16>(N * C);
        cuda::cast_f32_to_bf16(dxb, dx, N * C, st);
    }
    bf16* dact = ar.alloc<bf16>(N * F);
    prof.section("gemm_dx");
    mm_dx16(b, dxb, C, w.w_down, N, F, C, dact, F);
    prof.section("gemm_dw");
    if (g.w_down) mm_dw(b, dxb, C, a.act, F, N, F, C, g.w_down);
    prof.section("swiglu");
    bf16* dgu = ar.alloc<bf16>(N * 2 * F);
    cuda::swiglu_backward(dgu, dgu + F, dact, a.gu, a.gu + F, N, F, 2 * F, 2 * F, st);
    float* dxn = ar.alloc<float>(N * C);
    bool first = true;
    prof.section("gemm_dx");
    proj_backward(b, st, dgu, 2 * F, a.xn2, N, C,
                  {{w.w_gate, nullptr, F, g.w_gate}, {w.w_up, nullptr, F, g.w_up}}, dxn, first, prof);
    prof.section("rmsnorm");
    cuda::rmsnorm_backward(dx, dxb, g.ffn_norm, dxn, a.x_mid, w.ffn_norm, a.rstd2, N, C,
                           st);  // d x_mid, and its bf16 copy for the o-projection GEMMs

    // x_mid = x_in + o_proj(fusion(heads))
    bf16* dheads = ar.alloc<bf16>(N * HD);
    prof.section("gemm_dx");
    mm_dx16(b, dxb, C, w.wo, N, HD, C, dheads, HD);
    prof.section("gemm_dw");
    if (g.wo) mm_dw(b, dxb, C, a.mixed, HD, N, HD, C, g.wo);
    prof.section("fusion_residual");
    if (a.mixed != a.heads) {
        cuda::FusionScaleGrads fg;
        fg.head_scale = g.head_scale, fg.fa_scale = g.fa_scale, fg.la_scale = g.la_scale,
        fg.la_bias = g.la_bias;
        cuda::fusion_backward(dheads, fg, dheads, a.heads, N, n_fa, n_la, Dh, plan.fusion, fusion_scales(w),
                              eps, st);
    }
    if (env.taps && env.taps->d_heads)
        CUDA_CHECK(cudaMemcpyAsync(env.taps->d_heads, dheads, size_t(N * HD) * sizeof(bf16),
                                   cudaMemcpyDeviceToDevice, st));
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
        const bool dup = !w.uniform_groups;
        const int64_t hkv = dup ? n_fa : n_kv;
        bf16* dk_att = dup ? ar.alloc<bf16>(N * Dfa) : dk;
        bf16* dv_att = dup ? ar.alloc<bf16>(N * Dfa) : dv;
        const bf16* kk = dup ? a.kdup : a.k;
        const bf16* vv = dup ? a.vdup : a.v;
        cuda::AttnShape as;
        as.B = int(B), as.T = int(T), as.H = int(n_fa), as.Hkv = int(hkv), as.D = int(Dh);
        as.ld_qkv = int(ld);
        as.window = w.fa_window, as.sinks = int(w.window_sinks);
        prof.section("attention");
        if (cuda::CudnnAttention* dnn = env.res->cudnn_attention(as))
            dnn->backward(as, a.q, kk, vv, a.o, a.lse, d_o, dq, dk_att, dv_att, scale,
                          env.res->attn_workspace(n_fa, hkv, s), st);
        else
            cuda::attention_backward(as, a.q, kk, vv, a.o, a.lse, d_o, dq, dk_att, dv_att, scale,
                                     env.res->attn_workspace(n_fa, hkv, s), st);
        if (dup) {
            prof.section("copies");
            reduce_heads_by_group(dk, dk_att, w.kv_index, N, n_fa, n_kv, Dh, st);
            reduce_heads_by_group(dv, dv_att, w.kv_index, N, n_fa, n_kv, Dh, st);
        }
        prof.section("rope");
        if (fa_rotates(c) && ld) {
            cuda::rope_backward_strided(dq, ld, B, T, n_fa + n_kv, Dh, c.rope_dim, rope_cos, rope_sin, st);
        } else if (fa_rotates(c)) {
            cuda::rope_backward(dq, B, T, n_fa, Dh, c.rope_dim, rope_cos, rope_sin, st);
            cuda::rope_backward(dk, B, T, n_kv, Dh, c.rope_dim, rope_cos, rope_sin, st);
        }
        if (c.qk_norm) {  // d q / d k before the per-head norm, in place
            prof.section("rmsnorm");
            const int64_t ldq = ld ? ld : Dfa, ldk = ld ? ld : Dkv;
            head_rmsnorm_backward(dq, ldq, g.q_norm, a.qk_pre, Dfa + Dkv, w.q_norm, a.rstd_q, N, n_fa, Dh,
                                  st);
            head_rmsnorm_backward(dk, ldk, g.k_norm, a.qk_pre + Dfa, Dfa + Dkv, w.k_norm, a.rstd_k, N, n_kv,
                                  Dh, st);
        }
        prof.section("gemm_dx");
        if (ld) {
            proj_backward(
                b, st, dq, ld, a.xn1, N, C,
                {{w.wq, w.bq, Dfa, g.wq, g.bq}, {w.wk, w.bk, Dkv, g.wk, g.bk}, {w.wv, w.bv, Dkv, g.wv, g.bv}},
                dxn, first, prof);
        } else {
            proj_backward(b, st, dq, Dfa, a.xn1, N, C, {{w.wq, w.bq, Dfa, g.wq, g.bq}}, dxn, first, prof);
            proj_backward(b, st, dk, Dkv, a.xn1, N, C, {{w.wk, w.bk, Dkv, g.wk, g.bk}}, dxn, first, prof);
            proj_backward(b, st, dv, Dkv, a.xn1, N, C, {{w.wv, w.bv, Dkv, g.wv, g.bv}}, dxn, first, prof);
        }
    }
    if (n_la > 0) {
        const int64_t W = plan.gdn.conv_size;
        prof.section("la_gated_norm");
        bf16* dgn = dheads;
        if (n_fa > 0) {
            dgn = ar.alloc<bf16>(N * Dla);
            copy_rows(dgn, Dla, dheads + Dfa, HD, Dla, N, st);
        }
        bf16* dlo = ar.alloc<bf16>(N * Dla);
        bf16* dz = ar.alloc<bf16>(N * Dla);
        cuda::gated_rmsnorm_backward(dlo, dz, 0, g.o_norm, dgn, a.lo, a.lz, 0, w.o_norm, a.gn_rstd, N, n_la,
                                     Dh, st);
        bf16* dlq = ar.alloc<bf16>(N * Dla);
        bf16* dlk = ar.alloc<bf16>(N * Dla);
        bf16* dlv = ar.alloc<bf16>(N * Dla);
        float* dg = ar.alloc<float>(N * n_la);
        float* dbeta = ar.alloc<float>(N * n_la);
        cuda::GdnShape gs;
        gs.B = int(B), gs.T = int(T), gs.H = int(n_la), gs.HV = int(n_la), gs.D = int(Dh);
        prof.section("gdn");
        cuda::gdn_chunk_backward(gs, a.lq, a.lk, a.lv, a.g, a.beta, dlo, nullptr, dlq, dlk, dlv, dg, dbeta,
                                 nullptr, scale, true, env.res->gdn_workspace(l, n_la, s, true), st);
        prof.section("la_gates");
        bf16* dlab = ar.alloc<bf16>(N * 2 * n_la);
        cuda::gdn_gates_backward(dlab, dlab + n_la, 2 * n_la, g.A_log, g.dt_bias, dg, dbeta, a.lab,
                                 a.lab + n_la, 2 * n_la, w.A_log, w.dt_bias, N, n_la,
                                 plan.gdn.allow_neg_eigval, st);
        bf16* dlqkv = ar.alloc<bf16>(N * 3 * Dla);
        prof.section("la_conv");
        cuda::short_conv_backward(dlqkv, 3 * Dla, g.conv_q, nullptr, dlq, nullptr, a.lqkv, 3 * Dla, w.conv_q,
                                  nullptr, B, T, Dla, W, st);
        cuda::short_conv_backward(dlqkv + Dla, 3 * Dla, g.conv_k, nullptr, dlk, nullptr, a.lqkv + Dla,
                                  3 * Dla, w.conv_k, nullptr, B, T, Dla, W, st);
        cuda::short_conv_backward(dlqkv + 2 * Dla, 3 * Dla, g.conv_v, nullptr, dlv, nullptr, a.lqkv + 2 * Dla,
                                  3 * Dla, w.conv_v, nullptr, B, T, Dla, W, st);
        prof.section("gemm_dx");
        proj_backward(b, st, dlqkv, 3 * Dla, a.xn1, N, C,
                      {{w.la_wq, w.la_bq, Dla, g.la_wq, g.la_bq},
                       {w.la_wk, w.la_bk, Dla, g.la_wk, g.la_bk},
                       {w.la_wv, w.la_bv, Dla, g.la_wv, g.la_bv}},
                      dxn, first, prof);
        proj_backward(b, st, dz, Dla, a.xn1, N, C, {{w.la_wg, nullptr, Dla, g.la_wg}}, dxn, first, prof);
        proj_backward(b, st, dlab, 2 * n_la, a.xn1, N, C,
                      {{w.la_wa, nullptr, n_la, g.la_wa}, {w.la_wb, nullptr, n_la, g.la_wb}}, dxn, first,
                      prof);
    }
    prof.section("rmsnorm");
    if (first)
        CUDA_CHECK(
            cudaMemsetAsync(dxn, 0, size_t(N * C) * sizeof(float), st));  // no mixer heads (not reached)
    // d x_in, and (dx_bf16 not null) its bf16 copy for the next (lower) layer's first GEMMs
    cuda::rmsnorm_backward(dx, dx_bf16, g.attn_norm, dxn, a.x_in, w.attn_norm, a.rstd1, N, C, st);
    ar.reset(mark);
}

}  // namespace hydra::gpu
