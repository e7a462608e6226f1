// The model's RoPE frequencies for the GPU kernels (see gpu_rope.h).
#include "gpu/gpu_rope.h"

#include "core/error.h"
#include "model/rope_scaling.h"

namespace hydra::gpu {

cuda::RopeFreqs gpu_rope_freqs(const ModelConfig& c) {
    HYDRA_CHECK(c.rope_dim % 2 == 0 && c.rope_dim / 2 <= cuda::RopeFreqs::kMaxPairs,
                "GPU RoPE: rope_dim {} is not supported (even, at most {})", c.rope_dim,
                2 * cuda::RopeFreqs::kMaxPairs);
    cuda::RopeFreqs f;
    // at the original context: every type but dynamic NTK ignores the length; dynamic starts unscaled
    const int64_t original = rope_original_context(c.rope_scaling, c.max_position_embeddings);
    const RopeFrequencies r = rope_frequencies(c, original);
    for (size_t i = 0; i < r.inv_freq.size(); ++i) f.inv_freq[i] = r.inv_freq[i];
    f.scale = float(r.attention_scale);
    if (c.rope_scaling.type == RopeType::Dynamic) {
        f.theta = double(c.rope_theta);
        f.ntk_factor = c.rope_scaling.factor;
        f.ntk_original = original;
    }
    return f;
}

}  // namespace hydra::gpu
