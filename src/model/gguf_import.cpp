// GGUF -> LlamaModel import (see gguf_import.h).
#include "model/gguf_import.h"

#include <cstring>
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
    if (auto scaling = g.get_string_opt(a + "rope.scaling.type"))
        HYDRA_CHECK(*scaling == "none", "{}: RoPE scaling '{}' is not supported", g.source(), *scaling);

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
