// GGUF -> LlamaModel import (see gguf_import.h).
#include "model/gguf_import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <optional>
#include <vector>

#include "core/error.h"
#include "ops/cpu/quant_gemv.h"

namespace hydra {

namespace {

int64_t require_positive(const GgufFile& g, const std::string& key) {
    const int64_t v = g.get_int(key);
    HYDRA_CHECK(v > 0, "{}: metadata key '{}' = {} must be positive", g.source(), key, v);
    return v;
}

// GGUF tensor name -> HF name, for one layer's suffixes.
const std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

// llama.cpp's rope_freqs tensor (Llama 3.x: per pair a divisor of the inverse frequency) as transformers'
// llama3 parameters. The divisors depend on original_max_position_embeddings only through x = original /
// wavelength against low/high_freq_factor, so with the original context fixed (the GGUF's, else Llama 3's
// 8192) the factors follow from the divisors: factor = the largest, and low/high from a line through the
// blended pairs' smooth values. The recovered parameters must reproduce every divisor, else the file
// is refused: a table that is not llama3's is not guessed at.
RopeScaling llama3_from_rope_freqs(const GgufFile& g, const GgufTensorInfo& info, const ModelConfig& c,
                                   std::optional<int64_t> original) {
    const int64_t half = c.rope_dim / 2;
    HYDRA_CHECK(info.numel == half,
                "{}: tensor 'rope_freqs.weight' has {} values, expected rope_dim / 2 = {}", g.source(),
                info.numel, half);
    const GgmlTypeInfo* ti = ggml_type_info(uint32_t(info.type));
    HYDRA_CHECK(ti && ti->can_dequantize, "{}: tensor 'rope_freqs.weight' cannot be dequantized", g.source());
    std::vector<float> div(static_cast<size_t>(half));
    dequantize_row(info.type, g.tensor_data(info), div.data(), half);
    for (float d : div)
        HYDRA_CHECK(std::isfinite(d) && d >= 1.0f, "{}: rope_freqs.weight holds {}, expected divisors >= 1",
                    g.source(), d);
    RopeScaling s;
    s.type = RopeType::Llama3;
    s.factor = double(*std::max_element(div.begin(), div.end()));
    s.original_max_position_embeddings = original.value_or(8192);
    const double orig = double(s.original_max_position_embeddings), R = double(c.rope_dim);
    // smooth value of each blended pair: 1/div = (1 - sm) / factor + sm
    std::vector<std::pair<double, double>> pts;  // (original / wavelength, smooth)
    for (int64_t i = 0; i < half; ++i) {
        const double d = double(div[size_t(i)]);
        if (d <= 1.0 + 1e-6 || d >= s.factor * (1.0 - 1e-6)) continue;
        const double wavelen = 2.0 * std::numbers::pi / std::pow(double(c.rope_theta), -2.0 * double(i) / R);
        pts.push_back({orig / wavelen, (s.factor / d - 1.0) / (s.factor - 1.0)});
    }
    HYDRA_CHECK(
        s.factor > 1.0 && pts.size() >= 2,
        "{}: rope_freqs.weight is not a Llama 3 frequency table with a blended band ({} blended pairs); "
        "this RoPE scaling is not supported",
        g.source(), pts.size());
    // least squares sm = m x + b; then high - low = 1 / m, low = -b / m
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (auto [x, y] : pts) sx += x, sy += y, sxx += x * x, sxy += x * y;
    const double n = double(pts.size()), m = (n * sxy - sx * sy) / (n * sxx - sx * sx), b = (sy - m * sx) / n;
    HYDRA_CHECK(std::isfinite(m) && m > 0, "{}: rope_freqs.weight does not follow Llama 3's blend",
                g.source());
    s.low_freq_factor = -b / m;
    s.high_freq_factor = s.low_freq_factor + 1.0 / m;
    validate_rope_scaling(s, c.max_position_embeddings, g.source() + ": rope_freqs.weight");
    const RopeFrequencies plain = rope_frequencies(RopeScaling{}, c.rope_theta, c.rope_dim, 0, 0);
    const RopeFrequencies fit = rope_frequencies(s, c.rope_theta, c.rope_dim, c.max_position_embeddings, 0);
    for (int64_t i = 0; i < half; ++i) {
        const double want = plain.inv_freq[size_t(i)] / double(div[size_t(i)]), got = fit.inv_freq[size_t(i)];
        HYDRA_CHECK(
            std::abs(got - want) <= 1e-4 * want,
            "{}: rope_freqs.weight is not a Llama 3 frequency table (pair {}: {} from the table, {} from the "
            "recovered llama3 parameters); this RoPE scaling is not supported",
            g.source(), i, want, got);
    }
    return s;
}

// llama.cpp's rope-scaling metadata with transformers' semantics: `{arch}.rope.scaling.type` none / linear /
// yarn with .factor, .original_context_length, .yarn_beta_fast / _slow and .attn_factor (llama.cpp multiplies
// YaRN's 0.1 ln(factor) + 1 by it); the older `{arch}.rope.scale_linear`; Llama 3's rope_freqs tensor.
RopeScaling rope_scaling_from_gguf(const GgufFile& g, const ModelConfig& c) {
    const std::string a = c.architecture + ".", p = a + "rope.scaling.";
    const std::optional<int64_t> original = g.get_int_opt(p + "original_context_length");
    if (original)
        HYDRA_CHECK(*original > 0, "{}: '{}original_context_length' = {} must be positive", g.source(), p,
                    *original);
    if (const GgufTensorInfo* freqs = g.find_tensor("rope_freqs.weight"))
        return llama3_from_rope_freqs(g, *freqs, c, original);
    std::string type = g.get_string_opt(p + "type").value_or("none");
    std::optional<double> factor = g.get_float_opt(p + "factor");
    if (type == "none") {
        if (auto lin = g.get_float_opt(a + "rope.scale_linear"); lin && *lin != 1.0)
            type = "linear", factor = *lin;
        else
            return {};
    }
    RopeScaling s;
    if (type == "linear") {
        s.type = RopeType::Linear;
    } else if (type == "yarn") {
        s.type = RopeType::Yarn;
        if (original) s.original_max_position_embeddings = *original;
        if (auto v = g.get_float_opt(p + "yarn_beta_fast"); v && *v > 0) s.beta_fast = *v;
        if (auto v = g.get_float_opt(p + "yarn_beta_slow"); v && *v > 0) s.beta_slow = *v;
        if (auto v = g.get_float_opt(p + "yarn_log_multiplier"))
            HYDRA_CHECK(*v == 0, "{}: '{}yarn_log_multiplier' (DeepSeek's YaRN) is not supported", g.source(),
                        p);
        HYDRA_CHECK(factor.has_value(), "{}: '{}factor' is missing for YaRN", g.source(), p);
        if (auto v = g.get_float_opt(p + "attn_factor"); v && *v != 1.0)
            s.attention_factor = *v * (*factor > 1 ? 0.1 * std::log(*factor) + 1.0 : 1.0);
    } else {
        fail(
            "{}: RoPE scaling '{}' is not supported (supported: none, linear, yarn, and Llama 3's "
            "rope_freqs)",
            g.source(), type);
    }
    HYDRA_CHECK(factor.has_value(), "{}: '{}factor' is missing for RoPE scaling '{}'", g.source(), p, type);
    s.factor = *factor;
    return s;
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& g) {
    ModelConfig c;
    c.architecture = g.get_string("general.architecture");
    HYDRA_CHECK(c.architecture == "llama" || c.architecture == "qwen2" || c.architecture == "qwen3",
                "{}: architecture '{}' is not supported (supported: llama, qwen2, qwen3)", g.source(),
                c.architecture);
    const std::string a = c.architecture + ".";
    c.name = g.get_string_opt("general.name").value_or(g.source());
    c.hidden_size = require_positive(g, a + "embedding_length");
    c.num_layers = require_positive(g, a + "block_count");
    c.intermediate_size = require_positive(g, a + "feed_forward_length");
    c.num_heads = require_positive(g, a + "attention.head_count");
    c.num_kv_heads = g.get_int_opt(a + "attention.head_count_kv").value_or(c.num_heads);
    HYDRA_CHECK(c.num_heads <= c.hidden_size, "{}: head_count {} exceeds embedding_length {}", g.source(),
                c.num_heads, c.hidden_size);
    c.head_dim = g.get_int_opt(a + "attention.key_length").value_or(c.hidden_size / c.num_heads);
    const int64_t value_length = g.get_int_opt(a + "attention.value_length").value_or(c.head_dim);
    HYDRA_CHECK(value_length == c.head_dim, "{}: value_length {} != key_length {} is not supported", g.source(),
                value_length, c.head_dim);
    c.rope_dim = g.get_int_opt(a + "rope.dimension_count").value_or(c.head_dim);
    HYDRA_CHECK(c.rope_dim == c.head_dim, "{}: partial RoPE ({} of {} dims) is not supported", g.source(), c.rope_dim,
                c.head_dim);
    c.rope_theta = float(g.get_float_opt(a + "rope.freq_base").value_or(10000.0));
    c.rms_norm_eps = float(g.get_float(a + "attention.layer_norm_rms_epsilon"));
    c.max_position_embeddings = g.get_int_opt(a + "context_length").value_or(0);
    c.rope_scaling = rope_scaling_from_gguf(g, c);

    const GgufTensorInfo& embd = g.tensor("token_embd.weight");
    HYDRA_CHECK(embd.dims.size() == 2 && embd.dims[0] == c.hidden_size,
                "{}: tensor 'token_embd.weight' must be [{}, vocab], found {} dims", g.source(), c.hidden_size,
                embd.dims.size());
    c.vocab_size = embd.dims[1];
    c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
    c.attention_bias = g.find_tensor("blk.0.attn_q.bias") != nullptr;
    c.qk_norm = g.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
    if (auto bos = g.get_int_opt("tokenizer.ggml.bos_token_id")) c.bos_token_ids = {int32_t(*bos)};
    if (auto eos = g.get_int_opt("tokenizer.ggml.eos_token_id")) c.eos_token_ids = {int32_t(*eos)};
    if (auto eot = g.get_int_opt("tokenizer.ggml.eot_token_id"))
        if (c.eos_token_ids.empty() || c.eos_token_ids[0] != *eot) c.eos_token_ids.push_back(int32_t(*eot));
    c.validate(g.source());
    return c;
}

void unpermute_qk_rows(float* rows, int64_t n_head, int64_t head_dim, int64_t cols) {
    const int64_t half = head_dim / 2;
    std::vector<float> tmp(static_cast<size_t>(head_dim * cols));
    for (int64_t h = 0; h < n_head; ++h) {
        float* head = rows + h * head_dim * cols;
        for (int64_t i = 0; i < half; ++i)
            for (int64_t j = 0; j < 2; ++j)
                std::memcpy(&tmp[size_t((j * half + i) * cols)], head + (2 * i + j) * cols, size_t(cols) * 4);
        std::memcpy(head, tmp.data(), tmp.size() * 4);
    }
}

std::unique_ptr<LlamaModel> load_llama_from_gguf(const GgufFile& g, std::map<std::string, int>* type_histogram,
                                                 bool keep_quantized) {
    ModelConfig cfg = config_from_gguf(g);
    auto model = std::make_unique<LlamaModel>(cfg);
    const bool permuted = cfg.architecture == "llama";  // llama.cpp permutes q/k only for LLAMA rope type

    auto load = [&](const std::string& gguf_name, const std::string& hf_name, bool required) {
        const GgufTensorInfo* info = g.find_tensor(gguf_name);
        if (!info) {
            HYDRA_CHECK(!required, "{}: missing tensor '{}'", g.source(), gguf_name);
            return;
        }
        if (!model->params().has(hf_name)) return;
        Tensor dst = model->params().get(hf_name);
        // GGUF dims are reversed PyTorch dims: [in, out] for a [out, in] weight.
        Shape expected(dst.shape().rbegin(), dst.shape().rend());
        Shape found(info->dims.begin(), info->dims.end());
        HYDRA_CHECK(found == expected, "{}: tensor '{}' has dims {}, expected {} for this configuration", g.source(),
                    gguf_name, shape_str(found), shape_str(expected));
        const GgmlTypeInfo* ti = ggml_type_info(uint32_t(info->type));
        HYDRA_CHECK(ti && ti->can_dequantize, "{}: tensor '{}' has type {} which cannot be dequantized", g.source(),
                    gguf_name, ti ? std::string(ti->name) : std::to_string(uint32_t(info->type)));
        if (type_histogram) (*type_histogram)[std::string(ti->name)]++;
        const int64_t cols = info->dims[0];
        const int64_t n_rows = info->numel / cols;
        const size_t row_bytes = ggml_row_bytes(info->type, cols);
        const uint8_t* src = g.tensor_data(*info);
        float* out = dst.f32();
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < n_rows; ++r) dequantize_row(info->type, src + size_t(r) * row_bytes, out + r * cols, cols);
        const bool qk = permuted && (hf_name.find("q_proj") != std::string::npos ||
                                     hf_name.find("k_proj") != std::string::npos);
        const int64_t heads = hf_name.find("q_proj") != std::string::npos ? cfg.num_heads : cfg.num_kv_heads;
        if (qk) unpermute_qk_rows(out, heads, cfg.head_dim, dst.rank() == 2 ? dst.dim(1) : 1);
        // Keep the original blocks of quantized matrices for memory-bound decode (see quant_gemv.h).
        if (keep_quantized && dst.rank() == 2 && cpu::quant_gemv_supported(info->type)) {
            QuantizedWeight qw;
            qw.type = info->type;
            qw.rows = n_rows;
            qw.cols = cols;
            qw.bytes.assign(src, src + size_t(n_rows) * row_bytes);
            if (qk) {  // move whole block rows: HF row j*(Dh/2)+i <- GGUF row 2i+j within each head
                const int64_t half = cfg.head_dim / 2;
                for (int64_t h = 0; h < heads; ++h)
                    for (int64_t i = 0; i < half; ++i)
                        for (int64_t j = 0; j < 2; ++j)
                            std::memcpy(&qw.bytes[size_t(h * cfg.head_dim + j * half + i) * row_bytes],
                                        src + size_t(h * cfg.head_dim + 2 * i + j) * row_bytes, row_bytes);
            }
            model->attach_quantized(hf_name, std::move(qw));
        }
    };

    load("token_embd.weight", "model.embed_tokens.weight", true);
    load("output_norm.weight", "model.norm.weight", true);
    if (!cfg.tie_word_embeddings) load("output.weight", "lm_head.weight", true);
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
        for (const auto& [gguf_suffix, hf_suffix] : kLayerNames) {
            const std::string hf = LlamaModel::layer_name(l, hf_suffix);
            const bool required = model->params().has(hf);
            load(fmt::format("blk.{}.{}", l, gguf_suffix), hf, required);
        }
    }
    return model;
}

}  // namespace hydra
