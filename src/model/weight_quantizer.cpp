// Q8_0 copies of a model's linear weights for CPU decoding (see weight_quantizer.h).
#include "model/weight_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/half.h"
#include "io/ggml_types.h"

namespace hydra {

QuantizedWeight quantize_q8_0(const Tensor& W, const std::string& what) {
    HYDRA_CHECK(W.rank() == 2 && W.dim(1) % 32 == 0 && W.dim(1) > 0,
                "{}: a Q8_0 copy needs a matrix whose rows are whole blocks of 32, not {}", what,
                shape_str(W.shape()));
    const int64_t rows = W.dim(0), cols = W.dim(1), blocks = cols / 32;
    QuantizedWeight q;
    q.type = GgmlType::Q8_0;
    q.rows = rows, q.cols = cols;
    const size_t row_bytes = ggml_row_bytes(GgmlType::Q8_0, cols);
    HYDRA_ASSERT(row_bytes == size_t(blocks) * 34, "Q8_0 row of {} values: {} bytes", cols, row_bytes);
    q.bytes.resize(size_t(rows) * row_bytes);
    const float* w = W.f32();
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < blocks; ++b) {
            const float* x = w + r * cols + b * 32;
            uint8_t* blk = q.bytes.data() + size_t(r) * row_bytes + size_t(b) * 34;
            float amax = 0.f;
            for (int j = 0; j < 32; ++j) {
                HYDRA_CHECK(std::isfinite(x[j]), "{}: weight ({}, {}) is not finite", what, r, b * 32 + j);
                amax = std::max(amax, std::fabs(x[j]));
            }
            // the scale as stored (f16), so that the rounding below uses the value the GEMV multiplies by
            const uint16_t dh = f32_to_f16(amax / 127.f);
            const float d = f16_to_f32(dh), id = d > 0.f ? 1.f / d : 0.f;
            std::memcpy(blk, &dh, 2);
            for (int j = 0; j < 32; ++j)
                blk[2 + j] = uint8_t(int8_t(std::clamp(std::nearbyint(x[j] * id), -127.f, 127.f)));
        }
    return q;
}

int64_t quantize_linear_weights(LlamaModel& model) {
    const ModelConfig& cfg = model.config();
    int64_t attached = 0;
    auto add = [&](const std::string& name, const Tensor& f32, const QuantizedWeight& existing) {
        if (f32.empty() || !existing.empty() || f32.dim(1) % 32 != 0) return;
        attached += model.attach_quantized(name, quantize_q8_0(f32, name)) ? 1 : 0;
    };
    add(cfg.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", model.lm_head(),
        model.quantized_lm_head());
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
        const LayerWeights& w = model.layer(l);
        const GdnWeights& g = w.la;
        auto name = [&](const char* suffix) { return LlamaModel::layer_name(l, suffix); };
        add(name("self_attn.q_proj.weight"), w.wq, w.qwq);
        add(name("self_attn.k_proj.weight"), w.wk, w.qwk);
        add(name("self_attn.v_proj.weight"), w.wv, w.qwv);
        add(name("self_attn.o_proj.weight"), w.wo, w.qwo);
        add(name("mlp.gate_proj.weight"), w.w_gate, w.qw_gate);
        add(name("mlp.up_proj.weight"), w.w_up, w.qw_up);
        add(name("mlp.down_proj.weight"), w.w_down, w.qw_down);
        add(name("linear_attn.q_proj.weight"), g.wq, g.qwq);
        add(name("linear_attn.k_proj.weight"), g.wk, g.qwk);
        add(name("linear_attn.v_proj.weight"), g.wv, g.qwv);
        add(name("linear_attn.a_proj.weight"), g.wa, g.qwa);
        add(name("linear_attn.b_proj.weight"), g.wb, g.qwb);
        add(name("linear_attn.g_proj.weight"), g.wg, g.qwg);
    }
    return attached;
}

}  // namespace hydra
