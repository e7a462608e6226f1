// One GPU decoder layer, forward and backward (see gpu_decoder_layer.h), over the ops of ops/cuda and gpu/.
#include "gpu/gpu_decoder_layer.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "gpu/head_rmsnorm.h"
#include "gpu/kv_group_reduce.h"
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

void proj_forward(const GpuTrainModel& m, BlasContext& b, cudaStream_t st, const bf16* X, int64_t N,
                  int64_t in, const std::vector<Part>& parts, bf16* Y, int64_t ldy) {
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

void gpu_layer_forward(const GpuTrainModel& m, int64_t l, const GpuLayerShape& s, const float* x_in,
                       float* x_out, GpuLayerActs& a, bool save, const GpuLayerEnv& env) {
    const ModelConfig& c = m.config();
    const HybridPlan& plan = m.plan();
    const TrainLayerOffsets& o = m.layer(l);
    const int64_t B = s.B, T = s.T, N = s.N(), C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim;
    const int64_t H = c.num_heads, HD = H * Dh, n_fa = o.n_fa, n_kv = o.n_kv, n_la = o.n_la;
    const int64_t Dfa = n_fa * Dh, Dkv = n_kv * Dh, Dla = n_la * Dh;
    const float eps = c.rms_norm_eps, scale = float(1.0 / std::sqrt(double(Dh)));
    cudaStream_t st = env.stream;
    BlasContext& b = *env.blas;
    StepProfiler& prof = *env.prof;
    const float *rope_cos = env.rope_cos, *rope_sin = env.rope_sin;
    a.x_in = x_in;

    prof.section("rmsnorm");
    cuda::rmsnorm_forward(a.xn1, a.rstd1, x_in, m.p32(o.attn_norm), N, C, eps, st);
    if (n_fa > 0) {
        prof.section("gemm_fwd");
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
            prof.section("rmsnorm");
            const bool keep = save && a.qk_pre;
            bf16* pre = keep ? a.qk_pre : nullptr;
            head_rmsnorm_forward(a.q, ldq, pre, Dfa + Dkv, keep ? a.rstd_q : nullptr, m.p32(o.q_norm), N,
                                 n_fa, Dh, eps, st);
            head_rmsnorm_forward(a.k, ldk, keep ? pre + Dfa : nullptr, Dfa + Dkv, keep ? a.rstd_k : nullptr,
                                 m.p32(o.k_norm), N, n_kv, Dh, eps, st);
        }
        prof.section("rope");
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
            prof.section("copies");
            cuda::gather_heads(a.kdup, a.k, o.kv_index, N, n_kv, n_fa, Dh, st);
            cuda::gather_heads(a.vdup, a.v, o.kv_index, N, n_kv, n_fa, Dh, st);
            kk = a.kdup, vv = a.vdup, hkv = n_fa;
        }
        cuda::AttnShape as;
        as.B = int(B), as.T = int(T), as.H = int(n_fa), as.Hkv = int(hkv), as.D = int(Dh);
        as.ld_qkv = int(a.ld_qkv);
        prof.section("attention");
        if (cuda::CudnnAttention* dnn = env.res->cudnn_attention(as))
            dnn->forward(as, a.q, kk, vv, a.o, a.lse, scale, st);
        else
            cuda::attention_forward(as, a.q, kk, vv, a.o, a.lse, scale, st);
        prof.section("copies");
        if (n_la > 0) copy_rows(a.heads, HD, a.o, Dfa, Dfa, N, st);
    }
    if (n_la > 0) {
        const int64_t W = plan.gdn.conv_size;
        prof.section("gemm_fwd");
        proj_forward(m, b, st, a.xn1, N, C,
                     {{o.la_wq, o.la_bq, Dla}, {o.la_wk, o.la_bk, Dla}, {o.la_wv, o.la_bv, Dla}}, a.lqkv,
                     3 * Dla);
        proj_forward(m, b, st, a.xn1, N, C, {{o.la_wg, -1, Dla}}, a.lz, Dla);
        proj_forward(m, b, st, a.xn1, N, C, {{o.la_wa, -1, n_la}, {o.la_wb, -1, n_la}}, a.lab, 2 * n_la);
        prof.section("la_conv");
        cuda::short_conv_forward(a.lq, nullptr, a.lqkv, 3 * Dla, m.p32(o.conv_q), nullptr, B, T, Dla, W, st);
        cuda::short_conv_forward(a.lk, nullptr, a.lqkv + Dla, 3 * Dla, m.p32(o.conv_k), nullptr, B, T, Dla, W,
                                 st);
        cuda::short_conv_forward(a.lv, nullptr, a.lqkv + 2 * Dla, 3 * Dla, m.p32(o.conv_v), nullptr, B, T,
                                 Dla, W, st);
        prof.section("la_gates");
        cuda::gdn_gates_forward(a.g, a.beta, a.lab, a.lab + n_la, 2 * n_la, m.p32(o.A_log), m.p32(o.dt_bias),
                                N, n_la, plan.gdn.allow_neg_eigval, st);
        cuda::GdnShape gs;
        gs.B = int(B), gs.T = int(T), gs.H = int(n_la), gs.HV = int(n_la), gs.D = int(Dh);
        cuda::GdnWorkspace& ws = env.res->gdn_workspace(m, l, s, save);
        prof.section("gdn");
        cuda::gdn_chunk_forward(gs, a.lq, a.lk, a.lv, a.g, a.beta, nullptr, a.lo, nullptr, scale, true, save,
                                ws, st);
        prof.section("la_gated_norm");
        cuda::gated_rmsnorm_forward(a.gn_out, a.gn_rstd, a.lo, a.lz, 0, m.p32(o.o_norm), N, n_la, Dh,
                                    plan.gdn.norm_eps, st);
        if (n_fa > 0) copy_rows(a.heads + Dfa, HD, a.gn_out, Dla, Dla, N, st);
    }
    prof.section("fusion_residual");
    if (a.mixed != a.heads)
        cuda::fusion_forward(a.mixed, a.heads, N, n_fa, n_la, Dh, plan.fusion, fusion_scales(m, o), eps, st);
    prof.section("gemm_fwd");
    mm_fwd_add(b, a.mixed, HD, m.p16(o.wo), N, HD, C, x_in, a.x_mid, C);  // x_mid = x_in + mixed @ Wo^T

    prof.section("rmsnorm");
    cuda::rmsnorm_forward(a.xn2, a.rstd2, a.x_mid, m.p32(o.ffn_norm), N, C, eps, st);
    prof.section("gemm_fwd");
    proj_forward(m, b, st, a.xn2, N, C, {{o.w_gate, -1, F}, {o.w_up, -1, F}}, a.gu, 2 * F);
    prof.section("swiglu");
    cuda::swiglu_forward(a.act, a.gu, a.gu + F, N, F, 2 * F, st);
    prof.section("gemm_fwd");
    mm_fwd_add(b, a.act, F, m.p16(o.w_down), N, F, C, a.x_mid, x_out, C);  // x_out = x_mid + act @ Wdown^T
    prof.section("other");
}

void gpu_layer_backward(const GpuTrainModel& m, int64_t l, const GpuLayerShape& s, float* dx, GpuLayerActs& a,
                        bf16* dx_bf16, const GpuLayerEnv& env) {
    const ModelConfig& c = m.config();
    const HybridPlan& plan = m.plan();
    const TrainLayerOffsets& o = m.layer(l);
    const int64_t B = s.B, T = s.T, N = s.N(), C = c.hidden_size, F = c.intermediate_size, Dh = c.head_dim;
    const int64_t H = c.num_heads, HD = H * Dh, n_fa = o.n_fa, n_kv = o.n_kv, n_la = o.n_la;
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
    mm_dx16(b, dxb, C, m.p16(o.w_down), N, F, C, dact, F);
    prof.section("gemm_dw");
    if (float* g = m.grad(o.w_down)) mm_dw(b, dxb, C, a.act, F, N, F, C, g);
    prof.section("swiglu");
    bf16* dgu = ar.alloc<bf16>(N * 2 * F);
    cuda::swiglu_backward(dgu, dgu + F, dact, a.gu, a.gu + F, N, F, 2 * F, 2 * F, st);
    float* dxn = ar.alloc<float>(N * C);
    bool first = true;
    prof.section("gemm_dx");
    proj_backward(m, b, st, dgu, 2 * F, a.xn2, N, C, {{o.w_gate, -1, F}, {o.w_up, -1, F}}, dxn, first, prof);
    prof.section("rmsnorm");
    cuda::rmsnorm_backward(dx, dxb, m.grad(o.ffn_norm), dxn, a.x_mid, m.p32(o.ffn_norm), a.rstd2, N, C,
                           st);  // d x_mid, and its bf16 copy for the o-projection GEMMs

    // x_mid = x_in + o_proj(fusion(heads))
    bf16* dheads = ar.alloc<bf16>(N * HD);
    prof.section("gemm_dx");
    mm_dx16(b, dxb, C, m.p16(o.wo), N, HD, C, dheads, HD);
    prof.section("gemm_dw");
    if (float* g = m.grad(o.wo)) mm_dw(b, dxb, C, a.mixed, HD, N, HD, C, g);
    prof.section("fusion_residual");
    if (a.mixed != a.heads) {
        cuda::FusionScaleGrads fg;
        fg.head_scale = m.grad(o.head_scale), fg.fa_scale = m.grad(o.fa_scale),
        fg.la_scale = m.grad(o.la_scale);
        cuda::fusion_backward(dheads, fg, dheads, a.heads, N, n_fa, n_la, Dh, plan.fusion,
                              fusion_scales(m, o), eps, st);
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
        prof.section("attention");
        if (cuda::CudnnAttention* dnn = env.res->cudnn_attention(as))
            dnn->backward(as, a.q, kk, vv, a.o, a.lse, d_o, dq, dk_att, dv_att, scale,
                          env.res->attn_workspace(n_fa, hkv, s), st);
        else
            cuda::attention_backward(as, a.q, kk, vv, a.o, a.lse, d_o, dq, dk_att, dv_att, scale,
                                     env.res->attn_workspace(n_fa, hkv, s), st);
        if (dup) {
            prof.section("copies");
            reduce_heads_by_group(dk, dk_att, o.kv_index, N, n_fa, n_kv, Dh, st);
            reduce_heads_by_group(dv, dv_att, o.kv_index, N, n_fa, n_kv, Dh, st);
        }
        prof.section("rope");
        if (c.rope_dim > 0 && ld) {
            cuda::rope_backward_strided(dq, ld, B, T, n_fa + n_kv, Dh, c.rope_dim, rope_cos, rope_sin, st);
        } else if (c.rope_dim > 0) {
            cuda::rope_backward(dq, B, T, n_fa, Dh, c.rope_dim, rope_cos, rope_sin, st);
            cuda::rope_backward(dk, B, T, n_kv, Dh, c.rope_dim, rope_cos, rope_sin, st);
        }
        if (c.qk_norm) {  // d q / d k before the per-head norm, in place
            prof.section("rmsnorm");
            const int64_t ldq = ld ? ld : Dfa, ldk = ld ? ld : Dkv;
            head_rmsnorm_backward(dq, ldq, m.grad(o.q_norm), a.qk_pre, Dfa + Dkv, m.p32(o.q_norm), a.rstd_q,
                                  N, n_fa, Dh, st);
            head_rmsnorm_backward(dk, ldk, m.grad(o.k_norm), a.qk_pre + Dfa, Dfa + Dkv, m.p32(o.k_norm),
                                  a.rstd_k, N, n_kv, Dh, st);
        }
        prof.section("gemm_dx");
        if (ld) {
            proj_backward(m, b, st, dq, ld, a.xn1, N, C,
                          {{o.wq, o.bq, Dfa}, {o.wk, o.bk, Dkv}, {o.wv, o.bv, Dkv}}, dxn, first, prof);
        } else {
            proj_backward(m, b, st, dq, Dfa, a.xn1, N, C, {{o.wq, o.bq, Dfa}}, dxn, first, prof);
            proj_backward(m, b, st, dk, Dkv, a.xn1, N, C, {{o.wk, o.bk, Dkv}}, dxn, first, prof);
            proj_backward(m, b, st, dv, Dkv, a.xn1, N, C, {{o.wv, o.bv, Dkv}}, dxn, first, prof);
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
        cuda::gated_rmsnorm_backward(dlo, dz, 0, m.grad(o.o_norm), dgn, a.lo, a.lz, 0, m.p32(o.o_norm),
                                     a.gn_rstd, N, n_la, Dh, st);
        bf16* dlq = ar.alloc<bf16>(N * Dla);
        bf16* dlk = ar.alloc<bf16>(N * Dla);
        bf16* dlv = ar.alloc<bf16>(N * Dla);
        float* dg = ar.alloc<float>(N * n_la);
        float* dbeta = ar.alloc<float>(N * n_la);
        cuda::GdnShape gs;
        gs.B = int(B), gs.T = int(T), gs.H = int(n_la), gs.HV = int(n_la), gs.D = int(Dh);
        prof.section("gdn");
        cuda::gdn_chunk_backward(gs, a.lq, a.lk, a.lv, a.g, a.beta, dlo, nullptr, dlq, dlk, dlv, dg, dbeta,
                                 nullptr, scale, true, env.res->gdn_workspace(m, l, s, true), st);
        prof.section("la_gates");
        bf16* dlab = ar.alloc<bf16>(N * 2 * n_la);
        cuda::gdn_gates_backward(dlab, dlab + n_la, 2 * n_la, m.grad(o.A_log), m.grad(o.dt_bias), dg, dbeta,
                                 a.lab, a.lab + n_la, 2 * n_la, m.p32(o.A_log), m.p32(o.dt_bias), N, n_la,
                                 plan.gdn.allow_neg_eigval, st);
        bf16* dlqkv = ar.alloc<bf16>(N * 3 * Dla);
        prof.section("la_conv");
        cuda::short_conv_backward(dlqkv, 3 * Dla, m.grad(o.conv_q), nullptr, dlq, nullptr, a.lqkv, 3 * Dla,
                                  m.p32(o.conv_q), nullptr, B, T, Dla, W, st);
        cuda::short_conv_backward(dlqkv + Dla, 3 * Dla, m.grad(o.conv_k), nullptr, dlk, nullptr, a.lqkv + Dla,
                                  3 * Dla, m.p32(o.conv_k), nullptr, B, T, Dla, W, st);
        cuda::short_conv_backward(dlqkv + 2 * Dla, 3 * Dla, m.grad(o.conv_v), nullptr, dlv, nullptr,
                                  a.lqkv + 2 * Dla, 3 * Dla, m.p32(o.conv_v), nullptr, B, T, Dla, W, st);
        prof.section("gemm_dx");
        proj_backward(m, b, st, dlqkv, 3 * Dla, a.xn1, N, C,
                      {{o.la_wq, o.la_bq, Dla}, {o.la_wk, o.la_bk, Dla}, {o.la_wv, o.la_bv, Dla}}, dxn, first,
                      prof);
        proj_backward(m, b, st, dz, Dla, a.xn1, N, C, {{o.la_wg, -1, Dla}}, dxn, first, prof);
        proj_backward(m, b, st, dlab, 2 * n_la, a.xn1, N, C, {{o.la_wa, -1, n_la}, {o.la_wb, -1, n_la}}, dxn,
                      first, prof);
    }
    prof.section("rmsnorm");
    if (first)
        CUDA_CHECK(
            cudaMemsetAsync(dxn, 0, size_t(N * C) * sizeof(float), st));  // no mixer heads (not reached)
    // d x_in, and (dx_bf16 not null) its bf16 copy for the next (lower) layer's first GEMMs
    cuda::rmsnorm_backward(dx, dx_bf16, m.grad(o.attn_norm), dxn, a.x_in, m.p32(o.attn_norm), a.rstd1, N, C,
                           st);
    ar.reset(mark);
}

}  // namespace hydra::gpu
