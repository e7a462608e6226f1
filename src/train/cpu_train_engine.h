// The CPU TrainEngine: the `hydra train` loop's step on the host, the reference every other engine is
// checked against. It trains the loop's own LlamaModel and AdamW in place (no copy, so sync_to_host has
// nothing to do): the stage's forward + backward (model_train_step with the CE / KL objective, or
// stage 1's align_step against the teacher's layer boundaries), then, when the loss and every trainable
// gradient are finite, global-norm clipping and one AdamW step.
#pragma once

#include <memory>
#include <vector>

#include "model/llama_model.h"
#include "train/adamw.h"
#include "train/param_groups.h"
#include "train/train_config.h"
#include "train/train_engine.h"

namespace hydra {

// model, optimizer, spans, config and teacher (null unless the stage reads one) must outlive the engine.
std::unique_ptr<TrainEngine> make_cpu_train_engine(const TrainConfig& config, LlamaModel& model,
                                                   const LlamaModel* teacher,
                                                   const std::vector<ParamSpan>& spans, AdamW& optimizer);

}  // namespace hydra
