// Upload of a LlamaModel to the GPU (see gpu_model.h): the host builds the bf16 and fp32 images in
// the fused layout, then each goes up in one copy.
#include "gpu/gpu_model.h"

#include <cuda_runtime.h>

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "ops/cuda/cuda_check.h"

namespace hydra::gpu {

namespace {

constexpr int64_t kAlign = 128;  // elements: 256 bytes of bf16, 512 of fp32

int64_t aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Host images of the device buffers; parts are appended and addressed by element offsets.
struct Image16 {
    std::vector<uint16_t> data;
    int64_t begin() {  // start of a new (aligned) matrix
        data.resize(size_t(aligned(int64_t(data.size()))), 0);
        return int64_t(data.size());
    }
    void append(const Tensor& t) {  // rows of t (fp32) rounded to bf16, right after what is there
        const int64_t n = t.numel(), at = int64_t(data.size());
        data.resize(size_t(at + n));
        const float* src = t.f32();
        uint16_t* dst = data.data() + at;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
    }
};

struct Image32 {
    std::vector<float> data;
    int64_t add(const float* src, int64_t n) {
        const int64_t at = aligned(int64_t(data.size()));
        data.resize(size_t(at + n), 0.f);
        std::memcpy(data.data() + at, src, size_t(n) * sizeof(float));
        return at;
    }
    int64_t add(const Tensor& t) { return t.empty() ? -1 : add(t.f32(), t.numel()); }
    int64_t zeros(int64_t n) {
        const int64_t at = aligned(int64_t(data.size()));
        data.resize(size_t(at + n), 0.f);
        return at;
    }
};

}  // namespace

std::string require_cuda_device() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    HYDRA_CHECK(err == cudaSuccess && n > 0, "--device cuda: no usable CUDA device ({})",
                err == cudaSuccess ? std::string("none found") : std::string(cudaGetErrorString(err)));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    return prop.name;
}

GpuModel::GpuModel(const LlamaModel& model) : config_(model.config()), plan_(model.plan()) {
    require_cuda_device();
    const ModelConfig& cfg = config_;
    const int64_t C = cfg.hidden_size, Dh = cfg.head_dim, H = cfg.num_heads;
    const int64_t V = cfg.vocab_size, L = cfg.num_layers;
    HYDRA_CHECK(Dh == 64 || Dh == 128, "GPU inference: head dim {} is not supported (64 or 128)", Dh);
    HYDRA_CHECK(cfg.rope_dim % 2 == 0 && cfg.rope_dim <= Dh, "GPU inference: rope_dim {} is not supported",
                cfg.rope_dim);

    Image16 h16;
    Image32 h32;
    std::vector<int32_t> idx;
    struct Offsets {
        int64_t proj = -1, o = -1, gate_up = -1, down = -1;
        int64_t b_proj = -1, attn_norm = -1, ffn_norm = -1, q_norm = -1, k_norm = -1, kv_index = -1;
        int64_t conv_q = -1, conv_k = -1, conv_v = -1, A_log = -1, dt_bias = -1, o_norm = -1;
        int64_t head_scale = -1, fa_scale = -1, la_scale = -1;
    };
    std::vector<Offsets> offs(static_cast<size_t>(L));
    layers_.resize(size_t(L));
    for (int64_t l = 0; l < L; ++l) {
        const LayerWeights& w = model.layer(l);
        GpuLayer& g = layers_[size_t(l)];
        Offsets& o = offs[size_t(l)];
        g.n_fa = w.n_fa;
        g.n_kv = w.n_fa_kv;
        g.n_la = w.n_la;
        const int64_t Dla = w.n_la * Dh;
        g.uniform_groups = g.n_fa == 0 || (g.n_fa % g.n_kv == 0);
        for (int64_t h = 0; h < g.n_fa && g.uniform_groups; ++h)
            if (w.fa_kv_index[size_t(h)] != h / (g.n_fa / g.n_kv)) g.uniform_groups = false;
        // fused projection rows
        int64_t at = 0;
        auto part = [&](int64_t rows) {
            const int64_t r = at;
            at += rows;
            return r;
        };
        g.off_q = part(g.n_fa * Dh);
        g.off_k = part(g.n_kv * Dh);
        g.off_v = part(g.n_kv * Dh);
        g.off_lq = part(Dla);
        g.off_lk = part(Dla);
        g.off_lv = part(Dla);
        g.off_lz = part(Dla);
        g.off_la = part(w.n_la);
        g.off_lb = part(w.n_la);
        const int64_t used = at;
        at = (at + 63) / 64 * 64;  // zero rows up to a multiple of 64 columns: aligned output rows
        g.proj_cols = at;
        max_proj_cols_ = std::max(max_proj_cols_, at);
        o.proj = h16.begin();
        if (g.n_fa > 0) {
            h16.append(w.wq);
            h16.append(w.wk);
            h16.append(w.wv);
        }
        if (g.n_la > 0) {
            h16.append(w.la.wq);
            h16.append(w.la.wk);
            h16.append(w.la.wv);
            h16.append(w.la.wg);
            h16.append(w.la.wa);
            h16.append(w.la.wb);
        }
        HYDRA_ASSERT(int64_t(h16.data.size()) - o.proj == used * C, "layer {}: fused projection holds {} values, not {}",
                     l, int64_t(h16.data.size()) - o.proj, used * C);
        h16.data.resize(size_t(o.proj + at * C), 0);  // the padding rows
        o.o = h16.begin();
        h16.append(w.wo);
        o.gate_up = h16.begin();
        h16.append(w.w_gate);
        h16.append(w.w_up);
        o.down = h16.begin();
        h16.append(w.w_down);

        const bool any_bias = !w.bq.empty() || !w.la.bq.empty();
        if (any_bias) {
            o.b_proj = h32.zeros(at);
            auto put = [&](const Tensor& b, int64_t off) {
                if (!b.empty()) std::memcpy(h32.data.data() + o.b_proj + off, b.f32(), size_t(b.numel()) * 4);
            };
            put(w.bq, g.off_q), put(w.bk, g.off_k), put(w.bv, g.off_v);
            put(w.la.bq, g.off_lq), put(w.la.bk, g.off_lk), put(w.la.bv, g.off_lv);
        }
        o.attn_norm = h32.add(w.attn_norm);
        o.ffn_norm = h32.add(w.ffn_norm);
        o.q_norm = h32.add(w.q_norm);
        o.k_norm = h32.add(w.k_norm);
        if (g.n_la > 0) {
            o.conv_q = h32.add(w.la.conv_q);
            o.conv_k = h32.add(w.la.conv_k);
            o.conv_v = h32.add(w.la.conv_v);
            o.A_log = h32.add(w.la.A_log);
            o.dt_bias = h32.add(w.la.dt_bias);
            o.o_norm = h32.add(w.la.o_norm);
        }
        o.head_scale = h32.add(w.fusion_head_scale);
        o.fa_scale = h32.add(w.fusion_fa_scale);
        o.la_scale = h32.add(w.fusion_la_scale);
        if (g.n_fa > 0) {
            o.kv_index = int64_t(idx.size());
            idx.insert(idx.end(), w.fa_kv_index.begin(), w.fa_kv_index.end());
        }
    }
    HYDRA_CHECK(H * Dh == cfg.q_dim(), "GPU inference: unexpected head layout");
    const int64_t lm_off = h16.begin();
    h16.append(model.lm_head());
    const int64_t embed_off = h32.add(model.embedding());
    const int64_t norm_off = h32.add(model.final_norm());

    w16_ = cuda::DeviceBuffer<bf16>(int64_t(h16.data.size()));
    w16_.upload(reinterpret_cast<const bf16*>(h16.data.data()));
    w32_ = cuda::DeviceBuffer<float>(int64_t(h32.data.size()));
    w32_.upload(h32.data.data());
    if (!idx.empty()) {
        idx_ = cuda::DeviceBuffer<int32_t>(int64_t(idx.size()));
        idx_.upload(idx.data());
    }
    CUDA_CHECK(cudaDeviceSynchronize());

    const bf16* b16 = w16_.data();
    const float* b32 = w32_.data();
    auto p32 = [&](int64_t off) { return off < 0 ? (const float*)nullptr : b32 + off; };
    for (int64_t l = 0; l < L; ++l) {
        GpuLayer& g = layers_[size_t(l)];
        const Offsets& o = offs[size_t(l)];
        g.w_proj = b16 + o.proj;
        g.w_o = b16 + o.o;
        g.w_gate_up = b16 + o.gate_up;
        g.w_down = b16 + o.down;
        g.b_proj = p32(o.b_proj);
        g.attn_norm = p32(o.attn_norm);
        g.ffn_norm = p32(o.ffn_norm);
        g.q_norm = p32(o.q_norm);
        g.k_norm = p32(o.k_norm);
        g.kv_index = o.kv_index < 0 ? nullptr : idx_.data() + o.kv_index;
        g.conv_q = p32(o.conv_q);
        g.conv_k = p32(o.conv_k);
        g.conv_v = p32(o.conv_v);
        g.A_log = p32(o.A_log);
        g.dt_bias = p32(o.dt_bias);
        g.o_norm = p32(o.o_norm);
        g.fusion_head_scale = p32(o.head_scale);
        g.fusion_fa_scale = p32(o.fa_scale);
        g.fusion_la_scale = p32(o.la_scale);
    }
    lm_head_ = b16 + lm_off;
    embed_f32_ = b32 + embed_off;
    final_norm_ = b32 + norm_off;
    (void)V;
}

}  // namespace hydra::gpu
