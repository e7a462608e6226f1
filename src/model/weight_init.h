// Weight initialisation for models trained from scratch (`hydra train`) or made from a config alone
// (`hydra init`): N(0, std) for every matrix and the embedding, ones for the norms, as transformers'
// _init_weights does with initializer_range. Teachers only: a hybrid is made from a teacher by
// convert_to_hybrid, which initialises its GDN weights from the FA weights.
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "model/llama_model.h"

namespace hydra {

// Fills every parameter of `model` in arena order from `rng`; std > 0.
void init_weights_normal(LlamaModel& model, double std, Rng& rng);

}  // namespace hydra
