// bf16_gemm_weights (see bf16_weights.h).
#include "train/bf16_weights.h"

#include "core/half.h"

namespace hydra {

std::vector<float> bf16_gemm_weights(const ParamArena& layout, const float* params) {
    std::vector<float> out(params, params + layout.numel());
    for (const ArenaEntry& e : layout.entries()) {
        if (e.shape.size() != 2) continue;
        float* w = out.data() + e.offset;
        for (int64_t i = 0; i < e.shape[0] * e.shape[1]; ++i) w[i] = bf16_to_f32(f32_to_bf16(w[i]));
    }
    return out;
}

}  // namespace hydra
