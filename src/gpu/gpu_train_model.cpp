// Upload of a LlamaModel's parameters into the device layout (see gpu_train_model.h).
#include "gpu/gpu_train_model.h"

#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "gpu/cuda_device.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/elementwise.h"

namespace hydra::gpu {

namespace {

// The device offset of a named tensor (-1: the model has none).
int64_t offset_of(const ParamArena& a, const DeviceLayout& d, const std::string& name) {
    return a.has(name) ? d.device_offset(a.entry(name).offset) : -1;
}

}  // namespace

GpuTrainModel::GpuTrainModel(const LlamaModel& model, bool with_grads, cudaStream_t stream)
    : config_(model.config()), plan_(model.plan()), entries_(model.params().entries()), layout_(model) {
    require_cuda_device();
    const ModelConfig& c = config_;
    const ParamArena& a = model.params();
    const char* what = with_grads ? "GPU training" : "GPU model";
    HYDRA_CHECK(c.head_dim == 64 || c.head_dim == 128, "{}: head dim {} is not supported (64 or 128)", what,
                c.head_dim);
    HYDRA_CHECK(c.rope_dim % 2 == 0 && c.rope_dim <= c.head_dim, "{}: rope_dim {} is not supported", what,
                c.rope_dim);
    HYDRA_CHECK(c.num_heads * c.head_dim == c.q_dim(), "{}: unexpected head layout", what);
    // the training kernels chunk by 64; inference's chunked prefill is the same math whatever the plan says
    HYDRA_CHECK(!with_grads || plan_.total_la_heads() == 0 || plan_.gdn.chunk_size == 64,
                "GPU training: GDN chunk size {} (the CUDA kernels use 64)", plan_.gdn.chunk_size);
    HYDRA_CHECK(plan_.total_la_heads() == 0 || (plan_.gdn.conv_size >= 1 && plan_.gdn.conv_size <= 8),
                "{}: GDN conv width {} (1..8 supported)", what, plan_.gdn.conv_size);
    n_params_ = a.parameter_count();
    layers_.resize(size_t(c.num_layers));
    std::vector<int32_t> kv_index;  // every layer's map, uploaded below
    std::vector<int64_t> kv_index_at(size_t(c.num_layers), -1);
    std::vector<int32_t> windows;  // every windowed layer's per-FA-head windows, uploaded below
    std::vector<int64_t> windows_at(size_t(c.num_layers), -1);
    for (int64_t l = 0; l < c.num_layers; ++l) {
        TrainLayerOffsets& o = layers_[size_t(l)];
        auto at = [&](const char* suffix) {
            return offset_of(a, layout_, LlamaModel::layer_name(l, suffix));
        };
        const LayerPlan& lp = plan_.layers[size_t(l)];
        o.n_fa = lp.num_fa();
        o.n_la = lp.num_la();
        o.n_kv = int64_t(plan_.fa_kv_groups(c, l).size());
        if (o.n_fa > 0) {
            const std::vector<int32_t> idx = plan_.fa_kv_index(c, l);
            HYDRA_CHECK(int64_t(idx.size()) == o.n_fa, "{}: layer {} maps {} FA heads, has {}", what, l,
                        idx.size(), o.n_fa);
            for (const int32_t g : idx)
                HYDRA_CHECK(g >= 0 && g < o.n_kv, "{}: layer {}: KV slot {} outside 0..{}", what, l, g,
                            o.n_kv - 1);
            o.uniform_groups = o.n_fa % o.n_kv == 0;
            for (int64_t h = 0; o.uniform_groups && h < o.n_fa; ++h)
                o.uniform_groups = idx[size_t(h)] == h / (o.n_fa / o.n_kv);
            kv_index_at[size_t(l)] = int64_t(kv_index.size());
            kv_index.insert(kv_index.end(), idx.begin(), idx.end());
            if (!lp.fa_window.empty()) {
                windows_at[size_t(l)] = int64_t(windows.size());
                windows.insert(windows.end(), lp.fa_window.begin(), lp.fa_window.end());
                o.window_sinks = plan_.window_sinks;
            }
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
                    "{}: layer {} of a q/k-norm model has no q_norm / k_norm weights", what, l);
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
        o.la_bias = at("fusion.la_bias");
        o.ffn_norm = at("post_attention_layernorm.weight");
        o.w_gate = at("mlp.gate_proj.weight");
        o.w_up = at("mlp.up_proj.weight");
        o.w_down = at("mlp.down_proj.weight");
    }
    embed_ = layout_.device_offset(a.entry("model.embed_tokens.weight").offset);
    final_norm_ = layout_.device_offset(a.entry("model.norm.weight").offset);
    lm_head_ = c.tie_word_embeddings ? embed_ : layout_.device_offset(a.entry("lm_head.weight").offset);

    // the training kind: everything in fp32 and bf16; weights only: the layout's bf16 and fp32 regions
    const int64_t n = layout_.numel();
    f32_begin_ = with_grads ? 0 : layout_.f32_begin();
    master_ = cuda::DeviceBuffer<float>(n - f32_begin_);
    mirror_ = cuda::DeviceBuffer<bf16>(with_grads ? n : layout_.bf16_end());
    master_.zero(stream);  // padding stays zero: upload writes the tensors only
    mirror_.zero(stream);
    upload(a.data(), stream);
    // Every layer's int32 map back to back in one device buffer; each layer's pointer at its offset (-1:
    // none). The host vectors outlive the copies: synchronised below.
    auto upload_maps = [&](cuda::DeviceBuffer<int32_t>& dev, const std::vector<int32_t>& host,
                           const std::vector<int64_t>& at, const int32_t* TrainLayerOffsets::*member) {
        if (host.empty()) return;
        dev = cuda::DeviceBuffer<int32_t>(int64_t(host.size()));
        dev.upload(host.data(), stream);
        for (int64_t l = 0; l < c.num_layers; ++l)
            if (at[size_t(l)] >= 0) layers_[size_t(l)].*member = dev.data() + at[size_t(l)];
    };
    upload_maps(kv_index_, kv_index, kv_index_at, &TrainLayerOffsets::kv_index);
    upload_maps(fa_window_, windows, windows_at, &TrainLayerOffsets::fa_window);
    if (with_grads) {
        grads_ = cuda::DeviceBuffer<float>(n);
        grads_.zero(stream);
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

const float* GpuTrainModel::p32(int64_t offset) const {
    if (offset < 0) return nullptr;
    HYDRA_ASSERT(offset >= f32_begin_ && offset - f32_begin_ < master_.size(),
                 "device offset {} is outside the model's fp32 values [{}, {})", offset, f32_begin_,
                 f32_begin_ + master_.size());
    return master_.data() + (offset - f32_begin_);
}

const bf16* GpuTrainModel::p16(int64_t offset) const {
    if (offset < 0) return nullptr;
    HYDRA_ASSERT(offset < mirror_.size(), "device offset {} is outside the model's bf16 values [0, {})",
                 offset, mirror_.size());
    return mirror_.data() + offset;
}

float* GpuTrainModel::grad(int64_t offset) const {
    if (offset < 0 || grads_.size() == 0 || frozen_.count(offset)) return nullptr;
    return grads_.data() + offset;
}

void GpuTrainModel::set_trainable(const std::vector<char>& per_entry) {
    HYDRA_ASSERT(per_entry.empty() || per_entry.size() == entries_.size(),
                 "trainable mask has {} entries, arena {}", per_entry.size(), entries_.size());
    frozen_.clear();
    for (size_t i = 0; i < per_entry.size(); ++i)
        if (!per_entry[i]) frozen_.insert(layout_.tensors()[i].device);
}

void GpuTrainModel::to_device(float* device, const float* host, cudaStream_t stream) const {
    for (const DeviceTensor& t : layout_.tensors())
        cuda::upload(device + t.device, host + t.host, t.size, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

void GpuTrainModel::to_host(float* host, const float* device, cudaStream_t stream) const {
    for (const DeviceTensor& t : layout_.tensors())
        cuda::download(host + t.host, device + t.device, t.size, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

void GpuTrainModel::upload(const float* host, cudaStream_t stream) {
    if (has_master()) {  // the training kind: fp32 master, then its bf16 mirror on the device
        to_device(master_.data(), host, stream);
        cuda::cast_f32_to_bf16(mirror_.data(), master_.data(), numel(), stream);
        return;
    }
    // weights only: host images of the two regions (bf16 rounded to nearest even on the host), one copy each
    const int64_t n16 = mirror_.size(), n32 = master_.size();
    std::vector<uint16_t> h16(size_t(n16), 0);
    std::vector<float> h32(size_t(n32), 0.f);
    for (const DeviceTensor& t : layout_.tensors()) {
        const float* src = host + t.host;
        if (t.device < n16) {
            HYDRA_ASSERT(t.device + t.size <= n16, "tensor at device offset {} straddles the bf16 region",
                         t.device);
            uint16_t* dst = h16.data() + t.device;
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < t.size; ++i) dst[i] = f32_to_bf16(src[i]);
        }
        if (t.device >= f32_begin_)
            std::memcpy(h32.data() + (t.device - f32_begin_), src, size_t(t.size) * 4);
    }
    cuda::upload(mirror_.data(), reinterpret_cast<const bf16*>(h16.data()), n16, stream);
    cuda::upload(master_.data(), h32.data(), n32, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the host images die here
}

void GpuTrainModel::download_params(float* host, cudaStream_t stream) const {
    HYDRA_ASSERT(has_master(), "the model holds no fp32 master (uploaded without gradients)");
    to_host(host, master_.data(), stream);
}

void GpuTrainModel::download_grads(float* host, cudaStream_t stream) const {
    HYDRA_ASSERT(grads_.size() == numel(), "model has no gradients");
    to_host(host, grads_.data(), stream);
}

void GpuTrainModel::zero_grads(cudaStream_t stream) {
    if (grads_.size()) grads_.zero(stream);
}

}  // namespace hydra::gpu
