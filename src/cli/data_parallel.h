// The command line's side of data-parallel training (`--gpus N` on train / distill): either this process
// launches N workers of itself and supervises them (train/worker_launcher.h), or it is one of the workers
// (RANK / WORLD_SIZE ... set by hydra or by a cluster launcher, train/dist_env.h) and joins the NCCL group
// (gpu/nccl_collective.h), or it trains alone.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "train/collective.h"

namespace hydra::cli {

// Adds --gpus to a training command (0: one process unless the environment names a rank).
void add_gpus_option(CLI::App& cmd, int& gpus);

// With gpus > 1 and no rank environment: starts the workers, waits for them and exits the process with their
// status (never returns). With a rank environment: the collective of this rank (device must be cuda; throws
// otherwise, or when --gpus disagrees with WORLD_SIZE). Else null (one process).
std::unique_ptr<Collective> join_data_parallel(int gpus, const std::string& device);

}  // namespace hydra::cli
