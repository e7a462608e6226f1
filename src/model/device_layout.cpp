// The device arena's order (see device_layout.h): matrices by layer, the embedding, then the vectors.
#include "model/device_layout.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hydra {

namespace {

int64_t align_up(int64_t n, int64_t a) {
    return (n + a - 1) / a * a;
}

// The parts of a layer's proj block, in row order, with their biases ("" where a part has none).
struct ProjPart {
    const char* weight;
    const char* bias;
    int64_t DeviceProjBlock::*row;
};
constexpr ProjPart kProjParts[] = {
    {"self_attn.q_proj.weight", "self_attn.q_proj.bias", &DeviceProjBlock::q},
    {"self_attn.k_proj.weight", "self_attn.k_proj.bias", &DeviceProjBlock::k},
    {"self_attn.v_proj.weight", "self_attn.v_proj.bias", &DeviceProjBlock::v},
    {"linear_attn.q_proj.weight", "linear_attn.q_proj.bias", &DeviceProjBlock::la_q},
    {"linear_attn.k_proj.weight", "linear_attn.k_proj.bias", &DeviceProjBlock::la_k},
    {"linear_attn.v_proj.weight", "linear_attn.v_proj.bias", &DeviceProjBlock::la_v},
    {"linear_attn.g_proj.weight", "", &DeviceProjBlock::la_g},
    {"linear_attn.a_proj.weight", "", &DeviceProjBlock::la_a},
    {"linear_attn.b_proj.weight", "", &DeviceProjBlock::la_b},
};

}  // namespace

DeviceLayout::DeviceLayout(const ModelConfig& config, const std::vector<ArenaEntry>& entries,
                           int64_t host_numel)
    : host_numel_(host_numel) {
    const int64_t C = config.hidden_size, L = config.num_layers;
    HYDRA_CHECK(C > 0 && L >= 0, "device layout: hidden size {}, {} layers", C, L);
    std::unordered_map<std::string, size_t> by_name;
    tensors_.resize(entries.size());
    {
        // the host entries must tile part of [0, host_numel) without overlap: the copies below rely on it
        std::vector<size_t> order(entries.size());
        for (size_t i = 0; i < entries.size(); ++i) {
            const ArenaEntry& e = entries[i];
            const int64_t n = shape_numel(e.shape);
            HYDRA_CHECK(n > 0, "device layout: parameter '{}' is empty", e.name);
            HYDRA_CHECK(e.offset >= 0 && e.offset <= host_numel - n,
                        "device layout: parameter '{}' [{}, +{}) lies outside the arena of {} elements",
                        e.name, e.offset, n, host_numel);
            HYDRA_CHECK(by_name.emplace(e.name, i).second, "device layout: parameter '{}' listed twice",
                        e.name);
            tensors_[i].host = e.offset;
            tensors_[i].size = n;
            tensors_[i].device = -1;
            order[i] = i;
        }
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return entries[a].offset < entries[b].offset; });
        for (size_t i = 1; i < order.size(); ++i) {
            const DeviceTensor &p = tensors_[order[i - 1]], &t = tensors_[order[i]];
            HYDRA_CHECK(p.host + p.size <= t.host, "device layout: parameters '{}' and '{}' overlap",
                        entries[order[i - 1]].name, entries[order[i]].name);
        }
    }
    auto find = [&](const std::string& name) -> int64_t {
        const auto it = by_name.find(name);
        return it == by_name.end() ? -1 : int64_t(it->second);
    };
    int64_t at = 0;
    auto group = [&]() {  // start of a new group
        at = align_up(at, kAlign);
        return at;
    };
    auto place = [&](int64_t i) {  // entry i right after what is there
        tensors_[size_t(i)].device = at;
        at += tensors_[size_t(i)].size;
    };

    // bf16 region: per layer the proj block, o_proj, gate | up, down
    proj_.resize(size_t(L));
    std::vector<std::vector<std::pair<int64_t, int64_t>>> biases(
        static_cast<size_t>(L));  // (entry, first row) per layer
    for (int64_t l = 0; l < L; ++l) {
        DeviceProjBlock& pb = proj_[size_t(l)];
        pb.offset = group();
        int64_t rows = 0;
        for (const ProjPart& part : kProjParts) {
            pb.*part.row = rows;
            const int64_t i = find(LlamaModel::layer_name(l, part.weight));
            const int64_t ib = part.bias[0] ? find(LlamaModel::layer_name(l, part.bias)) : -1;
            if (i < 0) {
                HYDRA_CHECK(ib < 0, "device layout: layer {} has '{}' without its weight", l, part.bias);
                continue;
            }
            const Shape& s = entries[size_t(i)].shape;
            HYDRA_CHECK(s.size() == 2 && s[1] == C, "device layout: '{}' is not a ({{rows}}, {}) matrix",
                        entries[size_t(i)].name, C);
            if (ib >= 0) {
                const Shape& sb = entries[size_t(ib)].shape;
                HYDRA_CHECK(sb.size() == 1 && sb[0] == s[0], "device layout: '{}' does not have {} values",
                            entries[size_t(ib)].name, s[0]);
                biases[size_t(l)].emplace_back(ib, rows);
            }
            place(i);
            rows += s[0];
        }
        pb.used_rows = rows;
        pb.proj_cols = align_up(rows, kProjRowMultiple);
        max_proj_cols_ = std::max(max_proj_cols_, pb.proj_cols);
        at = pb.offset + pb.proj_cols * C;  // the zero rows
        for (const char* name : {"self_attn.o_proj.weight", "mlp.gate_proj.weight"}) {
            if (const int64_t i = find(LlamaModel::layer_name(l, name)); i >= 0) {
                group();
                place(i);
            }
        }
        if (const int64_t i = find(LlamaModel::layer_name(l, "mlp.up_proj.weight")); i >= 0) {
            // right after gate: one (2F, C) matrix
            const int64_t g = find(LlamaModel::layer_name(l, "mlp.gate_proj.weight"));
            if (g < 0) group();
            place(i);
        }
        if (const int64_t i = find(LlamaModel::layer_name(l, "mlp.down_proj.weight")); i >= 0) {
            group();
            place(i);
        }
    }
    if (const int64_t i = find("lm_head.weight"); i >= 0) {
        group();
        place(i);
    }
    const int64_t embed = find("model.embed_tokens.weight");
    if (embed >= 0) {
        const int64_t begin = group();
        place(embed);
        const bool tied = find("lm_head.weight") < 0;
        bf16_end_ = tied ? at : begin;
        f32_begin_ = begin;
    } else {
        bf16_end_ = f32_begin_ = group();
    }

    // fp32 region: every other entry in arena order; a layer's projection biases as one block
    std::vector<char> is_bias(entries.size(), 0);
    for (const auto& list : biases)
        for (const auto& [i, row] : list) is_bias[size_t(i)] = 1;
    for (size_t i = 0; i < entries.size(); ++i) {
        if (tensors_[i].device >= 0) continue;
        if (!is_bias[i]) {
            group();
            place(int64_t(i));
            continue;
        }
        for (int64_t l = 0; l < L; ++l) {  // the layer whose block holds this bias: place the whole block
            const auto& list = biases[size_t(l)];
            if (std::none_of(list.begin(), list.end(), [&](const auto& b) { return b.first == int64_t(i); }))
                continue;
            DeviceProjBlock& pb = proj_[size_t(l)];
            pb.bias = group();
            for (const auto& [ib, row] : list) tensors_[size_t(ib)].device = pb.bias + row;
            at = pb.bias + pb.proj_cols;
            break;
        }
    }
    numel_ = group();
    for (size_t i = 0; i < tensors_.size(); ++i) {
        HYDRA_ASSERT(tensors_[i].device >= 0, "device layout: '{}' was not placed", entries[i].name);
        by_host_.emplace(tensors_[i].host, i);
    }
}

int64_t DeviceLayout::device_offset(int64_t host) const {
    if (host < 0) return -1;
    const auto it = by_host_.find(host);
    HYDRA_CHECK(it != by_host_.end(), "device layout: no parameter starts at host offset {}", host);
    return tensors_[it->second].device;
}

void DeviceLayout::to_device(const float* host, float* device) const {
    std::fill(device, device + numel_, 0.f);
    for (const DeviceTensor& t : tensors_)
        std::memcpy(device + t.device, host + t.host, size_t(t.size) * sizeof(float));
}

void DeviceLayout::to_host(const float* device, float* host) const {
    for (const DeviceTensor& t : tensors_)
        std::memcpy(host + t.host, device + t.device, size_t(t.size) * sizeof(float));
}

}  // namespace hydra
