// The CUDA training engine for the `hydra train` / `hydra distill` loop (train/train_engine.h): the
// student (and, for the KL objective, the teacher) uploaded once, GpuTrainStep for forward + backward,
// DeviceAdamW over the fp32 master arena (writing the bf16 mirror) with the trainer's parameter spans
// (frozen groups untouched, per-group lr / weight-decay scales), the global gradient norm with the
// non-finite count computed on the device, clipping folded into the AdamW step. Checkpoints download
// the weights and m, v into the host model and CPU AdamW (same layout, same files as the CPU path).
// run.recompute selects per-layer activation recomputation (gpu_train_step.h).
#pragma once

#include <memory>

#include "train/train_engine.h"

namespace hydra::gpu {

// A TrainEngineFactory (throws hydra::Error when no CUDA device is usable or the model is unsupported).
std::unique_ptr<TrainEngine> make_gpu_train_engine(const TrainEngineSetup& setup);

}  // namespace hydra::gpu
