// Validation of ModelConfig (see model_config.h).
#include "model/model_config.h"

#include "core/error.h"

namespace hydra {

void ModelConfig::validate(const std::string& source) const {
    auto positive = [&](int64_t v, const char* field, int64_t max) {
        HYDRA_CHECK(v > 0 && v <= max, "{}: {} = {} is out of range (expected 1..{})", source, field, v, max);
    };
    positive(vocab_size, "vocab_size", 1 << 24);
    positive(hidden_size, "hidden_size", 1 << 16);
    positive(intermediate_size, "intermediate_size", 1 << 18);
    positive(num_layers, "num_layers", 1024);
    positive(num_heads, "num_heads", 1024);
    positive(num_kv_heads, "num_kv_heads", 1024);
    positive(head_dim, "head_dim", 1024);
    HYDRA_CHECK(num_heads % num_kv_heads == 0, "{}: num_heads ({}) is not a multiple of num_kv_heads ({})", source,
                num_heads, num_kv_heads);
    HYDRA_CHECK(head_dim % 2 == 0, "{}: head_dim {} must be even for RoPE", source, head_dim);
    HYDRA_CHECK(rope_dim > 0 && rope_dim <= head_dim && rope_dim % 2 == 0,
                "{}: rope dimension {} must be even and at most head_dim {}", source, rope_dim, head_dim);
    HYDRA_CHECK(rms_norm_eps > 0 && rms_norm_eps < 1, "{}: rms_norm_eps {} out of range", source, rms_norm_eps);
    HYDRA_CHECK(rope_theta > 1, "{}: rope_theta {} out of range", source, rope_theta);
    validate_rope_scaling(rope_scaling, max_position_embeddings, source);
}

}  // namespace hydra
