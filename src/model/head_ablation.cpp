// Head zero-ablation and head choice for causality checks (see head_ablation.h).
#include "model/head_ablation.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace hydra {

void zero_ablate_heads(LlamaModel& model, const std::vector<HeadRef>& heads) {
    const ModelConfig& c = model.config();
    HYDRA_CHECK(model.plan().is_all_fa(), "head ablation needs a full-attention model (a teacher), not a hybrid");
    const int64_t C = c.hidden_size, Dq = c.q_dim(), Dh = c.head_dim;
    for (const auto& [l, h] : heads) {
        HYDRA_CHECK(l >= 0 && l < c.num_layers && h >= 0 && h < c.num_heads,
                    "head ablation: head {}:{} does not exist (the model has layers 0..{}, heads 0..{})", l, h,
                    c.num_layers - 1, c.num_heads - 1);
        float* wo = model.layer(l).wo.f32();  // (C, Dq) row-major: column block of head h
        for (int64_t row = 0; row < C; ++row) std::fill_n(wo + row * Dq + h * Dh, Dh, 0.0f);
        // A quantized copy (GGUF decode path) would still hold the head: drop it, so every path reads
        // the ablated f32 weights.
        model.attach_quantized(LlamaModel::layer_name(l, "self_attn.o_proj.weight"), QuantizedWeight{});
    }
}

std::vector<HeadRef> top_scored_heads(const std::vector<std::vector<double>>& scores, int64_t n) {
    std::vector<HeadRef> all;
    std::vector<double> value;
    for (size_t l = 0; l < scores.size(); ++l)
        for (size_t h = 0; h < scores[l].size(); ++h) {
            all.emplace_back(int64_t(l), int64_t(h));
            value.push_back(scores[l][h]);
        }
    HYDRA_CHECK(n >= 0 && n <= int64_t(all.size()), "head ablation: {} heads asked, the model has {}", n, all.size());
    std::vector<size_t> order(all.size());
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return value[a] > value[b]; });
    std::vector<HeadRef> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(all[order[size_t(i)]]);
    return out;
}

std::vector<HeadRef> random_heads(int64_t num_layers, int64_t num_heads, int64_t n, uint64_t seed) {
    const int64_t total = num_layers * num_heads;
    HYDRA_CHECK(n >= 0 && n <= total, "head ablation: {} heads asked, the model has {}", n, total);
    std::vector<int64_t> idx(static_cast<size_t>(total));
    std::iota(idx.begin(), idx.end(), int64_t(0));
    Rng rng(seed);
    for (size_t i = idx.size(); i > 1; --i) std::swap(idx[i - 1], idx[size_t(rng.next_u64() % i)]);
    std::vector<HeadRef> out;
    for (int64_t i = 0; i < n; ++i) out.emplace_back(idx[size_t(i)] / num_heads, idx[size_t(i)] % num_heads);
    return out;
}

namespace {
int64_t to_int(const std::string& s, const std::string& spec) {
    HYDRA_CHECK(
        !s.empty() && s.size() <= 18 && s.find_first_not_of("0123456789") == std::string::npos,
        "--ablate {}: '{}' is not a non-negative integer below 10^18 (expected top:N, random:N:SEED or "
        "L:H,L:H,...)",
        spec, s);
    return std::stoll(s);
}
std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t b = 0;
    while (true) {
        const size_t e = s.find(sep, b);
        out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
        if (e == std::string::npos) return out;
        b = e + 1;
    }
}
}  // namespace

std::vector<HeadRef> parse_ablation(const std::string& spec, int64_t num_layers, int64_t num_heads,
                                    const std::vector<std::vector<double>>* scores) {
    const std::vector<std::string> parts = split(spec, ':');
    if (parts[0] == "top") {
        HYDRA_CHECK(parts.size() == 2, "--ablate {}: expected top:N", spec);
        HYDRA_CHECK(scores != nullptr, "--ablate {}: top-scored heads need --scores FILE", spec);
        return top_scored_heads(*scores, to_int(parts[1], spec));
    }
    if (parts[0] == "random") {
        HYDRA_CHECK(parts.size() == 3, "--ablate {}: expected random:N:SEED", spec);
        return random_heads(num_layers, num_heads, to_int(parts[1], spec), uint64_t(to_int(parts[2], spec)));
    }
    std::vector<HeadRef> out;
    for (const std::string& item : split(spec, ',')) {
        const std::vector<std::string> lh = split(item, ':');
        HYDRA_CHECK(lh.size() == 2, "--ablate {}: '{}' is not L:H (expected top:N, random:N:SEED or L:H,L:H,...)",
                    spec, item);
        const int64_t layer = to_int(lh[0], spec), head = to_int(lh[1], spec);
        HYDRA_CHECK(layer < num_layers && head < num_heads,
                    "--ablate {}: '{}' is outside the model's {} layers x {} heads (0-based)", spec, item,
                    num_layers, num_heads);
        out.emplace_back(layer, head);
    }
    return out;
}

}  // namespace hydra
