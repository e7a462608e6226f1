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
    int64_t attached = 0;
    for (const LlamaModel::LinearSlot& s : model.linear_slots()) {
        if (s.f32->empty() || !s.copy->empty() || s.f32->dim(1) % 32 != 0) continue;
        *s.copy = quantize_q8_0(*s.f32, s.name);
        ++attached;
    }
    return attached;
}

}  // namespace hydra
