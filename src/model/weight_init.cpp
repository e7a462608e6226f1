// Normal initialisation of a teacher's weights (see weight_init.h).
#include "model/weight_init.h"

#include <string>

#include "core/error.h"

namespace hydra {

void init_weights_normal(LlamaModel& model, double std, Rng& rng) {
    HYDRA_CHECK(std > 0, "weight init: std {} must be positive", std);
    for (size_t i = 0; i < model.params().entries().size(); ++i) {
        const ArenaEntry& e = model.params().entries()[i];
        Tensor t = model.params().get(i);
        // every RMSNorm weight (input/post-attention/final, q/k norm) starts at one
        const bool norm = e.name.find("norm") != std::string::npos;
        float* p = t.f32();
        for (int64_t j = 0; j < t.numel(); ++j) p[j] = norm ? 1.0f : float(std * rng.normal());
    }
}

}  // namespace hydra
